"""pass@k against its closed form."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_rlvr.metrics import PassAtK, pass_at_k


@pytest.mark.parametrize(
    "n,c,k", [(4, 0, 1), (4, 1, 1), (4, 1, 2), (8, 3, 4), (8, 7, 2), (10, 10, 5), (16, 2, 8)]
)
def test_pass_at_k_matches_binomial_closed_form(n, c, k):
    expected = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_k_larger_than_samples_is_an_error():
    with pytest.raises(ValueError, match="at least 4 samples"):
        pass_at_k(2, 1, 4)


def test_metric_averages_over_prompts():
    metric = PassAtK(k=2)
    metric.update(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    metric.update(torch.tensor([[1.0, 1.0, 1.0, 1.0]]))
    expected = ((1 - math.comb(3, 2) / math.comb(4, 2)) + 0.0 + 1.0) / 3
    assert metric.compute().item() == pytest.approx(expected, abs=1e-6)
