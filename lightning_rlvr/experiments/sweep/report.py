"""What a researcher reads after a sweep: ``results.csv``, ``results.md`` and ``curves.png``.

``results.csv`` has one row per finished run: ``run_id``, one column per grid
axis (the cell), ``seed``, then its numbers (test pass@k from the final
checkpoint, val pass@1 before RL and at the last validation, the train reward
averaged over the last ``TAIL`` steps, fit time). ``results.md`` is one row
per cell: the mean over seeds and its 95% interval from the t-distribution
(mean +- t_{0.975, n-1} * s / sqrt(n)), which with 3 seeds is wide (t = 4.303),
as it should be. ``curves.png`` plots train reward (a trailing moving average
of ``SMOOTH`` steps) and val pass@1 against the step, one line per cell, the
seed mean with its 95% band. Everything here reads files only, so the report
can be rewritten while a sweep is still running (``--report-only``).

What the data can and cannot say. Runs that share a seed share their warm
start, prompt stream and evaluation prompts, so every cell is compared with the
baseline cell (``report.baseline``, GRPO by default) *paired by seed*
(``lightning_rlvr.experiments.stats.paired_comparison``): the mean difference with its
paired t-interval, the p-value, and the minimum detectable difference (MDD) at
80% power given the observed spread of the differences. A comparison whose
interval excludes 0 reads "better" or "worse"; any other reads "no difference >
MDD", which is what the design could have detected, not a claim of equality.
Accuracies are shown in points (100 x the fraction).

Time to reach ``report.target_accuracy``: the RL steps to the first validation
whose pass@1 reaches the target, which do not depend on what else the machine
ran; those steps x the cell's per-step cost measured on an idle machine
(``report.step_cost_s``, an idle pilot's), "idle s"; and, labelled "loaded s",
the training seconds (the logged ``time/*_s`` of every RL step, so validation,
checkpointing and start-up are left out) summed up to it under whatever load
the sweep ran with. Credit-lab metrics: a run directory with a
``credit_eval.csv`` (written by ``lightning-rlvr-credit-eval`` on the final
checkpoint) adds its ``CREDIT_COLUMNS`` to the run's row; without one the
columns are omitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ...core.files import write_text
from ..stats import paired_comparison, t_interval, wilson_interval
from ..verdicts import decide, display
from .choice import choice_text
from .claims import capped_note, claims_section, comparison_cells
from .curves import cell_curves, plot_curves, write_curves_csv
from .plan import Evidence, pooled_section, rates_section, read_rates
from .prompts import prompt_section
from .rows import (
    START,
    SUMMARY,
    TIME_TO_TARGET,
    TO_TARGET,
    TO_TARGET_TITLES,
    cell_label,
    compute_line,
    display_names,
    read_results_csv,
    run_row,
    to_target,
    write_results_csv,
)
from .spec import ReportSettings, Run, Sweep, axis_label


def _metric_columns(rows: list[dict]) -> list[tuple[str, str, int]]:
    keys = {k for r in rows for k in r}
    tests = sorted((k for k in keys if k.startswith("test/pass@")), key=lambda k: int(k.split("@")[1]))
    found = [(k, k.replace("/", " "), 3) for k in tests] + [s for s in SUMMARY if s[0] in keys]
    return found


def summarize(axes: list[str], rows: list[dict]) -> list[dict]:
    """One entry per cell (in first-seen order): its axis values, seed count and (mean, lo, hi) per metric."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault(tuple(str(row[a]) for a in axes), []).append(row)
    out = []
    for key, members in cells.items():
        entry: dict = {"cell": dict(zip(axes, key)), "n": len(members), "metrics": {}}
        for column, _, _ in _metric_columns(rows):
            values = [float(r[column]) for r in members if r.get(column) not in ("", None)]
            entry["metrics"][column] = t_interval(values)
        out.append(entry)
    return out


