"""Planning within a budget: per claim and comparison, the verdict, the seeds that decide, their cost.

Layer: experiments (imports ``experiments.pooled``, ``experiments.verdicts`` and the sweep's ``claims``,
``rows`` and ``spec``; never ``report``, which imports this). ``Evidence`` gathers what a verdict rests
on beyond one paired comparison: the pooled analysis of each metric over the sweep's arms
(``experiments.pooled``; used where pooling is justified), the measured cost of a run of each cell
(``fit_s + test_s`` of its finished runs: job time, so it includes waiting on whatever else the machine
ran), each run's learning rate (``model.lr`` from its ``spec.json``: overrides over config files over
``RLVRModule``'s default; ``tuned_rates`` says whether unmatched rates were each arm's tuned one) and the
sweep's ``report.budget_hours``. The report's claims, pooled and rates
sections and ``lightning-rlvr-sweep SWEEP --plan [--pilot results.csv]`` read it, so both use one
vocabulary (``experiments.verdicts``). Seeds needed cost that many runs of the cell *and* of its baseline.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..pooled import Pool, collapsed, fit_pool
from ..verdicts import basis, decide, display, hours, is_fraction
from .claims import all_claim_rows, comparison_cells, needed_cell
from .rows import TO_TARGET
from .spec import SPEC, ReportSettings, Sweep
from .tuned_rates import tuned_basis


def lr_of_spec(path: Path) -> str | None:
    """The ``model.lr`` a run's ``spec.json`` ran with (its overrides over its config files), as text; the
    code's default when every config file was read and none says (configs do not restate defaults); None
    when the files are unreadable."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    found, unread = None, False
    for config in spec.get("configs", []):
        try:
            model = (yaml.safe_load(Path(config).read_text()) or {}).get("model") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            unread = True
            continue
        lr = model.get("lr", (model.get("init_args") or {}).get("lr"))
        found = lr if lr is not None else found
    for key, value in spec.get("overrides", []):
        found = value if key == "model.lr" else found
    if found is None and not unread:
        from ...module import RLVRModule  # torch and Lightning: only when a run's rate is the default

        found = inspect.signature(RLVRModule).parameters["lr"].default
    return None if found is None else f"{float(found):g}"


def read_rates(rows: Sequence[dict], dirs: Sequence[Path]) -> dict[str, str]:
    """{run_id: learning rate} of the rows: a ``model.lr`` column, else the first ``<dir>/<run_id>/spec.json``
    that says."""
    out = {}
    for row in rows:
        if row.get("model.lr") not in ("", None):
            out[row["run_id"]] = f"{float(row['model.lr']):g}"
            continue
        for d in dirs:
            lr = lr_of_spec(Path(d) / row["run_id"] / SPEC)
            if lr is not None:
                out[row["run_id"]] = lr
                break
    return out


