"""Every cell against the baseline, paired by seed and warm start: the differences, their verdicts, tables.

Layer: experiments (reads ``results.csv`` rows only). The report, ``lightning-rlvr-sweep --plan`` and the
findings all judge from ``compare_to_baseline``'s entries. Runs that share a seed share their warm
start, prompt stream and evaluation prompts, so every cell is compared with the baseline cell
(``report.baseline``, GRPO by default) *paired by seed* (``experiments.stats.paired_comparison``): the
mean difference with its paired t-interval, the p-value, and the minimum detectable difference (MDD) at
80% power given the observed spread of the differences. A comparison whose interval excludes 0 reads
"better" or "worse"; any other reads "no difference > MDD", which is what the design could have
detected, not a claim of equality (``experiments.verdicts``). A seed pairs only when both runs began
from the same warm start (the same val pass@1 before RL). ``report.include`` adds other sweeps' cells
(a baseline rerun, a control) on the seeds whose warm start matches; ``per_seed_table`` holds each
seed's test pass@1 against the baseline's Wilson interval over its test samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..stats import paired_comparison, wilson_interval
from ..verdicts import decide, display
from .claims import capped_note, comparison_cells
from .rows import (
    START,
    TO_TARGET,
    baseline_key,
    cell_key,
    cell_label,
    display_names,
    read_results_csv,
    rows_by_cell_and_seed,
    to_target,
)
from .spec import ReportSettings


def _metric_by_seed(members: dict[str, dict], metric: str) -> dict[str, float]:
    return {s: float(r[metric]) for s, r in members.items() if r.get(metric) not in ("", None)}


def compare_to_baseline(axes: list[str], rows: list[dict], settings: ReportSettings) -> list[dict]:
    """Every cell against the baseline cell with the same other axis values, paired by seed.

    One entry per (cell, metric): {"cell", "metric", "comparison" (``PairedComparison``), "unpaired",
    "baseline_mean" (the baseline's mean on the paired seeds)},
    cells in first-seen order. Cells whose baseline counterpart has no finished run are left out.
    A seed pairs only when both runs started from the same warm start, read as the same val pass@1
    before RL (a warm start trained again, on another machine or after a code change, can differ);
    "unpaired" lists the others as (seed, this start, the baseline's start).
    """
    by_cell = rows_by_cell_and_seed(axes, rows)
    out = []
    for key, seeds in by_cell.items():
        cell = dict(zip(axes, key))
        base_key = baseline_key(axes, key, settings.baseline)
        if base_key == key or base_key not in by_cell:
            continue
        base = by_cell[base_key]
        unpaired = [
            (seed, seeds[seed][START], base[seed][START])
            for seed in seeds
            if seed in base
            and "" not in (seeds[seed].get(START, ""), base[seed].get(START, ""))
            and float(seeds[seed][START]) != float(base[seed][START])
        ]
        left_out = {seed for seed, _, _ in unpaired}
        same = {s: r for s, r in seeds.items() if s not in left_out}
        for metric in settings.compare:
            if metric in TO_TARGET:  # a run that never reached it counts its whole training time
                x, y, capped = to_target(same, base, metric)
            else:
                x, y, capped = _metric_by_seed(same, metric), _metric_by_seed(base, metric), 0
            if not (x or unpaired) or not y:
                continue
            comparison = paired_comparison(x, y, settings.level, settings.power)
            paired = [y[s] for s in x if s in y]  # the baseline on the paired seeds: a relative claim's scale
            mean = sum(paired) / len(paired) if paired else math.nan
            entry = {"cell": cell, "metric": metric, "comparison": comparison, "unpaired": unpaired}
            out.append({**entry, "capped": capped, "baseline_mean": mean})
    return out


def verdict(c, entry: dict) -> str:
    """'better' / 'worse' ('faster' / 'slower' for seconds) when the interval excludes 0, else 'no
    difference > MDD' (what could be seen); capped times and seeds left out for another warm start are
    named after it. ``entry`` is ``compare_to_baseline``'s."""
    said = _verdict(c, entry["metric"]) + capped_note(entry)
    if entry["unpaired"]:
        starts = sorted({f"{float(a):.3f} vs {float(b):.3f}" for _, a, b in entry["unpaired"]})
        said += (
            f"; {len(entry['unpaired'])} seed{'s' if len(entry['unpaired']) != 1 else ''} not paired: "
            f"another warm start (val pass@1 before RL {', '.join(starts)})"
        )
    return said


def _verdict(c, metric: str) -> str:
    """The paired table's verdict in ``experiments.verdicts``' words (no claim, no budget)."""
    return decide(c, metric).verdict


def comparison_table(axes: list[str], rows: list[dict], settings: ReportSettings) -> str:
    """The "vs baseline" table: difference [paired interval], p, MDD and the verdict per cell and metric."""
    pct = round(settings.level * 100)
    header = [*axes, "metric", "paired seeds", f"difference [{pct}% interval]", "p", "MDD", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = display_names(axes, rows)
    for entry in compare_to_baseline(axes, rows, settings):
        c, metric = entry["comparison"], entry["metric"]
        scale, unit, dec = display(metric)
        diff, p, mdd = comparison_cells(c, scale, dec)
        cells = [names[a][entry["cell"][a]] for a in axes]
        lines.append("| " + " | ".join([*cells, metric, str(c.n), diff, p, mdd, verdict(c, entry)]) + " |")
    return "\n".join(lines) + "\n"


PER_SEED = "test/pass@1"  # the metric judged seed by seed
SAMPLES = "test/samples"  # how many samples it is the mean of (pass@1 x samples = successes)


def per_seed_table(axes: list[str], rows: list[dict], settings: ReportSettings) -> str:
    """Each seed's test pass@1 against the baseline's on that seed and its Wilson interval over its test
    samples, and per cell how many seeds are above it. Empty when the baseline's runs have no sample
    count (tested before ``test/samples`` was logged)."""
    by_cell = rows_by_cell_and_seed(axes, rows)
    pct = round(settings.level * 100)
    header = [*axes, "seed", PER_SEED, "baseline", f"baseline {pct}% Wilson interval", "above it"]
    lines, totals = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)], []
    names = display_names(axes, rows)
    for key, seeds in by_cell.items():
        cell = dict(zip(axes, key))
        base = by_cell.get(baseline_key(axes, key, settings.baseline))
        if base is None or base is seeds:
            continue
        above = judged = 0
        for seed in sorted(seeds, key=lambda s: (len(s), s)):
            b = base.get(seed, {})
            if seeds[seed].get(PER_SEED) in ("", None) or b.get(SAMPLES) in ("", None, 0):
                continue
            value, n = float(seeds[seed][PER_SEED]), float(b[SAMPLES])
            p, low, high = wilson_interval(float(b[PER_SEED]) * n, n, settings.level)
            judged, above = judged + 1, above + (value > high)
            cells = [names[a][cell[a]] for a in axes] + [seed, f"{value:.3f}", f"{p:.3f}"]
            cells += [f"[{low:.3f}, {high:.3f}]", "yes" if value > high else "no"]
            lines.append("| " + " | ".join(cells) + " |")
        if judged:
            label = cell_label(axes, next(iter(seeds.values())), names)
            totals.append(f"- {label}: {above} of {judged} seeds above the baseline's interval.")
    if not totals:
        return ""
    note = (
        f"Each seed's {PER_SEED} against the baseline's on the same seed, with the baseline's {pct}% Wilson "
        f"interval over the samples its test scored (`{SAMPLES}`): 'yes' when the seed is above the "
        "interval's upper end, beyond the sampling noise of one evaluation of the baseline.\n"
    )
    return "\n".join([note, *lines, "", *totals]) + "\n"


def comparison_note(settings: ReportSettings) -> str:
    """What the "Against the baseline" table shows and what its verdicts may say."""
    level, power = round(settings.level * 100), round(settings.power * 100)
    return (
        "Each cell minus the baseline cell on the same seeds (the same warm start, prompts and evaluation "
        "problems), in points (100 x the fraction): the mean difference with its paired "
        f"{level}% t-interval, the two-sided paired t-test's p-value, and MDD, the true difference this "
        f"design (these seeds, this spread of the differences) would detect with {power}% power. "
        "'better' / 'worse': the interval excludes 0. 'no difference > X': the data cannot tell the two "
        "apart, and could only have detected a difference of about X or more; it is not evidence that "
        "they are equal.\n"
    )


def included_rows(axes: list[str], rows: list[dict], paths: Sequence[Path]) -> tuple[list[dict], list[str]]:
    """Rows of other sweeps' results.csv (``report.include``) for the cells this sweep lacks, and a
    line per file saying what joined. A row joins only if one of this sweep's runs on its seed began
    from the same warm start (val pass@1 before RL); cells left out entirely are named."""
    own = {cell_key(axes, r) for r in rows}
    starts = {(str(r.get("seed", "")), float(r[START])) for r in rows if r.get(START) not in ("", None)}
    out, said = [], []
    for path in paths:
        if not path.is_file():
            said.append(f"report.include: {path} not found; its cells are not compared.\n")
            continue
        columns, theirs = read_results_csv(path)
        if not set(axes) <= set(columns):
            said.append(f"report.include: {path} lacks the axes {axes}; its cells are not compared.\n")
            continue
        theirs = [r for r in theirs if cell_key(axes, r) not in own]
        joined = [
            r
            for r in theirs
            if r.get(START) in ("", None) or (str(r.get("seed", "")), float(r[START])) in starts
        ]
        cells = sorted({cell_label(axes, r) for r in joined})
        other = sorted({cell_label(axes, r) for r in theirs} - set(cells))
        said.append(
            f"Also compared with this baseline: {', '.join(cells) or 'no cell'}, from `{path}`"
            + (f" (not {', '.join(other)}: another warm start on every seed)" if other else "")
            + ".\n"
        )
        out += joined
    return out, said
