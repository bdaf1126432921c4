"""The credit lab's outputs: credit_eval.{csv,md,png} (the .md also printed) and the methods' own metrics.

Application layer (beside ``credit_eval``, which computes the rows; this file only formats them).
Every file goes through ``core.files``' atomic writes.

Each row holds ``Summary`` objects (mean, 95% group-bootstrap interval, n) for ``spearman`` (constant
credit counted as 0, so every method is averaged over the same rollouts), ``ranked`` (the share of
those rollouts on which the method's credit varies at all), ``share`` (Spearman over the oracle's
ceiling), ``localisation`` and its ``uniform`` share, ``sign`` (zero credit counts as no agreement)
and ``coverage`` (the share of oracle-signed tokens the method gives any credit).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ...core.files import write_bytes, write_text
from .metrics import Summary

EMPTY = Summary(None, None, None, 0, 0)
KEYS = ("spearman", "share", "ranked", "localisation", "uniform", "sign", "coverage")


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = ["method", "class"]
    for key in KEYS:
        fields += [f"{key}_mean", f"{key}_low", f"{key}_high", f"{key}_n", f"{key}_total"]
    fields += ["tokens_per_group", "seconds_per_group", "notes"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        out = {"method": row["method"], "class": row["class"]}
        notes = []
        for key in KEYS:  # a row without a column (an older caller's) leaves its cells empty
            s: Summary = row.get(key) or EMPTY
            out.update(
                {
                    f"{key}_mean": _fmt(s.mean),
                    f"{key}_low": _fmt(s.low),
                    f"{key}_high": _fmt(s.high),
                    f"{key}_n": s.n,
                    f"{key}_total": s.n_total,
                }
            )
        if (row.get("ranked") or EMPTY).mean == 0:
            notes.append("constant credit in every rollout (Spearman counted 0)")
        out["tokens_per_group"] = f"{row['tokens_per_group']:.1f}"
        out["seconds_per_group"] = f"{row['seconds_per_group']:.4f}"
        out["notes"] = "; ".join(notes)
        writer.writerow(out)
    write_text(path, buf.getvalue())


def write_claims(path: Path, claims: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(claims[0]))
    writer.writeheader()
    writer.writerows(claims)
    write_text(path, buf.getvalue())


def write_method_metrics(path: Path, rows: list[dict]) -> None:
    """Each method's own ``Credit.metrics`` (RREDCoT's segments a completion, ...), mean over batches."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["method", "metric", "mean_over_batches"])
    for row in rows:
        for name, value in sorted((row.get("metrics") or {}).items()):
            writer.writerow([row["method"], name, _fmt(value)])
    write_text(path, buf.getvalue())


def method_metrics_lines(rows: list[dict]) -> list[str]:
    """The methods' own metrics as one line a method (none: no lines)."""
    lines = []
    for row in rows:
        metrics = row.get("metrics") or {}
        if metrics:
            cells = ", ".join(
                f"{k} {'undefined' if v is None else f'{v:.3g}'}" for k, v in sorted(metrics.items())
            )
            lines.append(f"* {row['method']}: {cells}")
    if not lines:
        return []
    return ["Each method's own metrics (its `Credit.metrics`, mean over batches):\n", *lines, ""]


def _cell(s: Summary, digits: int = 2) -> str:
    return s.cell(digits) if s.mean is not None else ("undefined" if s.n_total else "no rollouts")


def markdown(rows: list[dict], claims: list[dict], settings: dict, reference: dict, d: int) -> str:
    """The table (one line a method), the reference lines (ceiling, baselines), the claims, the settings."""
    head = (
        "| method | Spearman vs MC | share of ceiling | credit varies in | "
        f"localisation (+-{d} tok) | sign agreement | coverage | tokens / group | s / group |\n"
        "|---|---|---|---:|---|---|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        ranked = "-" if r["ranked"].mean is None else f"{r['ranked'].mean:.0%}"
        cov = "-" if r["coverage"].mean is None else f"{r['coverage'].mean:.0%}"
        lines.append(
            f"| {r['method']} | {_cell(r['spearman'])} | {_cell(r['share'])} | {ranked} | "
            f"{_cell(r['localisation'])} | {_cell(r['sign'])} | {cov} | "
            f"{r['tokens_per_group']:.0f} | {r['seconds_per_group']:.3f} |"
        )
    out = [head + "\n".join(lines), ""]
    out.append("Reference lines (the same rollouts and tokens for every method):\n")
    out.extend(f"* {k}: {v}" for k, v in reference.items())
    out.append("")
    out.append(
        "Every column is measured on the same set for every method: Spearman on the rollouts where the "
    )
    out.append("oracle varies (constant credit counts 0; 'credit varies in' is the share where the method's ")
    out.append("does), sign agreement on the tokens the oracle signs (zero credit counts as disagreement; ")
    out.append("'coverage' is the share of them the method credits at all), localisation on the failed ")
    out.append("rollouts with a known first error. 95% intervals: bootstrap over groups.\n")
    out.append("Paper claims on the same rollouts (a group holds when its mean margin over its qualifying ")
    out.append("failed rollouts is > 0):\n")
    out.append(
        "| claim | groups | holds in | share of groups | share of rollouts |\n|---|---:|---:|---:|---:|"
    )
    for c in claims:
        fg = "-" if c["frac_groups"] is None else f"{c['frac_groups']:.2f}"
        fr = "-" if c["frac_rollouts"] is None else f"{c['frac_rollouts']:.2f}"
        out.append(
            f"| {c['claim']}: {c['statement']} | {c['groups']} | {c['groups_holding']} | {fg} | {fr} |"
        )
    out.append("")
    out.extend(method_metrics_lines(rows))
    out.append("Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()))
    return "\n".join(out) + "\n"


def plot(path: Path, rows: list[dict], lines: dict[str, float | None], title: str) -> None:
    """Four panels; ``lines``: ceiling, uniform (localisation) and outcome_sign (sign) reference levels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["method"] for r in rows]
    panels = [
        ("spearman", "Spearman vs MC oracle", "ceiling", "oracle ceiling"),
        ("localisation", "localisation share at the first error", "uniform", "uniform share"),
        ("sign", "sign agreement (zero credit = no)", "outcome_sign", "outcome sign (GRPO)"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 3.9 + 0.22 * len(names)))
    for ax, (key, panel, ref, label) in zip(axes, panels):
        for k, r in enumerate(rows):
            s: Summary = r[key]
            if s.mean is None:
                ax.text(0, k, " undefined", va="center", fontsize=8, color="#666")
                continue
            err = None if s.low is None else [[s.mean - s.low], [s.high - s.mean]]
            ax.barh(k, s.mean, xerr=err, color="#3b75af", capsize=3)
        if lines.get(ref) is not None:
            ax.axvline(lines[ref], color="#c44", ls="--", label=f"{label} {lines[ref]:.2f}")
            ax.legend(fontsize=8, loc="lower right")
        ax.axvline(0, color="k", lw=0.5)
        ax.set_title(panel, fontsize=10)
        ax.set_yticks(range(len(names)), names if ax is axes[0] else [""] * len(names))
        ax.set_ylim(len(names) - 0.5, -0.5)
    ax = axes[3]
    ax.barh(range(len(rows)), [r["tokens_per_group"] for r in rows], color="#888")
    ax.set_title("extra forward tokens / group", fontsize=10)
    ax.set_yticks(range(len(names)), [""] * len(names))
    ax.set_ylim(len(names) - 0.5, -0.5)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    write_bytes(path, buf.getvalue())
