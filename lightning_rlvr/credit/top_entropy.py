"""Top-entropy tokens: the policy gradient only on the batch's highest-entropy ("forking") tokens.

"Beyond the 80/20 rule" (arXiv 2506.01939) observes that a small share of
tokens -- where the policy's next-token distribution has high entropy --
decide the reasoning path, and that training only on them matches or beats
training on all tokens. Per completion token t of rollout i:

    H_{i,t} = entropy of pi_old(. | x_i, o_{i,<t})     (rollout-time policy, ``Scorer.policy()``)
    tau     = the (1 - q) quantile of H over every valid completion token of the batch
    A_{i,t} = A_i if H_{i,t} >= tau else 0

with A_i the group advantage (GRPO) and q = 0.2 [paper; TRL's
``top_entropy_quantile``]. The quantile is linear-interpolated over this
rank's batch [proposed: the paper takes it over the whole global batch]; ties
at tau are kept, so a batch of equal entropies keeps every token and q = 1 is
GRPO. A non-finite entropy (NaN logits) is left out of the quantile and
never kept. Masked-out tokens still
count in the loss normaliser (as in the paper, where the gradient of the
other tokens is just zero).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core.rollout import Rollout
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner
from .self_conditioned import quantile


class TopEntropyCredit(CreditAssigner):
    """Group advantages on the top-q entropy tokens of the batch, 0 elsewhere (see the module docstring).

    Args:
        top_quantile: q, the share of the batch's tokens that keep their advantage [paper: 0.2].
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages.
    """

    uses_policy_pass = True  # rollout-time entropies

    def __init__(self, top_quantile: float = 0.2, scale_by_std: bool = True) -> None:
        super().__init__(scale_by_std=scale_by_std)
        if not 0.0 < top_quantile <= 1.0:
            raise ValueError(f"top_quantile must lie in (0, 1], got {top_quantile}")
        self.top_quantile = top_quantile

    def select(self, entropy: Tensor, mask: Tensor) -> tuple[Tensor, float]:
        """([N, T] bool kept tokens, threshold tau) for entropies [N, T] over the valid ``mask``."""
        valid = mask.bool() & torch.isfinite(entropy)  # a NaN entropy (from -inf logits) is never kept
        values = entropy[valid]
        if values.numel() == 0:
            return torch.zeros_like(valid), math.nan
        tau = quantile(values, 1.0 - self.top_quantile)
        return (entropy >= tau) & valid, float(tau)

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        mask = rollout.loss_mask  # [N, T] the policy's tokens (observations are not its choices)
        entropy = scorer.policy().entropy.to(mask.device)  # [N, T] rollout-time entropies
        keep, tau = self.select(entropy, mask)  # [N, T] bool
        adv = self.group_advantages(rollout)  # [N]
        n_valid = int(mask.sum())
        metrics = {
            "entropy_threshold": tau,
            "frac_tokens_kept": float(keep.sum()) / n_valid if n_valid else math.nan,
            "entropy_kept_mean": float(entropy[keep].mean()) if bool(keep.any()) else math.nan,
        }
        return Credit(advantages=adv[:, None] * keep.float(), metrics=metrics)
