"""Every full-vocabulary divergence of the credit methods treats 0 * log 0 as 0.

A teacher (or student) distribution with exact zeros -- log-prob -inf, as from a
masked vocabulary entry -- must give the divergence of the remaining mass, never
NaN, in the value and in the gradient. References are computed in float64 from
probabilities with the zero entries dropped explicitly.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lightning_rlvr.credit.hp_rlvr import normalized_jsd
from lightning_rlvr.credit.self_conditioned import generalized_jsd, kl_divergence


def _kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """sum_{p_v > 0} p_v log(p_v / q_v) in float64 (inf if q_v = 0 < p_v)."""
    keep = p > 0
    return float((p[keep] * (p[keep].log() - q[keep].log())).sum())


def ref_jsd(p: torch.Tensor, q: torch.Tensor, beta: float) -> float:
    m = beta * p + (1 - beta) * q
    return beta * _kl(p, m) + (1 - beta) * _kl(q, m)


def distributions(seed: int, V: int = 9, where: str = "teacher"):
    """(p, q) float64 probability vectors with exact zeros in the teacher, the student, or both."""
    g = torch.Generator().manual_seed(seed)
    p = F.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = F.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    zp = torch.randperm(V, generator=g)[: 1 + seed % 4]
    zq = torch.randperm(V, generator=g)[: 1 + seed % 3]
    if where in ("teacher", "both", "shared"):
        p[zp] = 0.0
    if where in ("student", "both"):
        q[zq] = 0.0
    if where == "shared":
        q[zp] = 0.0  # the same entries are 0 in both
    return p / p.sum(), q / q.sum()


CASES = [(seed, where) for seed in range(6) for where in ("teacher", "student", "both", "shared")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("seed", "where"), CASES)
def test_jsds_with_zero_probabilities_are_finite_and_exact(seed, where, dtype):
    p, q = distributions(seed, where=where)
    lp, lq = p.log().to(dtype), q.log().to(dtype)  # -inf at the zeros
    assert torch.isinf(lp).any() or torch.isinf(lq).any()
    for beta in (0.1, 0.5, 0.9):
        got = generalized_jsd(lp, lq, beta)
        assert torch.isfinite(got), (seed, where, beta)
        assert float(got) == pytest.approx(ref_jsd(p, q, beta), abs=1e-6)
    w = normalized_jsd(lp, lq)
    assert float(w) == pytest.approx(ref_jsd(p, q, 0.5) / math.log(2), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(6))
def test_kl_ignores_teacher_zeros_and_stays_finite_on_student_zeros(seed, dtype):
    p, q = distributions(seed, where="teacher")
    got = kl_divergence(p.log().to(dtype), q.log().to(dtype))
    assert float(got) == pytest.approx(_kl(p, q), rel=1e-5, abs=1e-6)
    p, q = distributions(seed, where="shared")  # zeros in both at the same entries: still exact
    assert float(kl_divergence(p.log().to(dtype), q.log().to(dtype))) == pytest.approx(_kl(p, q), abs=1e-6)
    p, q = distributions(seed, where="student")  # teacher mass where the student has none: KL = inf
    d = kl_divergence(p.log().to(dtype), q.log().to(dtype))
    assert not torch.isnan(d) and float(d) > 1e30  # huge, so f = D / (D + c) is ~1, not NaN
    assert float(d / (d + 1e-4)) == pytest.approx(1.0)


def test_identical_distributions_with_zeros_have_zero_divergence():
    for seed in range(4):
        p, _ = distributions(seed, where="teacher")
        lp = p.log().float()
        assert float(kl_divergence(lp, lp)) == 0.0
        assert float(generalized_jsd(lp, lp)) == pytest.approx(0.0, abs=1e-7)
        assert float(normalized_jsd(lp, lp)) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("beta", [0.2, 0.5, 0.8])
def test_jsd_gradient_is_finite_with_masked_vocabulary_entries(beta):
    """HSD's loss: student logits with -inf entries (masked vocabulary), teacher with zeros elsewhere."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, 11, generator=g)
    logits[..., 3] = float("-inf")  # the student can never emit token 3
    logits = logits.requires_grad_()
    teacher = F.log_softmax(torch.randn(2, 5, 11, generator=g), -1)
    teacher[..., 7] = float("-inf")  # the teacher gives token 7 no mass
    teacher[..., 3] = float("-inf")  # nor token 3 (shared zero)
    teacher = teacher - torch.logsumexp(teacher, -1, keepdim=True)
    d = generalized_jsd(teacher, F.log_softmax(logits, -1), beta)  # [2, 5]
    assert torch.isfinite(d).all()
    d.sum().backward()
    grad = logits.grad
    assert torch.isfinite(grad).all()
    assert grad.abs().sum() > 0