class Evidence:
    """What the verdicts of a sweep's comparisons rest on (see the module docstring).

    Args:
        axes: the grid's axis labels (results.csv's columns between run_id and seed).
        rows: results.csv rows (a finished sweep's or a pilot's).
        settings: the sweep's report settings (baseline, compare, level, power, budget, collapse floor).
        rates: {run_id: learning rate} (``read_rates``); runs without one make no rate statement.
        heterogeneity_alpha: the level of the test that refuses pooling (``experiments.pooled``).
    """

    def __init__(
        self,
        axes: list[str],
        rows: Sequence[dict],
        settings: ReportSettings,
        rates: dict[str, str] | None = None,
        heterogeneity_alpha: float = 0.05,
        sweep: Sweep | None = None,
        root: Path = Path("."),
    ) -> None:
        self.axes, self.rows, self.settings, self.rates = axes, list(rows), settings, rates or {}
        self.sweep, self.root = sweep, root
        self.arm_axes = [a for a in axes if a in settings.baseline]
        self.budget_s = None if settings.budget_hours is None else settings.budget_hours * 3600
        self.pools: dict[tuple[tuple, str], Pool] = {}
        strata: dict[tuple, dict[str, list[dict]]] = {}
        for row in self.rows:
            strata.setdefault(self._stratum(row), {}).setdefault(self._arm(row), []).append(row)
        base = ", ".join(settings.baseline[a] for a in self.arm_axes)
        for stratum, arms in strata.items():
            for metric in settings.compare:
                if metric in TO_TARGET:  # censored at a run's end: not a two-way model's kind of number
                    continue
                values = {
                    arm: {
                        str(r["seed"]): float(r[metric]) for r in members if r.get(metric) not in ("", None)
                    }
                    for arm, members in arms.items()
                }
                floor = settings.collapse_floor if is_fraction(metric) else None
                self.pools[(stratum, metric)] = fit_pool(
                    values, base, metric, settings.level, settings.power, floor, heterogeneity_alpha
                )

    def _stratum(self, cell: dict) -> tuple:
        return tuple(str(cell[a]) for a in self.axes if a not in self.arm_axes)

    def _arm(self, cell: dict) -> str:
        return ", ".join(str(cell[a]) for a in self.arm_axes)

    def _members(self, cell: dict) -> list[dict]:
        return [
            r for r in self.rows if all(str(r.get(a)) == str(v) for a, v in cell.items() if a in self.axes)
        ]

    def _baseline_cell(self, cell: dict) -> dict:
        return {a: self.settings.baseline.get(a, cell[a]) for a in self.axes}

    def pool(self, entry: dict) -> Pool | None:
        """The pool of the entry's stratum and metric (None for a to-target metric)."""
        return self.pools.get((self._stratum(entry["cell"]), entry["metric"]))

    def comparison(self, entry: dict) -> Any:
        """The comparison a verdict rests on: pooled where the pool is justified, else the paired one."""
        pool = self.pool(entry)
        arm = self._arm(entry["cell"])
        if pool is not None and pool.justified and arm in pool.comparisons:
            return pool.comparisons[arm]
        return entry["comparison"]

    def rate_pair(self, entry: dict) -> tuple[str, str] | None:
        """(the cell's learning rate, the baseline's), when every run of each says one; else None."""
        pair = []
        for cell in (entry["cell"], self._baseline_cell(entry["cell"])):
            found = {self.rates.get(r["run_id"]) for r in self._members(cell)}
            if len(found) != 1 or None in found:
                return None
            pair.append(found.pop())
        return pair[0], pair[1]

    def basis(self, entry: dict, tuned_in: str = "") -> str:
        """What the entry's verdict rests on: seeds, pooled or paired (and why not pooled), rates; where
        the rates differ and ``tuned_in`` names a tuning sweep, whether it chose both (``tuned_rates``)."""
        pair = self.rate_pair(entry)
        text = basis(self.comparison(entry), pair)
        if tuned_in and pair is not None and pair[0] != pair[1]:
            tuned, words = self.tuned(entry, pair, tuned_in)
            text = f"{basis(self.comparison(entry))}, {words}" if tuned else f"{text} ({words})"
        pool = self.pool(entry)
        if pool is not None and not pool.justified and len(pool.arms) > 2 and pool.why:
            text += f"; not pooled: {pool.why}"
        return text

    def tuned(self, entry: dict, pair: tuple[str, str], tuned_in: str) -> tuple[bool, str]:
        """Whether the entry's cell and baseline ran at the rates (``pair``) the tuning sweep ``tuned_in``
        chose for them, and the words for it (``tuned_rates.tuned_basis``)."""
        if self.sweep is None:
            return False, "tuned rates unknown: no sweep file given"
        cells = (entry["cell"], self._baseline_cell(entry["cell"]))
        return tuned_basis(self.sweep, cells, pair, tuned_in, self.root)

    def seed_cost_s(self, entry: dict) -> float | None:
        """Job seconds of one more seed of the cell and its baseline: each one's mean fit_s + test_s."""
        total = 0.0
        for cell in (entry["cell"], self._baseline_cell(entry["cell"])):
            costs = [
                float(r["fit_s"]) + float(r.get("test_s") or 0)
                for r in self._members(cell)
                if r.get("fit_s") not in ("", None)
            ]
            if not costs:
                return None
            total += sum(costs) / len(costs)
        return total

    def collapsed(self, entry_or_cell: dict) -> str:
        """Why the cell is collapsed ("" when it is not): every run at 0 (or a mean under the report's
        ``collapse_floor``) on a fraction metric it is compared on."""
        cell = entry_or_cell.get("cell", entry_or_cell)
        members = self._members(cell)
        for metric in self.settings.compare:
            if is_fraction(metric):
                values = [float(r[metric]) for r in members if r.get(metric) not in ("", None)]
                why = collapsed(values, self.settings.collapse_floor)
                if why:
                    return why.replace("collapsed (", f"collapsed on {metric} (")
        return ""


