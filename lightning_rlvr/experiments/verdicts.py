"""The words a comparison's verdict may use, in one place, and the rule that picks one.

Layer: experiments (imports ``experiments.stats`` only). The sweep report, its "Paper claims" section and
``lightning-rlvr-sweep --plan`` all say what a comparison of a cell with its baseline shows in these
words and no others:

- **better** / **worse** (**faster** / **slower** for a time or a step count, where lower is better):
  the interval excludes 0; a claim adds "as claimed" (or "smaller than claimed") or "against the claim";
- **no difference > MDD**: a comparison without a claim whose interval holds 0; MDD is what the
  design could have seen, not evidence of equality;
- **not reproduced**: a claim with a size whose interval excludes that size but not 0;
- **undecided (N seeds needed)**: a claim whose interval holds both 0 and the claimed effect (without a
  size: the observed difference), with the seeds the test would need at the report's power;
- **not testable within budget**: the same, when N seeds of the cell and its baseline cost more than the
  sweep's ``report.budget_hours`` at the measured cost of a run (or no practical N would do).

Every verdict names what it rests on (``basis``): the seeds, pooled (a two-way model over the sweep's
arms, ``experiments.pooled``) or paired, and whether the two arms ran at one learning rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .stats import seeds_needed

BETTER, WORSE = "better", "worse"
FASTER, SLOWER = "faster", "slower"  # better and worse for a time or a step count
NOT_REPRODUCED = "not reproduced"
NOT_TESTABLE = "not testable within budget"
AS_CLAIMED, SMALLER, AGAINST = "as claimed", "smaller than claimed", "against the claim"
RATE_MATCHED = "rate-matched"
MOST_SEEDS = 10_000  # past this, "seeds needed" is no practical number


def no_difference(mdd: str) -> str:
    """'no difference > MDD' with the MDD as the tables print it."""
    return f"no difference > {mdd}"


def undecided(needed: int | None) -> str:
    """'undecided (N seeds needed)'; N past ``MOST_SEEDS`` reads as such."""
    return f"undecided ({needed if needed else f'more than {MOST_SEEDS:,}'} seeds needed)"


def too_few(n: int) -> str:
    """Under two paired seeds: no spread to test with."""
    return f"undecided ({n} paired seed{'s' if n != 1 else ''})"


NO_SPREAD = "undecided (every seed differs by exactly this: no spread to test)"


# ---------------------------------------------------------------------------- metrics and their units
def is_seconds(metric: str) -> bool:
    """A time (``time_to_target_s``, ``fit_s``): lower is faster, shown in whole seconds."""
    return metric.endswith("_s")


def is_steps(metric: str) -> bool:
    """A count of RL steps (``steps_to_target``): lower is faster, shown in whole steps."""
    return metric.startswith("steps_")


def is_duration(metric: str) -> bool:
    """Seconds or steps: a smaller difference reads 'faster', a larger 'slower'."""
    return is_seconds(metric) or is_steps(metric)


def is_fraction(metric: str) -> bool:
    """An accuracy or reward: shown in points (x 100) in the report's tables."""
    return "pass@" in metric or metric.startswith(("val/", "test/", "train/reward"))


def display(metric: str) -> tuple[float, str, int]:
    """(scale, unit, decimals) a metric's differences print with: accuracies in points, times in whole
    seconds, steps to a whole step's tenth, anything else as it is."""
    if is_fraction(metric):
        return 100.0, " points", 1
    if is_steps(metric):
        return 1.0, " steps", 1
    return (1.0, " s", 0) if is_seconds(metric) else (1.0, "", 3)


def no_spread(c: Any) -> bool:
    """Identical non-zero differences on every seed: the t-test has no spread to work with (a coincidence
    that a few seeds and a coarse metric make likely: pass@1 on 512 samples moves in steps of 1/512)."""
    return c.n >= 2 and c.mdd == 0 and c.diff != 0


def hours(seconds: float) -> str:
    """Compute as the plan prints it: hours to a tenth."""
    return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------- the rule
@dataclass(frozen=True)
class Decision:
    """A verdict, the seeds it would take to decide (None: not asked, or past ``MOST_SEEDS``) and their
    compute (seconds of job time for that many seeds of the cell and its baseline; None: unknown)."""

    verdict: str
    needed: int | None = None
    cost_s: float | None = None


def decide(
    c: Any,
    metric: str,
    effect: float | None = None,
    direction: int = 0,
    power: float = 0.8,
    alpha: float = 0.05,
    seed_cost_s: float | None = None,
    budget_s: float | None = None,
) -> Decision:
    """The verdict on a ``stats.PairedComparison`` ``c`` (paired, or pooled when ``c.arms`` > 2) of
    ``metric``: a plain comparison (``direction`` 0) or a claim (``direction`` +1 higher, -1 lower, with
    its ``effect`` in the metric's units or None). ``seed_cost_s`` is what one more seed of the cell and
    its baseline costs; ``budget_s`` the sweep's budget (None: no budget, nothing is "not testable")."""
    if c.n < 2 or not math.isfinite(c.sd):
        return Decision(too_few(c.n))
    if no_spread(c):
        return Decision(NO_SPREAD)
    target = effect if effect is not None else c.diff
    needed = seeds_needed(target, c.sd, power, alpha, MOST_SEEDS, c.arms) if target else None
    cost = needed * seed_cost_s if needed and seed_cost_s is not None else None
    if c.separated:
        up = c.diff > 0
        word = (SLOWER if up else FASTER) if is_duration(metric) else (BETTER if up else WORSE)
        if direction:
            said = c.diff * direction > 0
            smaller = (
                said and effect is not None and direction * (c.high if direction > 0 else c.low) < abs(effect)
            )
            word += ", " + (SMALLER if smaller else AS_CLAIMED if said else AGAINST)
        return Decision(word, needed, cost)
    if direction and effect is not None and (c.high < effect if direction > 0 else c.low > effect):
        return Decision(NOT_REPRODUCED, needed, cost)
    if not direction:
        scale, unit, dec = display(metric)
        return Decision(no_difference(f"{c.mdd * scale:.{dec}f}{unit}"), needed, cost)
    if budget_s is not None and (needed is None or (cost is not None and cost > budget_s)):
        over = f"{hours(cost)} > {hours(budget_s)}" if cost is not None else f"over {hours(budget_s)}"
        many = needed if needed else f"more than {MOST_SEEDS:,}"
        return Decision(f"{NOT_TESTABLE} ({many} seeds needed, {over})", needed, cost)
    return Decision(undecided(needed), needed, cost)


def basis(c: Any, rates: tuple[str, str] | None = None) -> str:
    """What a verdict rests on: '3 seeds, pooled over 8 arms (df 14), rate-matched' or '3 seeds, paired
    (df 2), rates differ: 0.0002 vs 0.0004' (the cell's rate first; ``rates`` None: not known)."""
    how = f"pooled over {c.arms} arms" if c.arms > 2 else "paired"
    text = f"{c.n} seed{'s' if c.n != 1 else ''}, {how} (df {max(c.df, 0)})"
    if rates is not None:
        text += f", {RATE_MATCHED}" if rates[0] == rates[1] else f", rates differ: {rates[0]} vs {rates[1]}"
    return text
