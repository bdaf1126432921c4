"""GRPO: every token of a rollout gets its group-relative advantage (uniform credit).

Formulas, defaults and provenance of every method: ``docs/methods.md``.
"""

from __future__ import annotations

from ..core.rollout import Rollout
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner


class GRPOCredit(CreditAssigner):
    """A_{i,t} = A_i for every completion token t (the baseline every method is compared to)."""

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        adv = self.group_advantages(rollout)  # [N]
        return Credit(advantages=adv[:, None] * rollout.completion_mask)  # [N, T]
