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

Against ``report.baseline``, ``results.md`` then holds the sections other modules write: the
seed-paired comparison (``sweep/comparison.py``), the prompt-level one (``prompts.py``), the pooled
and learning-rate sections (``plan.py``), papers' claims (``claims.py``) and a tuning sweep's choice
(``choice.py``). Accuracies are shown in points (100 x the fraction).

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

import csv
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from ...core.files import write_text
from ..stats import t_interval
from .choice import choice_text
from .claims import claims_section
from .comparison import (
    compare_to_baseline,
    comparison_note,
    comparison_table,
    included_rows,
    per_seed_table,
)
from .curves import cell_curves, plot_curves, write_curves_csv
from .plan import Evidence, pooled_section, rates_section, read_rates
from .prompts import prompt_section
from .rows import (
    START,
    SUMMARY,
    TIME_TO_TARGET,
    TO_TARGET,
    TO_TARGET_TITLES,
    compute_line,
    display_names,
    read_results_csv,
    rows_by_cell,
    run_row,
    write_results_csv,
)
from .spec import Run, Sweep, axis_label

log = logging.getLogger(__name__)


def _metric_columns(rows: list[dict]) -> list[tuple[str, str, int]]:
    keys = {k for r in rows for k in r}
    tests = sorted((k for k in keys if k.startswith("test/pass@")), key=lambda k: int(k.split("@")[1]))
    found = [(k, k.replace("/", " "), 3) for k in tests] + [s for s in SUMMARY if s[0] in keys]
    return found


def summarize(axes: list[str], rows: list[dict]) -> list[dict]:
    """One entry per cell (in first-seen order): its axis values, seed count and (mean, lo, hi) per metric."""
    out = []
    for key, members in rows_by_cell(axes, rows).items():
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
    out = []
    for members in rows_by_cell(axes, rows).values():
        if all(r.get(k) in ("", None) for r in members for k in (metric, TO_TARGET[metric])):
            out.append("-")  # not measured for this cell (no step cost given for it)
            continue
        reached = [float(r[metric]) for r in members if r.get(metric) not in ("", None)]
        mean, lo, hi = t_interval(reached)  # whole seconds, with the interval when there is one
        interval = "" if math.isnan(lo) else f" [{lo:.0f}, {hi:.0f}]"
        text = f"{mean:.0f}{interval}" if reached else "never"
        out.append(f"{text} ({len(reached)}/{len(members)})")
    return out


def committed_rows(csv_path: Path) -> int:
    """How many runs an existing ``results.csv`` reports (0 when there is none, or it cannot be read)."""
    try:
        return len(read_results_csv(csv_path)[1])
    except (OSError, UnicodeDecodeError, ValueError, csv.Error):
        return 0


def write_report(sweep: Sweep, runs: Sequence[Run]) -> list[Path]:
    """results.csv, results.md, curves.csv and curves.png under the sweep's report_dir. With no finished
    run here, a committed report that has rows is kept as it is (and the log says so)."""
    rows = [r for r in (run_row(sweep, run) for run in runs) if r is not None]
    out = sweep.report_dir
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "results.csv", out / "results.md"
    if not rows:
        committed = committed_rows(csv_path)
        if committed:  # its runs are not here (a clone without them): rewriting would lose the report
            log.warning(
                "no run of %s has finished in %s; the report in %s keeps its %d committed rows "
                "(restore or rerun the runs to rewrite it)",
                sweep.name,
                sweep.out,
                out,
                committed,
            )
            return []
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
    text.append(compute_line(rows, runs))
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
            comparison_note(settings),
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
        rates = read_rates(rows, [sweep.out, out / "runs"])
        evidence = Evidence(axes, rows + included, settings, rates, sweep=sweep)
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
