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
        - {cell: sc_grpo_own_rate, metric: test/pass@1, effect: 0.081, relative: true,
           tuned_in: sweeps/lr_tuning_real.yaml}   # the two arms at different rates, each its tuned one

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

A claim whose cell ran at another learning rate than its baseline names ``tuned_in``, the tuning sweep
that chose both rates; its basis then says "each at its own tuned rate" only when that sweep chose and
bracketed exactly those rates (``tuned_rates``), and "rates differ" otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..stats import t_quantile
from ..verdicts import MOST_SEEDS, NOT_REPRODUCED, basis, decide, display, hours, no_spread

CLAIM_KEYS = {"cell", "metric", "effect", "relative", "direction", "source", "tuned_in"}


@dataclass(frozen=True)
class Claim:
    """One paper's claim about a cell against the baseline (see the module docstring)."""

    cell: dict[str, str]  # {axis label: value label}
    metric: str
    direction: int  # +1: the cell's metric is higher than the baseline's; -1: lower
    effect: float | None = None  # signed, in the metric's units (or a fraction of the baseline's mean)
    relative: bool = False
    source: str = ""
    tuned_in: str = ""  # a tuning sweep that chose both arms' rates, when they differ (``tuned_rates``)

    def matches(self, cell: dict) -> bool:
        """Whether a comparison's cell ({axis: value}) is this claim's."""
        return all(cell.get(a) == v for a, v in self.cell.items())


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
        tuned_in = entry.get("tuned_in", "")
        if not isinstance(tuned_in, str) or (tuned_in and not tuned_in.endswith((".yaml", ".yml"))):
            raise ValueError(f"{where}: tuned_in must be the path of a tuning sweep file, got {tuned_in!r}")
        claims.append(Claim(cell, metric, sign, effect, relative, str(entry.get("source", "")), tuned_in))
    return claims


def judge(
    claim: Claim,
    c: Any,
    baseline_mean: float,
    power: float,
    alpha: float,
    seed_cost_s: float | None = None,
    budget_s: float | None = None,
) -> tuple[str, float | None]:
    """(verdict, the claim's effect in the metric's units) for a ``stats.PairedComparison`` ``c`` (paired,
    or pooled when ``c.arms`` > 2), in ``verdicts``' words; ``seed_cost_s`` (one more seed of the cell and
    its baseline) and ``budget_s`` decide "not testable within budget"."""
    effect = None if claim.effect is None else claim.effect * (abs(baseline_mean) if claim.relative else 1.0)
    d = decide(c, claim.metric, effect, claim.direction, power, alpha, seed_cost_s, budget_s)
    return d.verdict, effect


NOTE = (
    "Each claim (`report.claims` in the sweep file) read from the comparison with the baseline, pooled over "
    "the sweep's arms where the pool is justified (the pooled analysis below), else paired: **better** / "
    "**worse** (faster / slower for times) when the interval excludes 0, **not reproduced** when it "
    "excludes the claimed effect but not 0, else **undecided** with the seeds the test would need at the "
    "measured spread (an estimate: the spread of a few seeds is itself uncertain), or **not testable "
    "within budget** when those seeds of the cell and its baseline cost more than `report.budget_hours` "
    "at the runs' measured cost. A relative claim is scaled by the baseline's mean on the paired seeds. "
    "With several claims, a verdict whose interval excludes 0 (or the claimed effect) but whose "
    "Holm-adjusted p (over the claims tested) does not reach the level says so. Accuracies are in points.\n"
)


