"""How SHEAR's credit time grows with completion length (hidden-state tensors only, no model).

For each completion length T, one group of G rollouts (half correct) with synthetic
hidden states [G, T, H]: a shared random trajectory plus per-rollout noise, the
incorrect rollouts drifting away from it after a random token (so spans range from
near-duplicates to far apart, as in a real group). Times ``SHEARCredit.token_weights``
(the whole credit computation after the policy pass: cost gather, all span-pair solves,
min/max pooling) for both solvers, medians over repeats, and the largest weight gap
between them.

    OMP_NUM_THREADS=1 python benchmarks/shear_scaling.py

writes ``benchmarks/results/shear_scaling.md`` with the command at the top.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from lightning_rlvr.credit.shear import SHEARCredit
from lightning_rlvr.credit.shear_distance import span_starts


def make_group(T: int, H: int, G: int, n_correct: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(T, H, generator=g)  # [T, H] shared trajectory
    hidden = base[None] + 0.5 * torch.randn(G, T, H, generator=g)  # [G, T, H]
    for i in range(n_correct, G):  # incorrect rollouts diverge after a random token
        k = int(torch.randint(T // 4, 3 * T // 4, (1,), generator=g))
        hidden[i, k:] += torch.randn(T - k, H, generator=g)
    mask = torch.ones(G, T, dtype=torch.long)
    rewards = torch.tensor([1.0] * n_correct + [0.0] * (G - n_correct))
    group = torch.zeros(G, dtype=torch.long)
    return hidden, mask, rewards, group


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--correct", type=int, default=4)
    p.add_argument("--spans", nargs="+", default=["100:25", "8:4"], help="window:stride settings")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--max-emd-pairs", type=int, default=20000, help="skip the (slow, linear) EMD loop above this"
    )
    p.add_argument("--out", default="benchmarks/results/shear_scaling.md")
    args = p.parse_args(argv)

    lines = [
        "# SHEAR credit time vs completion length",
        "",
        "```",
        " ".join(
            [f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}", "PYTHONPATH=.", "python"]
            + [shlex.quote(a) for a in ["benchmarks/shear_scaling.py", *(argv or sys.argv[1:])]]
        ),
        "```",
        "",
        f"One group of {args.group} rollouts ({args.correct} correct), hidden size {args.hidden}, "
        f"synthetic hidden states; time of `SHEARCredit.token_weights` (everything after the "
        f"policy pass), median of {args.repeats} repeats, on "
        f"{platform.processor() or platform.machine()} with torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s). Sinkhorn at the defaults (reg 0.05 of nbar, "
        f"num_iter 100, tol 1e-3); EMD = `ot.emd2` looped over the pairs. `pairs` = span pairs "
        f"solved (correct spans x incorrect spans); `max abs dw` = largest token-weight gap "
        f"Sinkhorn - EMD (the entropic bias bound is reg * log(window)). Times are wall-clock on a "
        f"shared machine; compare within a row more than across runs.",
        "",
        "| window:stride | T | spans/row | pairs | sinkhorn s | emd s | emd / sinkhorn | mean w (emd) "
        "| max abs dw |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines[:5]))
    SHEARCredit(window=8, stride=4).token_weights(*make_group(32, args.hidden, 4, 2, seed=0))  # warm-up
    for spec in args.spans:
        window, stride = (int(x) for x in spec.split(":"))
        for T in args.lengths:
            hidden, mask, rewards, group = make_group(T, args.hidden, args.group, args.correct, seed=T)
            times: dict[str, list[float]] = {}
            weights: dict[str, torch.Tensor] = {}
            n_spans = len(span_starts(T, window, stride))
            pairs = (args.correct * n_spans) * ((args.group - args.correct) * n_spans)
            for solver in ("sinkhorn", "emd") if pairs <= args.max_emd_pairs else ("sinkhorn",):
                credit = SHEARCredit(window=window, stride=stride, solver=solver)
                times[solver] = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    weights[solver], _, solved = credit.token_weights(hidden, mask, rewards, group)
                    times[solver].append(time.perf_counter() - t0)
                assert solved == pairs
            ts = statistics.median(times["sinkhorn"])
            if "emd" in times:
                te = statistics.median(times["emd"])
                gap = float((weights["sinkhorn"] - weights["emd"]).abs().max())
                emd = f"{te:.3f} | {te / ts:.2f} | {float(weights['emd'].mean()):.3f} | {gap:.4f}"
            else:
                emd = f"skipped (> {args.max_emd_pairs} pairs) | | | "
            row = f"| {window}:{stride} | {T} | {n_spans} | {pairs} | {ts:.3f} | {emd} |"
            print(row, flush=True)
            lines.append(row)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
