"""pass@k and maj@k over n samples per prompt, as torchmetrics ``Metric``s (evaluation's metrics).

pass@k uses the unbiased estimator of Chen et al. (2021): for a prompt with n
samples of which c are correct, pass@k = 1 - C(n - c, k) / C(n, k), averaged
over prompts. The product form below avoids large binomials.

maj@k (majority vote, self-consistency) takes the first k samples of a prompt,
finds the answer string given most often (``Task.extract_answer``; samples
without an answer do not vote; a tie goes to the answer that appears first)
and counts the prompt as solved when a sample with that answer was correct. A
prompt where no sample gives an answer counts as unsolved.
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


class SampleCount(Metric):
    """How many samples were scored (prompts x samples per prompt): with pass@1 (their mean), the
    number of successes, so a reader can put a binomial interval on it."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, correct: Tensor) -> None:
        self.total += correct.numel()

    def compute(self) -> Tensor:
        return self.total.float()


def majority_answer(answers: list[str | None]) -> str | None:
    """The most frequent non-None answer; ties go to the one that occurs first; None if there is none."""
    counts: dict[str, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return None
    return max(counts, key=counts.__getitem__)  # dicts keep first-occurrence order; max keeps the first


def majority_correct(answers: list[str | None], correct: list[bool]) -> bool:
    """Whether the majority answer of one prompt's samples was judged correct."""
    winner = majority_answer(answers)
    return winner is not None and any(ok for a, ok in zip(answers, correct) if a == winner)


class MajorityAtK(Metric):
    """Mean maj@k over prompts; ``update`` takes [B][n] extracted answers and [B, n] 0/1 correctness."""

    full_state_update = False

    def __init__(self, k: int = 1) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"maj@k needs k >= 1, got {k}")
        self.k = k
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, answers: list[list[str | None]], correct: Tensor) -> None:
        if len(answers) != correct.shape[0]:
            raise ValueError(f"{len(answers)} prompts of answers but {correct.shape[0]} rows of correctness")
        if correct.shape[1] < self.k:
            raise ValueError(
                f"maj@{self.k} needs at least {self.k} samples per prompt, got {correct.shape[1]}"
            )
        for prompt_answers, row in zip(answers, (correct > 0.5).tolist()):
            self.total += float(majority_correct(list(prompt_answers)[: self.k], row[: self.k]))
            self.count += 1

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp(min=1)).float()