def claims_section(
    claims: Sequence[Claim], entries: Sequence[dict], level: float, power: float, evidence: Any = None
) -> str:
    """The report's "Paper claims" section: one row per claim and matching comparison entry
    (``comparison.compare_to_baseline``'s): the claim, its effect here, the measured difference with its
    interval, p, MDD, the verdict, what it rests on and what the seeds that would decide cost.
    ``evidence`` (``plan.Evidence``) chooses the pooled or paired comparison and knows the runs' cost,
    rates and the budget; None: paired, no cost."""
    pct = round(level * 100)
    header = ["claim", "cell", "metric", "claimed", "seeds", f"measured [{pct}% interval]", "p", "MDD"]
    header += ["verdict", "rests on", "seeds needed (job time)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in all_claim_rows(claims, entries, level, power, evidence):
        lines.append("| " + " | ".join(row) + " |")
    return "## Paper claims\n\n" + NOTE + "\n" + "\n".join(lines) + "\n"


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times (m - i + 1),
    never below the one before it, capped at 1."""
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(sorted(range(len(ps)), key=lambda j: ps[j])):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def all_claim_rows(
    claims: Sequence[Claim], entries: Sequence[dict], level: float, power: float, evidence: Any = None
) -> list[list[str]]:
    """Every claim's rows (``claim_rows``), corrected for testing several: with m claims tested, a verdict
    whose test passes (the interval excludes 0, or the claimed effect for "not reproduced":
    ``deciding_p`` below 1 - level) but whose Holm-adjusted p does not says so, so a sweep of six claims
    does not call one decided at p 0.048."""
    found = [item for claim in claims for item in _rows_and_p(claim, entries, level, power, evidence)]
    tested = [i for i, (_, p) in enumerate(found) if p is not None and math.isfinite(p)]
    rows = [row for row, _ in found]
    if len(tested) < 2:
        return rows
    alpha = 1 - level
    for i, adjusted in zip(tested, holm([found[i][1] for i in tested])):
        said = rows[i][8]
        if found[i][1] < alpha <= adjusted and not said.startswith("undecided"):
            rows[i][8] = f"{said}; not after Holm's correction over {len(tested)} claims (p {adjusted:.3f})"
    return rows


def claim_rows(
    claim: Claim, entries: Sequence[dict], level: float, power: float, evidence: Any = None
) -> list[list[str]]:
    """The claims table's rows of one claim: one per matching comparison entry, or one saying none ran
    (uncorrected for the sweep's other claims: ``all_claim_rows`` corrects)."""
    return [row for row, _ in _rows_and_p(claim, entries, level, power, evidence)]


def _rows_and_p(
    claim: Claim, entries: Sequence[dict], level: float, power: float, evidence: Any = None
) -> list[tuple[list[str], float | None]]:
    """``claim_rows``' rows, each with its comparison's p-value (None where no comparison ran)."""
    matched = [e for e in entries if e["metric"] == claim.metric and claim.matches(e["cell"])]
    if not matched:
        cell = ", ".join(claim.cell.values())
        row = ["-", "0", "-", "-", "-", "undecided (no run of this cell and its baseline yet)", "-", "-"]
        return [([claim.source or "-", cell, claim.metric, *row], None)]
    out = []
    for e in matched:
        cell = ", ".join(map(str, e["cell"].values()))
        c, rests, cost, budget, collapsed = e["comparison"], basis(e["comparison"]), None, None, ""
        if evidence is not None:
            c, rests = evidence.comparison(e), evidence.basis(e, claim.tuned_in)
            cost, budget, collapsed = evidence.seed_cost_s(e), evidence.budget_s, evidence.collapsed(e)
        said, effect = judge(claim, c, e["baseline_mean"], power, 1 - level, cost, budget)
        said = f"undecided (the cell {collapsed})" if collapsed else said + capped_note(e)
        scale, _, dec = display(claim.metric)
        claimed = (
            ("higher" if claim.direction > 0 else "lower")
            if effect is None
            else f"{effect * scale:+.{dec}f}" + (f" ({claim.effect:+.1%})" if claim.relative else "")
        )
        measured, p, mdd = comparison_cells(c, scale, dec)
        need = needed_cell(claim.metric, c, effect, claim.direction, power, 1 - level, cost)
        row = [
            claim.source or "-",
            cell,
            claim.metric,
            claimed,
            str(c.n),
            measured,
            p,
            mdd,
            said,
            rests,
            need,
        ]
        out.append((row, deciding_p(c, effect, said, level) if c.n >= 2 and not no_spread(c) else None))
    return out


def deciding_p(c: Any, effect: float | None, said: str, level: float) -> float:
    """The p-value of the test a claim's verdict rests on: against the claimed effect for "not
    reproduced" (its interval excludes the effect), against 0 for every other verdict."""
    if not said.startswith(NOT_REPRODUCED) or effect is None:
        return c.p_value
    from scipy.stats import t as student

    se = (c.high - c.low) / 2 / t_quantile(c.df, 0.5 + level / 2)
    return float(2 * student.sf(abs(c.diff - effect) / se, c.df)) if se > 0 else 0.0


def needed_cell(
    metric: str, c: Any, effect: float | None, direction: int, power: float, alpha: float, cost: float | None
) -> str:
    """The seeds (of the cell and its baseline) that would detect ``effect`` (None: the observed
    difference) at ``power``, and their job time at ``cost`` a seed: "41 (31.2 h)"."""
    d = decide(c, metric, effect, direction, power, alpha, cost)
    if d.needed is None:
        return "-" if c.n < 2 or no_spread(c) or not c.diff else f"more than {MOST_SEEDS:,}"
    return f"{d.needed}" + (f" ({hours(d.cost_s)})" if d.cost_s is not None else "")


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
