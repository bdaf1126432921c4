"""How far can any method get? The Monte-Carlo oracle's own reliability, and how it grows with M.

Application layer (beside ``credit_eval``; imports the MC credit assigner and the credit metrics).

The oracle estimates each segment's advantage from M sampled continuations, so it is noisy: even a
method that knew the true credit exactly would not correlate 1 with it. Classical test theory gives
the ceiling. Split the oracle's M continuations into two independent halves A and B (M/2 each;
their weighted mean IS the M-sample oracle, since MC values are means of rewards); their per-rollout
Spearman correlation r_half, averaged like every method's, is the reliability of an M/2 oracle, and
Spearman-Brown gives that of the full M-sample oracle:

    reliability(M) = 2 r_half / (1 + r_half)
    ceiling(M)     = sqrt(reliability(M))   the correlation of the TRUE credit with the M-sample oracle

A method's Spearman divided by the ceiling is its share of what a perfect method could reach
(disattenuation). Another independent MC estimate with M samples would score reliability(M) itself.
Both are population-level approximations (per-rollout correlations are averaged before the formula).

``curve`` measures reliability directly for several M on a subset of the rollouts: two independent
oracles of M samples each, their mean per-rollout correlation (no Spearman-Brown needed), next to
the Spearman-Brown prediction from the smallest M. ``write_curve`` writes oracle_ceiling.{csv,md,png}.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from ...core.files import write_bytes, write_text
from ...core.rng import seeded
from .metrics import Summary, is_constant, spearman, summarise

log = logging.getLogger(__name__)


def oracle(samples: int, every: int):
    """The lab's Monte-Carlo oracle: raw value differences, cuts every ``every`` tokens."""
    from ...credit.mc import MonteCarloCredit

    return MonteCarloCredit(
        num_samples=samples, segment="tokens", every=every, max_segments=64, scale_by_std=False
    )


def estimate(rollout, make, samples: int, every: int, key: tuple) -> tuple[Tensor, int]:
    """One oracle estimate [N, T] with ``samples`` continuations per cut, drawn from seed ``key``."""
    scorer = make()
    with seeded(*key), torch.no_grad():
        adv = oracle(samples, every).assign(rollout, scorer).advantages
    return adv, scorer.forward_tokens


def split_oracle(
    rollout, make, samples: int, every: int, key: tuple, tick: Callable[[], object] = lambda: None
) -> tuple[Tensor, Tensor | None, Tensor | None, int]:
    """(the M-sample oracle, half A, half B, forward tokens): halves of M//2 and M - M//2 samples.

    With M = 1 there is no split: (the oracle, None, None, tokens). ``tick`` is called after each estimate.
    """
    if samples < 2:
        truth, tokens = estimate(rollout, make, samples, every, (*key, "all"))
        tick()
        return truth, None, None, tokens
    m_a = samples // 2
    a, tok_a = estimate(rollout, make, m_a, every, (*key, "A"))
    tick()
    b, tok_b = estimate(rollout, make, samples - m_a, every, (*key, "B"))
    tick()
    return (m_a * a + (samples - m_a) * b) / samples, a, b, tok_a + tok_b


def agreement(a: Tensor, b: Tensor, full: Tensor) -> float | None:
    """Spearman of two oracle estimates of one rollout [L]; a constant one counts 0 (no ranking).

    Defined on the rollouts where ``full`` (the oracle the methods are scored against) varies: the
    same rollouts every method's mean is taken over."""
    if is_constant(full):
        return None
    if is_constant(a) or is_constant(b):
        return 0.0
    return spearman(a, b)


def spearman_brown(r: float | None, k: float = 2.0) -> float | None:
    """Reliability of a k-times longer test from that of one part: k r / (1 + (k - 1) r)."""
    if r is None or 1 + (k - 1) * r <= 0:
        return None
    return k * r / (1 + (k - 1) * r)


def ceiling(half: Summary) -> dict:
    """Reliability and ceiling (with the interval's ends mapped through the same monotone formulas)."""
    rel = [spearman_brown(x) for x in (half.mean, half.low, half.high)]
    root = [math.sqrt(x) if x is not None and x > 0 else None for x in rel]
    return {"r_half": half, "reliability": rel, "ceiling": root}


