"""PromptFormat: the tokenizer's chat template when it has one, a plain template otherwise."""

from __future__ import annotations

import pytest

from lightning_rlvr.models import build_tiny_tokenizer
from lightning_rlvr.prompts import PromptFormat

CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture
def chat_tokenizer():
    tok = build_tiny_tokenizer()
    tok.chat_template = CHAT
    return tok


def test_plain_tokenizer_uses_the_template():
    tok = build_tiny_tokenizer()
    assert PromptFormat().render(tok, "Q 1+2=") == "Q 1+2="
    fmt = PromptFormat(template="{prompt} Put it in \\boxed{}.", system="Be brief.")
    assert fmt.render(tok, "2+2?") == "Be brief.\n2+2? Put it in \\boxed{}."


def test_chat_template_with_generation_prompt(chat_tokenizer):
    out = PromptFormat(system="Be brief.").render(chat_tokenizer, "2+2?")
    assert out == "<|system|>Be brief.<|end|><|user|>2+2?<|end|><|assistant|>"
    out = PromptFormat(template="{prompt}\nThink.").render(chat_tokenizer, "2+2?")
    assert out == "<|user|>2+2?\nThink.<|end|><|assistant|>"


def test_chat_never_and_always(chat_tokenizer):
    assert PromptFormat(chat="never").render(chat_tokenizer, "x") == "x"
    assert PromptFormat(chat="always").render(chat_tokenizer, "x").endswith("<|assistant|>")
    with pytest.raises(ValueError, match="no chat_template"):
        PromptFormat(chat="always").render(build_tiny_tokenizer(), "x")


def test_bad_arguments():
    with pytest.raises(ValueError):
        PromptFormat(chat="sometimes")
    with pytest.raises(ValueError):
        PromptFormat(template="no placeholder")
