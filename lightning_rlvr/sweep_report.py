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
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

from lightning_rlvr.sweep_spec import DONE, TEST_METRICS, Run, Sweep, axis_label, run_dir

TAIL = 10  # steps averaged for the final train reward
SMOOTH = 5  # trailing moving average of the train-reward curve
# (results.csv column, table header, decimals); test/pass@k columns are added as found
SUMMARY = [
    ("val/pass@1_final", "val pass@1 (last)", 3),
    ("train/reward_last", f"train reward (last {TAIL} steps)", 3),
    ("fit_s", "fit time (s)", 0),
]


# ---------------------------------------------------------------------------- statistics
def t_quantile(df: int, q: float = 0.975) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(q, df))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its two-sided ``level`` t-interval; low = high = nan for n < 2."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1, 0.5 + level / 2) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


# ---------------------------------------------------------------------------- reading runs
def read_fit_metrics(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every logged metric of the run's fit as (step, value) pairs, in logging order."""
    series: dict[str, list[tuple[int, float]]] = {}
    for path in sorted((directory / "logs" / "fit").rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                step = int(float(row.get("step") or 0))
                for key, value in row.items():
                    if key not in ("step", "epoch") and value not in ("", None):
                        series.setdefault(key, []).append((step, float(value)))
    return series


def run_row(sweep: Sweep, run: Run) -> dict | None:
    """The results.csv row of a finished run (None if it has not finished)."""
    d = run_dir(sweep, run)
    if not (d / DONE).is_file():
        return None
    done = json.loads((d / DONE).read_text())
    series = read_fit_metrics(d)
    val = series.get("val/pass@1", [])
    reward = [v for _, v in series.get("train/reward_mean", [])]
    row = {"run_id": run.run_id, **dict(run.cell), "seed": run.seed if run.seed is not None else ""}
    row.update(json.loads((d / TEST_METRICS).read_text()))
    row["val/pass@1_start"] = val[0][1] if val and val[0][0] == 0 else ""
    row["val/pass@1_final"] = val[-1][1] if val else ""
    row["train/reward_last"] = sum(reward[-TAIL:]) / len(reward[-TAIL:]) if reward else ""
    row["steps"] = len(reward)
    row["fit_s"] = done.get("fit_s", "")
    return row


def write_results_csv(rows: list[dict], path: Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_results_csv(path: Path) -> tuple[list[str], list[dict]]:
    """(axis columns, rows); the axis columns are those between ``run_id`` and ``seed``."""
    with open(path) as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = list(reader)
    start = columns.index("run_id") + 1 if "run_id" in columns else 0
    return columns[start : columns.index("seed")], rows


# ---------------------------------------------------------------------------- the table
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


def markdown_table(axes: list[str], rows: list[dict]) -> str:
    """The results table: one row per cell, mean [95% t-interval] over its seeds."""
    metrics = _metric_columns(rows)
    header = [*axes, "seeds", *(title for _, title, _ in metrics)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in summarize(axes, rows):
        cells = [entry["cell"][a] for a in axes] + [str(entry["n"])]
        cells += [_fmt(entry["metrics"][c], d) for c, _, d in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- curves
def _smooth(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def cell_curves(
    axes: list[str], rows: list[dict], runs_dir: Path, smooth: int = SMOOTH
) -> dict[str, dict[str, list[tuple[int, float, float, float, int]]]]:
    """{cell label: {metric: [(step, mean, lo, hi, seeds)]}} for train reward and val pass@1."""
    per_cell: dict[str, dict[str, dict[int, list[float]]]] = {}
    for row in rows:
        label = cell_label(axes, row)
        series = read_fit_metrics(runs_dir / row["run_id"])
        reward = series.get("train/reward_mean", [])
        smoothed = list(zip([s for s, _ in reward], _smooth([v for _, v in reward], smooth)))
        for metric, points in (("train/reward_mean", smoothed), ("val/pass@1", series.get("val/pass@1", []))):
            bucket = per_cell.setdefault(label, {}).setdefault(metric, {})
            for step, value in points:
                bucket.setdefault(step, []).append(value)
    return {
        label: {
            metric: [(s, *t_interval(v), len(v)) for s, v in sorted(steps.items())]
            for metric, steps in metrics.items()
        }
        for label, metrics in per_cell.items()
    }


def cell_label(axes: list[str], row: dict) -> str:
    if len(axes) == 1:
        return str(row[axes[0]])
    return ", ".join(f"{a}={row[a]}" for a in axes)


def plot_curves(curves: dict, path: Path, title: str) -> None:
    """Train reward and val pass@1 against step, one line per cell, 95% band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, 2, figsize=(12, 4.5))
    names = {"train/reward_mean": f"train reward ({SMOOTH}-step moving average)", "val/pass@1": "val pass@1"}
    colors = plt.get_cmap("tab10" if len(curves) <= 10 else "tab20")
    for i, (label, metrics) in enumerate(curves.items()):
        for ax, metric in zip(panels, names):
            points = metrics.get(metric, [])
            if not points:
                continue
            steps = [p[0] for p in points]
            marker = "o" if metric == "val/pass@1" else None
            ax.plot(steps, [p[1] for p in points], color=colors(i), label=label, marker=marker, markersize=3)
            banded = [p for p in points if p[4] > 1]
            if banded:
                x, lo, hi = zip(*((p[0], p[2], p[3]) for p in banded))
                ax.fill_between(x, lo, hi, color=colors(i), alpha=0.12, linewidth=0)
    for ax, metric in zip(panels, names):
        ax.set_xlabel("step")
        ax.set_title(names[metric])
        ax.grid(alpha=0.3)
    panels[1].legend(fontsize=8, loc="best")
    fig.suptitle(f"{title}: seed mean, band = 95% t-interval over seeds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_curves_csv(curves: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "metric", "step", "mean", "low", "high", "seeds"])
        for label, metrics in curves.items():
            for metric, points in metrics.items():
                for step, mean, lo, hi, n in points:
                    w.writerow([label, metric, step, *(f"{x:.6g}" for x in (mean, lo, hi)), n])


# ---------------------------------------------------------------------------- all of it
def write_report(sweep: Sweep, runs: Sequence[Run]) -> list[Path]:
    """results.csv, results.md, curves.csv and curves.png under the sweep's report_dir."""
    rows = [r for r in (run_row(sweep, run) for run in runs) if r is not None]
    out = sweep.report_dir
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "results.csv", out / "results.md"
    if not rows:
        md_path.write_text(f"# Sweep `{sweep.name}`\n\nNo run has finished yet ({len(runs)} planned).\n")
        return [md_path]
    write_results_csv(rows, csv_path)
    axes = [axis_label(k) for k in sweep.grid if k != sweep.seed_key]
    start = sorted({r["val/pass@1_start"] for r in rows if r.get("val/pass@1_start") != ""})
    text = [
        f"# Sweep `{sweep.name}`\n",
        f"`lightning-rlvr-sweep {sweep.path}`: {len(rows)} of {len(runs)} runs finished. Each cell is the "
        "mean over its seeds with the 95% t-interval [low, high] (mean +- t(0.975, n-1) * sd / sqrt(n)); "
        "test pass@k is `lightning-rlvr test` on the final checkpoint. Train reward is what each method "
        "trained on (after its own reward shaping and sampling filter, e.g. DAPO's overlong penalty and "
        "dynamic sampling), so compare methods on test pass@k. Fit time is wall-clock seconds and depends "
        "on what else the machine was running.\n",
    ]
    if len(start) == 1:
        text.append(f"val pass@1 before RL (the shared warm start): {float(start[0]):.3f}.\n")
    text += [markdown_table(axes, rows), "![learning curves](curves.png)\n"]
    md_path.write_text("\n".join(text))
    curves = cell_curves(axes, rows, sweep.out)
    write_curves_csv(curves, out / "curves.csv")
    plot_curves(curves, out / "curves.png", sweep.name)
    return [csv_path, md_path, out / "curves.csv", out / "curves.png"]