# ---------------------------------------------------------------------------- the report's sections
def pooled_section(entries: Sequence[dict], evidence: Evidence) -> str:
    """The report's "Pooled analysis": per metric, the two-way fit and whether pooling is justified, and
    each comparison paired beside pooled."""
    pools = [p for p in evidence.pools.values() if p.arms]
    if not pools:
        return ""
    pct = round(evidence.settings.level * 100)
    lines = [
        "## Pooled analysis\n",
        "A two-way model (seed + method) over the balanced block of arms and seeds (every arm on every "
        "seed) that holds the most runs, collapsed arms left out: "
        "each comparison gets the pooled residual SD and its (arms - 1)(seeds - 1) degrees of freedom, "
        "instead of the spread of its own few paired differences. Pooling is refused when Bartlett's test "
        "on the arms' residuals finds them scattering unequally (p < 0.05); verdicts then stay paired "
        "(`lightning_rlvr/experiments/pooled.py`).\n",
        "| stratum | metric | arms pooled | seeds | residual df | residual SD | Bartlett p | pooled "
        "| left out |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (stratum, metric), p in evidence.pools.items():
        if not p.arms:
            continue
        scale, _, dec = display(metric)
        left = [f"{a}: {why}" for a, why in p.excluded.items()]
        if p.seeds_left_out:
            some = "s" if len(p.seeds_left_out) > 1 else ""
            left.append(
                f"{p.baseline}'s seed{some} {', '.join(p.seeds_left_out)}: not run by every arm pooled"
            )
        left = "; ".join(left) or "-"
        said = "yes" if p.justified else f"no: {p.why}"
        bart = "-" if math.isnan(p.p_value) else f"{p.p_value:.3f}"
        row = [", ".join(stratum) or "-", metric, str(len(p.arms)), str(len(p.seeds)), str(p.df)]
        row += [f"{p.sigma * scale:.{dec}f}", bart, said, left]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        f"| cell | metric | paired [{pct}%] | paired MDD | pooled [{pct}%] | pooled MDD | verdict "
        "| rests on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        pool = evidence.pool(e)
        arm = evidence._arm(e["cell"])
        if pool is None or arm not in pool.comparisons:
            continue
        scale, _, dec = display(e["metric"])
        paired, _, mdd = comparison_cells(e["comparison"], scale, dec)
        pooled, _, pmdd = comparison_cells(pool.comparisons[arm], scale, dec)
        c = evidence.comparison(e)
        settings = evidence.settings
        said = decide(c, e["metric"], power=settings.power, alpha=1 - settings.level).verdict
        cell = ", ".join(map(str, e["cell"].values()))
        lines.append(
            "| " + " | ".join([cell, e["metric"], paired, mdd, pooled, pmdd, said, evidence.basis(e)]) + " |"
        )
    return "\n".join(lines) + "\n"


def rates_section(entries: Sequence[dict], evidence: Evidence) -> str:
    """The report's flag on every comparison whose two arms ran at different learning rates."""
    seen, flagged, known = set(), [], 0
    for e in entries:
        key = tuple(e["cell"].values())
        if key in seen:
            continue
        seen.add(key)
        pair = evidence.rate_pair(e)
        known += pair is not None
        if pair is not None and pair[0] != pair[1]:
            line = f"- {', '.join(map(str, key))}: model.lr {pair[0]} against the baseline's {pair[1]}"
            for claim in evidence.settings.claims:  # a claim that names the tuning behind the two rates
                if claim.tuned_in and claim.matches(e["cell"]):
                    line += f" ({evidence.tuned(e, pair, claim.tuned_in)[1]})"
                    break
            flagged.append(line)
    if not known:
        return ""
    head = "## Learning rates\n\nEach arm's `model.lr` as its runs' `spec.json` records it. "
    if not flagged:
        return head + "Every comparison is rate-matched (the cell ran at its baseline's rate).\n"
    return (
        head + "These comparisons are not rate-matched: each arm ran at its own rate, so a difference may be "
        "the rate's, not the method's (run the cell at the baseline's rate too to separate them):\n\n"
        + "\n".join(flagged)
        + "\n"
    )


# ---------------------------------------------------------------------------- the plan
def plan_text(entries: Sequence[dict], evidence: Evidence, source: str, sweep_name: str) -> str:
    """``--plan``'s output: the settings it used, the claims table (as the report prints it), every
    comparison with its verdict, the seeds that would detect its observed difference and their cost, and
    the report's pooled-analysis and learning-rate sections."""
    s = evidence.settings
    budget = (
        "no budget (report.budget_hours unset)" if s.budget_hours is None else f"budget {s.budget_hours:g} h"
    )
    out = [
        f"# Plan for sweep `{sweep_name}` from {source}\n",
        f"Power {s.power:.0%}, level {s.level:.0%}, {budget} of job time. A seed costs one run of the cell "
        "and one of its baseline, at the mean fit_s + test_s of their runs here.\n",
    ]
    if s.claims:
        pct = round(s.level * 100)
        header = ["claim", "cell", "metric", "claimed", "seeds", f"measured [{pct}%]", "p", "MDD"]
        header += ["verdict", "rests on", "seeds needed (job time)"]
        out += ["## Claims\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in all_claim_rows(s.claims, entries, s.level, s.power, evidence):
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    header = ["cell", "metric", "seeds", "difference", "MDD", "verdict", "rests on"]
    header += ["seeds to detect the difference (job time)", "a seed costs"]
    out += ["## Comparisons\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in entries:
        c, metric = evidence.comparison(e), e["metric"]
        scale, _, dec = display(metric)
        diff, _, mdd = comparison_cells(c, scale, dec)
        cost = evidence.seed_cost_s(e)
        said = decide(c, metric, power=s.power, alpha=1 - s.level).verdict
        need = needed_cell(metric, c, None, 1, s.power, 1 - s.level, cost)
        spent = decide(c, metric, None, 1, s.power, 1 - s.level, cost).cost_s
        if evidence.budget_s is not None and spent is not None:
            need += "; over budget" if spent > evidence.budget_s else "; within budget"
        row = [
            ", ".join(map(str, e["cell"].values())),
            metric,
            str(c.n),
            diff,
            mdd,
            said,
            evidence.basis(e),
            need,
        ]
        out.append("| " + " | ".join([*row, "-" if cost is None else hours(cost)]) + " |")
    out += ["", pooled_section(entries, evidence), rates_section(entries, evidence)]
    return "\n".join(t for t in out if t) + "\n"


def check_pilot(
    axes: list[str], columns: list[str], rows: Sequence[dict], settings: ReportSettings, evidence: Evidence
) -> None:
    """Raise ValueError (one line) when a pilot cannot plan the sweep: another grid, a compared metric it
    lacks, no run cost with a budget to judge, or a claim on a collapsed cell."""
    if not rows:
        raise ValueError("it has no finished run")
    missing = [a for a in settings.baseline if a not in axes]
    if missing:
        raise ValueError(f"its axes {axes} lack the baseline's {missing}: a pilot of another grid")
    for metric in settings.compare:
        if metric in TO_TARGET:
            metric = metric if metric in columns else TO_TARGET[metric]
        if not any(r.get(metric) not in ("", None) for r in rows):
            raise ValueError(
                f"it has no value of {metric!r} (report.compare): run the pilot with that metric"
            )
    if settings.budget_hours is not None and not any(r.get("fit_s") not in ("", None) for r in rows):
        raise ValueError("it has no fit_s column to cost a run with, and report.budget_hours needs one")
    for i, claim in enumerate(settings.claims):
        why = evidence.collapsed(dict(claim.cell))
        if why and evidence._members(dict(claim.cell)):
            raise ValueError(
                f"report.claims[{i}] is on {', '.join(claim.cell.values())}, which {why}: a claim on a "
                "collapsed arm cannot be tested; drop it or fix the arm"
            )
