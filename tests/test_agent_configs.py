"""configs/agent/*.yaml: a method's settings for episodes, composed after its configs/method/ file.

They exist because the method files are written for the arithmetic quickstart's 24 symbols; on a word
vocabulary (``lightning_rlvr/envs/vocab.py``) their literal text must be made of tokens every such
vocabulary has, and the self-conditioned teachers' contexts must keep the layout of an episode.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from lightning_rlvr.credit.self_conditioned import ContextTemplate
from lightning_rlvr.envs.episodes import expert_rollout
from lightning_rlvr.envs.vocab import build_word_tokenizer, tokenizer_for, word_vocabulary
from tests.conftest import AGENT_CONFIGS, REPO
from tests.toy_env import EchoWords

OVERLAYS = sorted(AGENT_CONFIGS.glob("*.yaml"))
TEMPLATES = ("template", "peer_template", "answer_template", "hindsight_template")  # with {fields}
TEXTS = ("separator", "pass_text", "fail_text", "step_delimiter")  # plain text
FIELD = re.compile(r"\{(prompt|reference|answer|future|verdict|feedback)\}")


def credit_settings(overlay: Path) -> tuple[str, dict]:
    """The credit class path and its init_args: the method file's, updated by the overlay's."""
    method = yaml.safe_load((REPO / "configs" / "method" / overlay.name).read_text())["model"]["credit"]
    extra = (yaml.safe_load(overlay.read_text()).get("model") or {}).get("credit") or {}
    assert "class_path" not in extra, f"{overlay.name} must not change the method's class"
    return method["class_path"], {**method.get("init_args", {}), **extra.get("init_args", {})}


def test_there_are_overlays():
    assert {p.stem for p in OVERLAYS} >= {"hp_rlvr", "sc_grpo", "hsd"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.stem)
def test_an_overlay_completes_its_method_file_and_the_constructor_accepts_it(overlay):
    class_path, init_args = credit_settings(overlay)
    module, name = class_path.rsplit(".", 1)
    getattr(importlib.import_module(module), name)(**init_args)  # unknown or bad settings raise


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.stem)
def test_an_overlays_literal_text_is_known_to_every_word_vocabulary(overlay):
    """Encoded with a vocabulary of no game at all (special tokens and the base alphabet), the text
    between the placeholders has no <unk>: every game's vocabulary has these tokens too."""
    tok = build_word_tokenizer(word_vocabulary([]))
    _, init_args = credit_settings(overlay)
    pieces = [p for key in TEMPLATES if key in init_args for p in FIELD.split(init_args[key])[::2]]
    pieces += [init_args[key] for key in TEXTS if key in init_args]
    assert pieces
    for piece in filter(None, pieces):
        ids = tok(piece, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids, f"{overlay.name}: {piece!r} -> {tok.convert_ids_to_tokens(ids)}"


@pytest.mark.parametrize("key", ["template", "peer_template", "answer_template"])
def test_a_self_conditioned_teacher_context_keeps_the_layout_of_an_episode(key):
    """On real episodes (EchoWords, its word tokenizer): every action ends with EOS and an observation
    follows it; a template's literal <eos> is that one token, so the teacher reads the peer's episode,
    EOS, and the first observation again, as an observation after an action. A template without
    {reference} (HSD's answer-only teacher) gives the student's own context."""
    env = EchoWords()
    tok = tokenizer_for(env)
    problem = next(p for p in (env.problem("train", i) for i in range(16)) if len(p.meta["words"]) >= 2)
    rollout = expert_rollout(env, [problem, problem], tok)  # a row and its (winning) peer
    for row in range(rollout.num_rows):
        ids, policy = rollout.completion_tokens(row).tolist(), rollout.loss_mask[row].tolist()
        ends = [t for t in range(len(ids)) if policy[t] and (t + 1 == len(ids) or not policy[t + 1])]
        assert len(ends) >= 2 and all(ids[t] == tok.eos_token_id for t in ends)
        assert all(not policy[t + 1] for t in ends[:-1])  # an observation follows every action but the last
    encode = lambda text: torch.tensor(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    scorer = SimpleNamespace(encode=encode)  # Scorer.encode's call
    users = [o for o in OVERLAYS if key in credit_settings(o)[1]]
    assert users, f"no overlay sets {key}"
    for overlay in users:
        _, init_args = credit_settings(overlay)
        template = ContextTemplate(init_args[key])
        prompt = rollout.prompt_tokens(0).tolist()
        peer = rollout.completion_tokens(1).tolist()
        context = template.build(scorer, rollout, 0, 1 if "reference" in template.fields else None).tolist()
        if "reference" in template.fields:
            assert context == prompt + peer[:-1] + [tok.eos_token_id] + prompt, overlay.name
        else:
            assert context == prompt, overlay.name
