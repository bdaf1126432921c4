"""GRPO: every token of a rollout gets its group-relative advantage (uniform credit).

Formulas, defaults and provenance of every method: ``docs/methods.md``.
"""

from __future__ import annotations

from lightning_rlvr.credit.base import Credit, CreditAssigner
from lightning_rlvr.rollout import Rollout
from lightning_rlvr.scoring import Scorer


class GRPOCredit(CreditAssigner):
    """A_{i,t} = A_i for every completion token t (the baseline every method is compared to)."""

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        adv = self.group_advantages(rollout)  # [N]
        return Credit(advantages=adv[:, None] * rollout.completion_mask)  # [N, T]