def share(value: float | None, top: float | None) -> float | None:
    return None if value is None or not top else value / top


# ---------------------------------------------------------------------------- the curve over M
def curve(rollouts: dict, make_for, samples: list[int], every: int, seed: int, n_boot: int) -> list[dict]:
    """Per M: two independent M-sample oracles on ``rollouts`` ({offset: rollout}); their agreement."""
    rows = []
    for m in samples:
        values, groups = [], []
        for b, rollout in rollouts.items():
            make = make_for(rollout)
            a, _ = estimate(rollout, make, m, every, (seed, "curve", m, b, "A"))
            c, _ = estimate(rollout, make, m, every, (seed, "curve", m, b, "B"))
            full = (a + c) / 2
            for i, L in enumerate(rollout.lengths.tolist()):
                if L >= 1:
                    values.append(agreement(a[i, :L], c[i, :L], full[i, :L]))
                    groups.append(b + int(rollout.group[i]))
        s = summarise(values, groups, n_boot, seed)
        rows.append({"M": m, "reliability": s})
        log.info("oracle ceiling: M = %d, reliability %s", m, s.cell(3))
    if rows and rows[0]["reliability"].mean is not None:
        r0, m0 = rows[0]["reliability"].mean, rows[0]["M"]
        for row in rows:
            row["predicted"] = spearman_brown(r0, row["M"] / m0)
    return rows


def _f(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def curve_markdown(rows: list[dict], note: str) -> str:
    lines = [
        "| M | reliability of an M-sample oracle [95% CI] | ceiling sqrt(reliability) | "
        f"Spearman-Brown from M = {rows[0]['M']} | rollouts |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        s: Summary = r["reliability"]
        top = math.sqrt(s.mean) if s.mean is not None and s.mean > 0 else None
        lines.append(f"| {r['M']} | {s.cell(3)} | {_f(top)} | {_f(r.get('predicted'))} | {s.n}/{s.n_total} |")
    return "\n".join(lines) + f"\n\n{note}\n"


def write_curve(out: Path, rows: list[dict], note: str) -> str:
    """oracle_ceiling.csv, .md and .png under ``out``; returns the markdown table."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["M", "reliability", "low", "high", "ceiling", "predicted", "n", "n_total"])
    for r in rows:
        s: Summary = r["reliability"]
        top = math.sqrt(s.mean) if s.mean is not None and s.mean > 0 else None
        w.writerow(
            [
                r["M"],
                _f(s.mean, 4),
                _f(s.low, 4),
                _f(s.high, 4),
                _f(top, 4),
                _f(r.get("predicted"), 4),
                s.n,
                s.n_total,
            ]
        )
    write_text(out / "oracle_ceiling.csv", buf.getvalue())
    table = curve_markdown(rows, note)
    write_text(out / "oracle_ceiling.md", table)
    write_bytes(out / "oracle_ceiling.png", _curve_png(rows, note))
    return table


def _curve_png(rows: list[dict], note: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = [r["M"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ok = [r for r in rows if r["reliability"].mean is not None]
    if ok:
        means = [r["reliability"].mean for r in ok]
        lo = [r["reliability"].mean - (r["reliability"].low or r["reliability"].mean) for r in ok]
        hi = [(r["reliability"].high or r["reliability"].mean) - r["reliability"].mean for r in ok]
        ax.errorbar(
            [r["M"] for r in ok],
            means,
            yerr=[lo, hi],
            marker="o",
            capsize=3,
            label="reliability: two independent M-sample oracles",
        )
        ax.plot(
            [r["M"] for r in ok],
            [math.sqrt(max(x, 0.0)) for x in means],
            marker="s",
            label="ceiling = sqrt(reliability)",
        )
        pred = [r.get("predicted") for r in ok]
        if all(p is not None for p in pred):
            ax.plot(
                [r["M"] for r in ok], pred, ls="--", color="#888", label=f"Spearman-Brown from M = {ms[0]}"
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_ylim(0, 1)
    ax.set_xlabel("M (continuations per cut)")
    ax.set_ylabel("per-rollout Spearman, mean")
    ax.set_title("Monte-Carlo oracle: reliability and ceiling vs M", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.text(0.01, 0.01, note, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()
