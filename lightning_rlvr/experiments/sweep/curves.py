"""A sweep's learning curves: the seed mean per cell, drawn to ``curves.png`` and written to ``curves.csv``.

``cell_curves`` reads each finished run's logged metrics and gives the seed mean per cell as
{cell label: {metric: [(step, mean, low, high, seeds)]}}; the rest lays them out: train reward
(a trailing moving average of ``SMOOTH`` steps) and val pass@1 side by side, a 95% band over seeds (a
rate's band clipped to [0, 1]), one legend beside the panels, and a colour and line style per cell
that stay distinct past the palette: ten distinct hues (tab10), then the next line style, never the
light/dark pairs of tab20 that would suggest pairings the sweep does not have.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ...core.files import atomic_file
from ..stats import t_interval
from .rows import cell_label, display_names, read_fit_metrics

SMOOTH = 5  # trailing moving average of the train-reward curve


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
    names = display_names(axes, rows)
    for row in rows:
        label = cell_label(axes, row, names)
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


LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))


def curve_styles(labels: list[str], n_colors: int) -> dict[str, tuple[int, object]]:
    """{label: (colour index, line style)}: distinct for up to n_colors x 5 single-axis cells, or for up
    to n_colors values of the first axis with up to 5 cells each.

    A multi-axis label ("method=shear, model.lr=0.001") takes its colour from its first axis's value
    and its line style from its place among that value's cells, so a tuning sweep's lrs of one method
    share a colour. Single-axis labels take colours in order, then the next style."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        groups.setdefault(label.partition(", ")[0], []).append(label)
    if all(len(members) == 1 for members in groups.values()):
        return {
            label: (i % n_colors, LINE_STYLES[i // n_colors % len(LINE_STYLES)])
            for i, label in enumerate(labels)
        }
    return {
        label: (g % n_colors, LINE_STYLES[(j + g // n_colors) % len(LINE_STYLES)])
        for g, members in enumerate(groups.values())
        for j, label in enumerate(members)
    }


def plot_curves(curves: dict, path: Path, title: str) -> None:
    """Write :func:`curves_figure` to ``path`` (PNG), the legend included."""
    import matplotlib.pyplot as plt

    fig = curves_figure(curves, title)
    with atomic_file(path, "wb") as f:  # the box includes the legend beside the panels
        fig.savefig(f, format=path.suffix.lstrip(".") or "png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def curves_figure(curves: dict, title: str):
    """Train reward and val pass@1 against step, one line per cell, 95% band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, 2, figsize=(12, 4.5))
    names = {"train/reward_mean": f"train reward ({SMOOTH}-step moving average)", "val/pass@1": "val pass@1"}
    y_labels = {"train/reward_mean": "mean reward per completion", "val/pass@1": "pass@1 (fraction solved)"}
    colors = plt.get_cmap("tab10")  # distinct hues; past 10 cells the line style changes
    styles = curve_styles(list(curves), colors.N)
    for label, metrics in curves.items():
        color, style = styles[label]
        for ax, metric in zip(panels, names):
            points = metrics.get(metric, [])
            if not points:
                continue
            steps = [p[0] for p in points]
            marker = "o" if metric == "val/pass@1" else None
            ax.plot(
                steps,
                [p[1] for p in points],
                color=colors(color),
                linestyle=style,
                label=label,
                marker=marker,
                markersize=3,
            )
            banded = [p for p in points if p[4] > 1]
            if banded:
                x, lo, hi = zip(*((p[0], p[2], p[3]) for p in banded))
                if "pass@" in metric or "maj@" in metric:  # a rate: its band stays within [0, 1]
                    lo, hi = [min(max(v, 0.0), 1.0) for v in lo], [min(max(v, 0.0), 1.0) for v in hi]
                ax.fill_between(x, lo, hi, color=colors(color), alpha=0.12, linewidth=0)
    for ax, metric in zip(panels, names):
        ax.set_xlabel("step")
        ax.set_ylabel(y_labels[metric])
        ax.set_title(names[metric])
        ax.grid(alpha=0.3)
    # One legend beside the panels, not over the data (a tuning sweep has 20+ cells).
    handles, labels = max((ax.get_legend_handles_labels() for ax in panels), key=lambda hl: len(hl[1]))
    fig.legend(
        handles,
        labels,
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.0, 0.93),
        ncol=1 if len(labels) <= 20 else 2,
    )
    fig.suptitle(f"{title}: seed mean, band = 95% t-interval over seeds")
    fig.tight_layout()
    return fig


def write_curves_csv(curves: dict, path: Path) -> None:
    with atomic_file(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "metric", "step", "mean", "low", "high", "seeds"])
        for label, metrics in curves.items():
            for metric, points in metrics.items():
                for step, mean, lo, hi, n in points:
                    w.writerow([label, metric, step, *(f"{x:.6g}" for x in (mean, lo, hi)), n])
