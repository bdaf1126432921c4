"""A method's text on episodes comes from the environment by role (``Environment.role_texts``), not a file.

On a word vocabulary (``lightning_rlvr/envs/vocab.py``) a method's literal text must be made of tokens
every such vocabulary has, and the self-conditioned teachers' contexts must keep the layout of an
episode. ``configs/agent/*.yaml`` hold only run-size settings now (HP-RLVR's batch at G = 1).
"""

from __future__ import annotations

import importlib
import re
from types import SimpleNamespace

import pytest
import torch
import yaml

from lightning_rlvr.collect.episodes import expert_rollout
from lightning_rlvr.core import text_roles as roles
from lightning_rlvr.credit.self_conditioned import ContextTemplate
from lightning_rlvr.envs.base import Environment
from lightning_rlvr.envs.vocab import build_word_tokenizer, tokenizer_for, word_vocabulary
from tests.conftest import AGENT_CONFIGS, REPO
from tests.toy_env import EchoWords

OVERLAYS = sorted(AGENT_CONFIGS.glob("*.yaml"))
CONTEXTS = (roles.PEER_CONTEXT, roles.PEER_ANSWER_CONTEXT, roles.ANSWER_CONTEXT, roles.NO_PEER_CONTEXT)
FIELD = re.compile(r"\{(prompt|reference|answer|future|verdict|feedback)\}")
METHODS = {"sc_grpo": "SCGRPOCredit", "hsd": "HSDCredit", "hp_rlvr": "HPRLVRCredit"}


def credit_class(key: str):
    path = yaml.safe_load((REPO / "configs" / "method" / f"{key}.yaml").read_text())["model"]["credit"]
    module, name = path["class_path"].rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("key", sorted(METHODS))
def test_the_environments_texts_are_settings_of_the_self_conditioned_and_hindsight_methods(key):
    cls = credit_class(key)
    assert cls.__name__ == METHODS[key]
    settings = cls.settings_from(Environment.role_texts)
    assert settings and set(settings) <= set(cls.text_defaults)
    cls(**settings)  # the constructor accepts them


def test_the_environments_roles_are_known_roles():
    assert set(Environment.role_texts) <= set(roles.ROLES)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.stem)
def test_an_overlay_holds_no_credit_text(overlay):
    extra = (yaml.safe_load(overlay.read_text()).get("model") or {}).get("credit") or {}
    assert not extra, f"{overlay.name}: a method's text on episodes belongs to the environment"


@pytest.mark.parametrize("role", sorted(Environment.role_texts))
def test_the_environments_literal_text_is_known_to_every_word_vocabulary(role):
    """Encoded with a vocabulary of no game at all (special tokens and the base alphabet), the text
    between the placeholders has no <unk>: every game's vocabulary has these tokens too."""
    tok = build_word_tokenizer(word_vocabulary([]))
    text = Environment.role_texts[role]
    pieces = [p for t in (text if isinstance(text, list) else [text]) for p in FIELD.split(t)[::2]]
    assert pieces
    for piece in filter(None, pieces):
        ids = tok(piece, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids, f"{role}: {piece!r} -> {tok.convert_ids_to_tokens(ids)}"


@pytest.mark.parametrize("role", [r for r in CONTEXTS if r in Environment.role_texts])
def test_a_self_conditioned_teacher_context_keeps_the_layout_of_an_episode(role):
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
    scorer = SimpleNamespace(encode=encode, render=None)  # Scorer.encode's call, the plain layout
    template = ContextTemplate(Environment.role_texts[role])
    prompt = rollout.prompt_tokens(0).tolist()
    peer = rollout.completion_tokens(1).tolist()
    context = template.build(scorer, rollout, 0, 1 if "reference" in template.fields else None).tolist()
    if "reference" in template.fields:
        assert context == prompt + peer[:-1] + [tok.eos_token_id] + prompt, role
    else:
        assert context == prompt, role
