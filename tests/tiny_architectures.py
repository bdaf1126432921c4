"""Tiny random models of the architectures users bring, as Hugging Face folders and as GGUF files.

``save_hf(dir, arch)`` writes a 2-layer random model of ``arch`` (``ARCHS``: Llama, Qwen2 with q/k/v
biases, Gemma 2, Gemma 3 text) with a byte-level BPE tokenizer (ChatML template, or none); ``write_gguf``
writes the same model as a GGUF file with the ``gguf`` package's writer, the tensors named and laid out
as llama.cpp's converter lays them out (Llama's q/k rows interleaved for its rotary, Gemma's norms
stored as 1 + w) and the tokenizer as GGUF metadata, so transformers' GGUF reader gives the model back.
Built in well under a second each; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
# arch -> (transformers model_type, GGUF architecture, config fields beyond the shared shape)
ARCHS = {
    "llama": ("llama", "llama", {}),
    "qwen2": ("qwen2", "qwen2", {}),
    "gemma2": ("gemma2", "gemma2", {"head_dim": 16, "sliding_window": 32}),
    "gemma3": ("gemma3_text", "gemma3", {"head_dim": 16, "sliding_window": 32}),
}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of the 256 bytes (what byte-level BPE vocabularies are written in)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, map(chr, chars)))


def vocabulary() -> list[str]:
    """Every token in id order: the 256 bytes, the merges' results, then the special tokens."""
    return list(_bytes_to_unicode().values()) + ["".join(m) for m in MERGES] + SPECIALS


def byte_tokenizer(chat: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE over ``vocabulary()`` (GPT-2's split), ChatML template when ``chat``."""
    tokens = vocabulary()
    vocab = {t: i for i, t in enumerate(tokens[: -len(SPECIALS)])}
    tok = Tokenizer(models.BPE(vocab, list(MERGES)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>" if chat else "<|endoftext|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHATML if chat else None
    return tokenizer


def tiny_model(arch: str, tokenizer, rope_theta: float = 100000.0, seed: int = 0) -> PreTrainedModel:
    """A 2-layer random causal LM of ``arch`` for ``tokenizer`` (Qwen2's q/k/v carry biases)."""
    model_type, _, extra = ARCHS[arch]
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        rope_theta=rope_theta,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **extra,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        with torch.no_grad():  # norms away from 1 and biases away from 0, so a dropped one would show
            for name, p in model.named_parameters():
                if "norm" in name or name.endswith(".bias"):
                    p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def save_hf(directory: Path, arch: str, chat: bool = True) -> Path:
    """``tiny_model(arch)`` and its tokenizer written by ``save_pretrained`` to ``directory``."""
    tokenizer = byte_tokenizer(chat)
    tiny_model(arch, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def write_gguf(path: Path, model: PreTrainedModel, tokenizer, gguf_arch: str | None = None) -> Path:
    """``model`` and ``tokenizer`` as a float32 GGUF file, laid out as llama.cpp's converter writes it."""
    import gguf

    cfg = model.config
    arch = gguf_arch or ARCHS[[k for k, v in ARCHS.items() if v[0] == cfg.model_type][0]][1]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
    writer.add_rope_freq_base(rope.get("full_attention", rope)["rope_theta"])
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    if getattr(cfg, "sliding_window", None):
        writer.add_sliding_window(cfg.sliding_window)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    tokens = vocabulary()
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges([" ".join(m) for m in MERGES])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = tensor.detach().float()
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            n = heads if "q_proj" in name else kv_heads  # llama.cpp's permute, undone by the reader
            data = (
                data.reshape(n, 2, data.shape[0] // n // 2, *data.shape[1:])
                .swapaxes(1, 2)
                .reshape(data.shape)
            )
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            data = data + 1  # llama.cpp stores Gemma's (1 + w) norms
        writer.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), data.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def fit_args(name_or_path: Path | str, *extra: str) -> list[str]:
    """CLI arguments (after the tiny quickstart's configs) fitting one step of ``PretrainedPolicy(path)``."""
    policy = {
        "class_path": "lightning_rlvr.models.PretrainedPolicy",
        "init_args": {"name_or_path": str(name_or_path)},
    }
    return [
        "--model.policy",
        json.dumps(policy),
        "--model.warm_start",
        "null",
        "--trainer.max_steps",
        "1",
        "--model.max_new_tokens",
        "8",
        *extra,
    ]
