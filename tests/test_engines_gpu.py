"""``VLLMEngine`` on a GPU: skipped on machines without CUDA or vLLM (hardware, not missing work).

``benchmarks/gpu_check.sh`` runs these together with a short GRPO fit and a throughput comparison.
"""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr import AdditionTask, TinyPolicy
from lightning_rlvr.models import apply_lora
from lightning_rlvr.scoring.scorer import Scorer
from tests.rollouts import sample

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU")
vllm = pytest.importorskip("vllm") if torch.cuda.is_available() else None

POLICY = TinyPolicy(layers=2, hidden=64, heads=4, intermediate=128, max_positions=96)
PROBLEMS = [AdditionTask(digits=2).train_problem(i) for i in range(6)]


def engine():
    from lightning_rlvr.engines.vllm import VLLMEngine

    return VLLMEngine(gpu_memory_utilization=0.2, enforce_eager=True)


def test_vllm_greedy_matches_generate_and_reports_the_trainers_logprobs():
    model, tok = POLICY.load()
    model = model.cuda()
    eng = engine()
    want = sample(model, tok, PROBLEMS, 2, 16, do_sample=False)
    got = sample(model, tok, PROBLEMS, 2, 16, do_sample=False, engine=eng)
    agree = (got.completion_ids[:, :8] == want.completion_ids[:, :8]).float().mean()
    assert agree > 0.95  # greedy; bf16/fp32 kernels may flip a rare near-tie
    logp = Scorer(model, got).policy().logp
    keep = got.completion_mask.bool()
    torch.testing.assert_close(got.engine_logp[keep], logp[keep], atol=1e-2, rtol=1e-2)


def test_vllm_sees_the_update_after_sync_weights():
    model, tok = POLICY.load()
    model = model.cuda()
    eng = engine()
    before = sample(model, tok, PROBLEMS, 2, 12, do_sample=False, engine=eng)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    eng.sync_weights(model)
    after = sample(model, tok, PROBLEMS, 2, 12, do_sample=False, engine=eng)
    assert not torch.equal(after.completion_ids, before.completion_ids)
    want = sample(model, tok, PROBLEMS, 2, 12, do_sample=False)
    assert (after.completion_ids[:, :6] == want.completion_ids[:, :6]).float().mean() > 0.95


def test_vllm_receives_lora_adapters_as_adapters():
    model, tok = POLICY.load()
    model = apply_lora(model, {"r": 4, "lora_alpha": 8, "init_lora_weights": False}).cuda()
    eng = engine()
    eng.sync_weights(model)
    got = sample(model, tok, PROBLEMS, 2, 12, do_sample=False, engine=eng)
    assert eng._lora is not None  # adapters went over as a LoRA request, not merged weights
    want = sample(model, tok, PROBLEMS, 2, 12, do_sample=False)
    assert (got.completion_ids[:, :6] == want.completion_ids[:, :6]).float().mean() > 0.95
