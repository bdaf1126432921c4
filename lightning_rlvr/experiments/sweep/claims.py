"""Paper claims against a sweep: reproduced, not reproduced or undecided, and the seeds that would decide.

Layer: experiments (imports ``experiments.stats`` only; ``spec`` parses the claims with ``parse_claims``
and ``report`` writes them with ``claims_table``). A sweep file's ``report.claims`` lists what papers
report for a cell against the report's baseline, read from the same paired-by-seed comparison as the
"Against the baseline" table (so every claim's metric must be in ``report.compare``)::

    report:
      claims:
        - cell: sc_grpo                  # a value of the first axis, or {axis: value, ...}
          metric: test/pass@1
          effect: 0.081                  # the paper's difference, signed in the direction it claims
          relative: true                 # ... as a fraction of the baseline's mean: "+8.1% over GRPO"
          source: "avg@8 +8.1% over GRPO (Qwen3-8B)"
        - {cell: hsd, metric: test/pass@1, direction: higher, source: "best on terse-answer tasks"}

``effect`` is in the metric's own units (a fraction for pass@k: +1.6 points is 0.016); a claim with no
size gives only ``direction`` (higher or lower). Relative effects scale by the baseline's mean over the
paired seeds, e.g. "1.21x faster" on a time is ``effect: -0.174`` (1 / 1.21 - 1), relative.

With d the paired differences (cell - baseline) and their interval at the report's level:

- **reproduced**: the interval excludes 0 on the claimed side ("smaller than claimed" when it also
  lies wholly below the claimed effect's size);
- **opposite**: the interval excludes 0 on the other side;
- **not reproduced**: the interval excludes the claimed effect but not 0, so an effect that large
  would have shown;
- **undecided**: anything else, with the seeds the paired t-test would need to detect the claimed
  effect (without a size: the observed mean difference) at the report's power, given the measured
  spread of d. That is an estimate: the spread of 3 seeds is itself uncertain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..stats import seeds_needed

CLAIM_KEYS = {"cell", "metric", "effect", "relative", "direction", "source"}


@dataclass(frozen=True)
class Claim:
    """One paper's claim about a cell against the baseline (see the module docstring)."""

    cell: dict[str, str]  # {axis label: value label}
    metric: str
    direction: int  # +1: the cell's metric is higher than the baseline's; -1: lower
    effect: float | None = None  # signed, in the metric's units (or a fraction of the baseline's mean)
    relative: bool = False
    source: str = ""


def parse_claims(raw: Any, axes: dict[str, list[str]], compare: Sequence[str]) -> list[Claim]:
    """``report.claims`` checked against the grid's axes ({label: value labels}) and ``report.compare``;
    raises ValueError with the offending entry's index and what to write instead."""
    if not isinstance(raw, list):
        raise ValueError("claims must be a list of {cell, metric, effect or direction, source}")
    claims = []
    for i, entry in enumerate(raw):
        where = f"claims[{i}]"
        if not isinstance(entry, dict) or not {"cell", "metric"} <= set(entry):
            raise ValueError(f"{where}: needs at least cell and metric, got {entry!r}")
        unknown = set(entry) - CLAIM_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(CLAIM_KEYS)}")
        cell = entry["cell"] if isinstance(entry["cell"], dict) else {next(iter(axes), ""): entry["cell"]}
        cell = {str(a): str(v) for a, v in cell.items()}
        for axis, value in cell.items():
            if axis not in axes or value not in axes[axis]:
                raise ValueError(f"{where}: {axis} = {value!r} is not a grid cell (axes: {axes})")
        metric = str(entry["metric"])
        if metric not in compare:
            raise ValueError(f"{where}: metric {metric!r} is not in report.compare {list(compare)}: add it")
        effect, direction = entry.get("effect"), entry.get("direction")
        if direction not in (None, "higher", "lower"):
            raise ValueError(f"{where}: direction must be higher or lower, got {direction!r}")
        if effect is not None:
            number = isinstance(effect, (int, float)) and not isinstance(effect, bool)
            if not number or not math.isfinite(effect) or effect == 0:
                raise ValueError(f"{where}: effect must be a non-zero number, got {effect!r}")
            sign = 1 if effect > 0 else -1
            if direction is not None and (direction == "higher") != (sign > 0):
                raise ValueError(f"{where}: effect {effect} and direction {direction} disagree")
            effect = float(effect)
        elif direction is None:
            raise ValueError(f"{where}: give effect (the paper's difference) or direction (higher or lower)")
        else:
            sign = 1 if direction == "higher" else -1
        relative = entry.get("relative", False)
        if not isinstance(relative, bool) or (relative and effect is None):
            raise ValueError(f"{where}: relative must be true or false, and needs an effect")
        claims.append(Claim(cell, metric, sign, effect, relative, str(entry.get("source", ""))))
    return claims


