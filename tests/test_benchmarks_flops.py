"""The benchmarks' model-FLOP count (``benchmarks/flops.py``) against torch's own counter and a hand sum."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig, LlamaForCausalLM

_spec = importlib.util.spec_from_file_location(
    "bench_flops", Path(__file__).resolve().parents[1] / "benchmarks" / "flops.py"
)
flops = sys.modules["bench_flops"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(flops)

# (layers, hidden, heads, kv heads, intermediate, vocab, tied): plain, grouped-query, untied head
CONFIGS = [(2, 16, 2, 2, 32, 11, True), (1, 24, 4, 2, 40, 7, True), (3, 8, 2, 1, 16, 13, False)]


def _model(layers, hidden, heads, kv, inter, vocab, tied) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=tied,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("shape", CONFIGS)
def test_weights_counted_by_hand(shape):
    layers, d, heads, kv, inter, vocab, _ = shape
    D = d // heads
    per_layer = d * heads * D + 2 * d * kv * D + heads * D * d + 3 * d * inter  # q, k, v, o, gate/up/down
    fm = flops.FlopModel.of(_model(*shape))
    assert fm.matmul_params == layers * per_layer + d * vocab  # + the LM head; the embedding lookup is not
    assert fm.layers == layers and fm.attn_width == heads * D
    assert (d, vocab) in fm.shapes and (inter, d) in fm.shapes


@pytest.mark.parametrize("shape", CONFIGS)
def test_update_matmul_flops_match_torch_counter(shape):
    """Forward + backward of the Linears is 6 W per token: what torch's FlopCounterMode counts for mm."""
    model = _model(*shape)
    seq = torch.tensor([5, 9, 3])
    ids = torch.randint(0, model.config.vocab_size, (1, int(seq.sum())))  # one unpadded row of all tokens
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False).logits.sum().backward()
    counted = counter.get_flop_counts()["Global"]
    mm = sum(v for k, v in counted.items() if "mm" in str(k) and "bmm" not in str(k))
    no_attention = dataclasses.replace(flops.FlopModel.of(model), attn_width=0)
    assert no_attention.update(seq) == mm


@pytest.mark.parametrize("shape", CONFIGS)
def test_update_matmul_flops_of_a_lora_policy_match_torch_counter(shape):
    """With LoRA the frozen base gets input gradients only: 4 W + 2 W_t per token, against 6 W fully trained.
    Torch counts a little less: nothing below the first layer needs a gradient, so its input gradients
    are skipped (12% of the 1-layer model's count, ~1% of a 30-layer one's); the full 6 W is 1.4x off."""
    from lightning_rlvr.models import apply_lora

    model = apply_lora(_model(*shape), {"r": 2, "lora_alpha": 4, "target_modules": "all-linear"})
    fm = flops.FlopModel.of(model)
    assert 0 < fm.trained_params < fm.matmul_params / 2
    assert fm.shapes == flops.FlopModel.of(_model(*shape)).shapes  # the peak is taken on the model's shapes
    seq = torch.tensor([5, 9, 3])
    ids = torch.randint(0, model.config.vocab_size, (1, int(seq.sum())))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False).logits.sum().backward()
    counted = counter.get_flop_counts()["Global"]
    mm = sum(v for k, v in counted.items() if "mm" in str(k) and "bmm" not in str(k))
    estimate = dataclasses.replace(fm, attn_width=0).update(seq)
    assert mm <= estimate <= 1.15 * mm
    assert dataclasses.replace(fm, attn_width=0, trained_params=fm.matmul_params).update(seq) > 1.3 * mm


def test_attention_terms_by_hand():
    fm = flops.FlopModel(matmul_params=100, trained_params=100, layers=2, attn_width=8, shapes=((8, 8),))
    prompts, completions = torch.tensor([3, 1, 4]), torch.tensor([2, 5, 0])
    pairs = zip(prompts.tolist(), completions.tolist())
    gen = sum(2 * 100 + 4 * 2 * 8 * (p + j) for p, n in pairs for j in range(n))
    assert fm.generation(prompts, completions) == gen
    seqs = prompts + completions
    upd = sum(6 * 100 + 12 * 2 * 8 * i for s in seqs.tolist() for i in range(1, s + 1))
    assert fm.update(seqs) == upd


def test_completion_lengths_stop_at_first_eos():
    eos = 2  # 0 is padding
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8], [2, 0, 0, 0], [5, 2, 2, 9]])
    assert flops.completion_lengths(ids, eos).tolist() == [2, 4, 1, 2]


def test_matmul_peak_is_a_rate_on_the_given_shapes():
    rate, where = flops.matmul_peak(((8, 16), (16, 4)), rows=32, tries=2, work=1e5)
    assert rate > 0
    assert where in ("[32, 8] x [8, 16]", "[32, 16] x [16, 4]")


def test_needed_update_counts_a_shared_prompt_once_and_the_head_only_where_a_logit_trains():
    fm = flops.FlopModel(
        matmul_params=100,
        trained_params=10,
        head_params=30,
        head_trained=False,
        layers=2,
        attn_width=8,
        shapes=((8, 8),),
    )
    prompts, completions, group = torch.tensor([3, 3, 5]), torch.tensor([2, 4, 1]), torch.tensor([0, 0, 1])
    body, head = 4 * 70 + 2 * 10, 4 * 30  # frozen head: forward and input gradient only
    want = 0.0
    for p, c, first in ((3, 2, True), (3, 4, False), (5, 1, True)):
        tokens = (p if first else 0) + c
        keys = (sum(range(1, p + 1)) if first else 0) + sum(p + j for j in range(1, c + 1))
        want += body * tokens + head * c + 12 * 2 * 8 * keys
    assert fm.update_needed(prompts, completions, group) == want
    plain = dataclasses.replace(fm, head_params=0, trained_params=100)  # nothing shared, no head: update's
    assert plain.update_needed(prompts, completions) == plain.update(prompts + completions)