def _fmt(stats: tuple[float, float, float], decimals: int) -> str:
    mean, lo, hi = stats
    if math.isnan(mean):
        return "-"
    if decimals == 0:
        return f"{mean:.0f}"
    if math.isnan(lo):
        return f"{mean:.{decimals}f}"
    return f"{mean:.{decimals}f} [{lo:.{decimals}f}, {hi:.{decimals}f}]"


def markdown_table(axes: list[str], rows: list[dict], target: float | None = None) -> str:
    """The results table: one row per cell, mean [95% t-interval] over its seeds; with ``target``, last
    columns of the RL steps, the idle seconds (steps x ``report.step_cost_s``) and the loaded training
    seconds to reach val pass@1 >= target (over the seeds that reached it; a column only where the rows
    have one)."""
    metrics = _metric_columns(rows)
    header = [*axes, "seeds", *(title for _, title, _ in metrics)]
    to = [] if target is None else [m for m in TO_TARGET if any(m in r for r in rows)]
    columns = [to_target_column(axes, rows, m) for m in to]
    for m in to:
        header.append(f"{TO_TARGET_TITLES[m]} to val pass@1 >= {target:g} (seeds)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = display_names(axes, rows)
    for i, entry in enumerate(summarize(axes, rows)):
        cells = [names[a][entry["cell"][a]] for a in axes] + [str(entry["n"])]
        cells += [_fmt(entry["metrics"][c], d) for c, _, d in metrics]
        cells += [column[i] for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_target_column(axes: list[str], rows: list[dict], metric: str = TIME_TO_TARGET) -> list[str]:
    """Per cell: "mean [low, high] (k/n)" of ``metric`` (seconds or steps to the target, whole numbers)
    over the k of its n seeds that reached the target."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault(tuple(str(row[a]) for a in axes), []).append(row)
    out = []
    for members in cells.values():
        if all(r.get(k) in ("", None) for r in members for k in (metric, TO_TARGET[metric])):
            out.append("-")  # not measured for this cell (no step cost given for it)
            continue
        reached = [float(r[metric]) for r in members if r.get(metric) not in ("", None)]
        mean, lo, hi = t_interval(reached)  # whole seconds, with the interval when there is one
        interval = "" if math.isnan(lo) else f" [{lo:.0f}, {hi:.0f}]"
        text = f"{mean:.0f}{interval}" if reached else "never"
        out.append(f"{text} ({len(reached)}/{len(members)})")
    return out


def _metric_by_seed(members: dict[str, dict], metric: str) -> dict[str, float]:
    return {s: float(r[metric]) for s, r in members.items() if r.get(metric) not in ("", None)}


def rows_by_cell_and_seed(axes: list[str], rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """{cell's axis values: {seed: row}}, cells in first-seen order."""
    by_cell: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        by_cell.setdefault(tuple(str(row[a]) for a in axes), {})[str(row.get("seed", ""))] = row
    return by_cell


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
        base_key = tuple(settings.baseline.get(a, cell[a]) for a in axes)
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
        base = by_cell.get(tuple(settings.baseline.get(a, cell[a]) for a in axes))
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


_COMPARISON_NOTE = (
    "Each cell minus the baseline cell on the same seeds (the same warm start, prompts and evaluation "
    "problems), in points (100 x the fraction): the mean difference with its paired {level}% t-interval, "
    "the two-sided paired t-test's p-value, and MDD, the true difference this design (these seeds, this "
    "spread of the differences) would detect with {power}% power. 'better' / 'worse': the interval "
    "excludes 0. 'no difference > X': the data cannot tell the two apart, and could only have detected a "
    "difference of about X or more; it is not evidence that they are equal.\n"
)


# ---------------------------------------------------------------------------- all of it
def included_rows(axes: list[str], rows: list[dict], paths: Sequence[Path]) -> tuple[list[dict], list[str]]:
    """Rows of other sweeps' results.csv (``report.include``) for the cells this sweep lacks, and a
    line per file saying what joined. A row joins only if one of this sweep's runs on its seed began
    from the same warm start (val pass@1 before RL); cells left out entirely are named."""
    own = {tuple(str(r[a]) for a in axes) for r in rows}
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
        theirs = [r for r in theirs if tuple(str(r[a]) for a in axes) not in own]
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


def write_report(sweep: Sweep, runs: Sequence[Run]) -> list[Path]:
    """results.csv, results.md, curves.csv and curves.png under the sweep's report_dir."""
    rows = [r for r in (run_row(sweep, run) for run in runs) if r is not None]
    out = sweep.report_dir
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "results.csv", out / "results.md"
    if not rows:
        write_text(md_path, f"# Sweep `{sweep.name}`\n\nNo run has finished yet ({len(runs)} planned).\n")
        return [md_path]
    write_results_csv(rows, csv_path)
    axes = [axis_label(k) for k in sweep.grid if k != sweep.seed_key]
    start = sorted({r[START] for r in rows if r.get(START) != ""})
    text = [
        f"# Sweep `{sweep.name}`\n",
        f"`lightning-rlvr-sweep {sweep.path}`: {len(rows)} of {len(runs)} runs finished. Each cell is the "
        "mean over its seeds with the 95% t-interval [low, high] (mean +- t(0.975, n-1) * sd / sqrt(n)); "
        "test pass@k is `lightning-rlvr test` on the final checkpoint. Train reward is what each method "
        "trained on (after its own reward shaping and sampling filter, e.g. DAPO's overlong penalty and "
        "dynamic sampling), so compare methods on test pass@k. Fit time is wall-clock seconds and depends "
        "on what else the machine was running.\n",
    ]
    text.append(compute_line(rows))
    if len(start) == 1:
        text.append(f"val pass@1 before RL (the shared warm start): {float(start[0]):.3f}.\n")
    elif start:
        counts = ", ".join(f"{float(v):.3f} ({sum(r[START] == v for r in rows)} runs)" for v in start)
        text.append(
            f"val pass@1 before RL differs between runs: {counts}. These runs did not all start from the "
            "same warm start (one trained again, on another machine or after a code change); the "
            "comparison below pairs a seed only when both runs started from the same one.\n"
        )
    settings = sweep.report
    text.append(markdown_table(axes, rows, settings.target_accuracy))
    baseline = ", ".join(f"{a} = {v}" for a, v in settings.baseline.items())
    if baseline:
        included, said = included_rows(axes, rows, settings.include)
        text += [
            f"## Against the baseline ({baseline})\n",
            _COMPARISON_NOTE.format(level=round(settings.level * 100), power=round(settings.power * 100)),
            *said,
            comparison_table(axes, rows + included, settings),
        ]
        seeds = per_seed_table(axes, rows, settings)
        if seeds:
            text += ["## Seed by seed against the baseline\n", seeds]
        prompts = prompt_section(axes, rows, sweep.out, settings)  # per-prompt test files (prompts.py)
        if prompts:
            text += ["## Prompt by prompt: evaluation and training noise\n", prompts]
        entries = compare_to_baseline(axes, rows + included, settings)  # the verdicts' parts: plan.py
        evidence = Evidence(axes, rows + included, settings, read_rates(rows, [sweep.out, out / "runs"]))
        text += [pooled_section(entries, evidence), rates_section(entries, evidence)]
        if settings.claims:
            text.append(claims_section(settings.claims, entries, settings.level, settings.power, evidence))
    if settings.choose:
        tie = (settings.tie, settings.tie_tolerance)
        text.append(choice_text(axes, rows, settings.choose, settings.choose_by, *tie))
    text.append("![learning curves](curves.png)\n")
    write_text(md_path, "\n".join(t for t in text if t))
    curves = cell_curves(axes, rows, sweep.out)
    write_curves_csv(curves, out / "curves.csv")
    plot_curves(curves, out / "curves.png", sweep.name)
    return [csv_path, md_path, out / "curves.csv", out / "curves.png"]