def judge(claim: Claim, c: Any, baseline_mean: float, power: float, alpha: float) -> tuple[str, float | None]:
    """(verdict, the claim's effect in the metric's units) for a ``stats.PairedComparison`` ``c``."""
    effect = None if claim.effect is None else claim.effect * (abs(baseline_mean) if claim.relative else 1.0)
    s = claim.direction
    if c.n < 2 or not math.isfinite(c.sd):
        return f"undecided ({c.n} paired seed{'s' if c.n != 1 else ''})", effect
    if c.sd == 0:
        return "undecided (every seed differs by the same amount: no spread to test)", effect
    if c.separated:
        if s * c.diff < 0:
            return "opposite", effect
        smaller = effect is not None and s * (c.high if s > 0 else c.low) < s * effect
        return ("reproduced, smaller than claimed" if smaller else "reproduced"), effect
    if effect is not None and (c.high < effect if s > 0 else c.low > effect):
        return "not reproduced", effect
    n = seeds_needed(effect if effect is not None else c.diff, c.sd, power, alpha)
    need = f"~{n} seeds would decide" if n else "more seeds than is practical would decide"
    what = "the claimed effect" if effect is not None else "the observed difference"
    return f"undecided ({need} on {what})", effect


NOTE = (
    "Each claim (`report.claims` in the sweep file) read from the comparison with the baseline: "
    "**reproduced** when the interval excludes 0 on the claimed side, **opposite** on the other side, "
    "**not reproduced** when it excludes the claimed effect but not 0, else **undecided**, with the seeds "
    "the paired t-test would need at the measured spread (an estimate: the spread of a few seeds is "
    "itself uncertain). A relative claim is scaled by the baseline's mean on the paired seeds. Accuracies "
    "are in points.\n"
)


def claims_section(claims: Sequence[Claim], entries: Sequence[dict], level: float, power: float) -> str:
    """The report's "Paper claims" section: one row per claim and matching comparison entry
    (``report.compare_to_baseline``'s): the claim, its effect here, the measured difference with its
    interval, p, MDD and the verdict."""
    pct = round(level * 100)
    header = ["claim", "cell", "metric", "claimed", "seeds", f"measured [{pct}% interval]", "p", "MDD"]
    lines = ["| " + " | ".join([*header, "verdict"]) + " |", "|" + "---|" * (len(header) + 1)]
    for claim in claims:
        matched = [
            e
            for e in entries
            if e["metric"] == claim.metric and all(e["cell"].get(a) == v for a, v in claim.cell.items())
        ]
        for e in matched or [None]:
            cell = ", ".join(claim.cell.values()) if e is None else ", ".join(map(str, e["cell"].values()))
            if e is None:
                row = ["-", "0", "-", "-", "-", "undecided (no run of this cell and its baseline yet)"]
                lines.append("| " + " | ".join([claim.source or "-", cell, claim.metric, *row]) + " |")
                continue
            c = e["comparison"]
            said, effect = judge(claim, c, e["baseline_mean"], power, 1 - level)
            said += capped_note(e)
            scale, _, dec = display(claim.metric)
            claimed = (
                ("higher" if claim.direction > 0 else "lower")
                if effect is None
                else f"{effect * scale:+.{dec}f}" + (f" ({claim.effect:+.1%})" if claim.relative else "")
            )
            measured, p, mdd = comparison_cells(c, scale, dec)
            row = [claim.source or "-", cell, claim.metric, claimed, str(c.n), measured, p, mdd, said]
            lines.append("| " + " | ".join(row) + " |")
    return "## Paper claims\n\n" + NOTE + "\n" + "\n".join(lines) + "\n"


def no_spread(c: Any) -> bool:
    """Identical non-zero differences on every seed: the t-test has no spread to work with (a coincidence
    that a few seeds and a coarse metric make likely: pass@1 on 512 samples moves in steps of 1/512)."""
    return c.n >= 2 and c.mdd == 0 and c.diff != 0


def comparison_cells(c: Any, scale: float, dec: int) -> tuple[str, str, str]:
    """A ``stats.PairedComparison`` as the report's tables print it: (difference [interval], p, MDD),
    or the difference alone where there is no interval to give (under 2 pairs, or no spread)."""
    if c.n >= 2 and not no_spread(c):
        interval = f"{c.diff * scale:+.{dec}f} [{c.low * scale:+.{dec}f}, {c.high * scale:+.{dec}f}]"
        return interval, f"{c.p_value:.3f}", f"{c.mdd * scale:.{dec}f}"
    return (f"{c.diff * scale:+.{dec}f}" if c.n else "-"), "-", "-"


def capped_note(entry: dict) -> str:
    """What a verdict adds for ``compare_to_baseline``'s pairs holding a run that never reached the target."""
    n = entry.get("capped", 0)
    return f"; {n} pair(s) with a run that never reached the target (its full time)" if n else ""


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
