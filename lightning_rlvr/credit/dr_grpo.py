"""Dr. GRPO: GRPO without its two length and difficulty biases.

GRPO divides by the group's reward std (which up-weights nearly-solved and
nearly-hopeless prompts) and averages each sequence's tokens (which shrinks
the per-token gradient of long wrong answers). Dr. GRPO uses A_i = r_i - mean(r)
and a constant normaliser; pair this class with a loss whose ``loss_agg`` is ``constant``
(``configs/method/dr_grpo.yaml`` does). Formulas and defaults: ``docs/methods.md``.
"""

from __future__ import annotations

from .grpo import GRPOCredit


class DrGRPOCredit(GRPOCredit):
    """Uniform credit with centred, unscaled group advantages."""

    def __init__(self, scale_by_std: bool = False) -> None:
        super().__init__(scale_by_std=scale_by_std)
