"""pass@k with the unbiased estimator of Chen et al. (2021), as a torchmetrics ``Metric``.

For a prompt with n samples of which c are correct,
pass@k = 1 - C(n - c, k) / C(n, k), averaged over prompts. The product form
below avoids large binomials.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt with ``n`` samples, ``c`` correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return 1.0 - float(torch.prod(1.0 - k / torch.arange(n - c + 1, n + 1, dtype=torch.float64)))


class PassAtK(Metric):
    """Mean pass@k over prompts; ``update`` takes a [B, n] 0/1 correctness matrix."""

    full_state_update = False

    def __init__(self, k: int = 1) -> None:
        super().__init__()
        self.k = k
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, correct: Tensor) -> None:
        n = correct.shape[1]
        for c in (correct > 0.5).sum(1).tolist():
            self.total += pass_at_k(n, int(c), self.k)
            self.count += 1

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp(min=1)).float()
