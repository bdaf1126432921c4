"""Plot a run's learning curve from its CSVLogger ``metrics.csv`` (val success and train success).

    python benchmarks/plot_curve.py runs/quickstart_agent/version_0/metrics.csv \
        --out docs/quickstart_agent_curve.png --title "quickstart_agent: GRPO on TextWorld cooking"

``val/pass@1`` is drawn at every validation (step 0 is the warm-started policy before RL);
``train/success`` (or ``train/reward_mean`` for single-turn tasks) per step and its running mean
over ``--window`` steps.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows where ``key`` was logged."""
    points = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) not in (None, "")]
    return [s for s, _ in points], [v for _, v in points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, help="a CSVLogger metrics.csv")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--window", type=int, default=5, help="running-mean window of the train curve")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.metrics) as f:
        rows = list(csv.DictReader(f))
    train_key = "train/success" if any(r.get("train/success") for r in rows) else "train/reward_mean"
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    steps, values = series(rows, train_key)
    if steps:
        ax.plot(steps, values, ".", color="tab:blue", alpha=0.35, label=f"{train_key} (per step)")
        k = max(1, args.window)
        mean = [
            sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1])
            for i in range(len(values))
        ]
        ax.plot(steps, mean, "-", color="tab:blue", label=f"{train_key} (mean of {k})")
    steps, values = series(rows, "val/pass@1")
    ax.plot(steps, values, "o-", color="tab:red", label="val/pass@1 (held-out games)")
    for s, v in zip(steps, values):
        ax.annotate(f"{v:.2f}", (s, v), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    if args.title:
        ax.set_title(args.title, fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
