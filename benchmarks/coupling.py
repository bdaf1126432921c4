"""Common random numbers in a finished sweep: how long two methods sample one rollout; their paired spread.

Reads a sweep's archive (``<report_dir>/results.csv`` and each run's ``logs/fit/metrics.csv``) whose grid
crosses two methods with ``model.sampling_key`` (``stream`` / ``keyed``) over seeds, e.g.
``sweeps/keyed_sampling_tiny.yaml``. For each seed and sampling: the steps the two methods' rollouts stay
identical from the start (``train/rollout_hash`` equal at every step so far: "coupled") and the steps
with identical rollouts in all; then, per sampling, the paired difference of ``--metric`` (second
method minus first) per seed, with its mean and SD over seeds. Writes ``<report_dir>/coupling.md``.

A whole rollout stops being identical at the first token that differs anywhere in it. Row by row:
``--samples METHOD:SAMPLING=PATH`` reads a run's ``samples/fit.jsonl`` (``model.log_samples``) into
``<report_dir>/rows.csv`` (a hash of each row's completion by step), from which the share of rows
the two methods sample identically is given per step and sampling.

    python benchmarks/coupling.py sweeps/results/keyed_sampling_tiny
    python benchmarks/coupling.py sweeps/results/keyed_sampling_tiny --samples grpo:keyed=PATH ...
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import zlib
from pathlib import Path


def hashes(report_dir: Path, run_id: str) -> list[str]:
    """The run's ``train/rollout_hash`` by step, in order."""
    path = report_dir / "runs" / run_id / "logs" / "fit" / "metrics.csv"
    with open(path) as f:
        return [row["train/rollout_hash"] for row in csv.DictReader(f) if row.get("train/rollout_hash")]


def coupling(a: list[str], b: list[str]) -> tuple[int, int, int]:
    """(leading steps with equal hashes, steps with equal hashes, steps compared)."""
    n = min(len(a), len(b))
    same = [a[i] == b[i] for i in range(n)]
    lead = next((i for i, s in enumerate(same) if not s), n)
    return lead, sum(same), n


def write_rows(report_dir: Path, samples: list[str]) -> None:
    """``rows.csv``: method, sampling, step, row, crc32 of the completion, from ``METHOD:SAMPLING=PATH`` s."""
    with open(report_dir / "rows.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["method", "sampling", "step", "row", "completion_crc32"])
        for item in samples:
            name, path = item.split("=", 1)
            method, sampling = name.split(":")
            counts: dict[int, int] = {}
            for line in open(path):
                r = json.loads(line)
                row = counts[r["step"]] = counts.get(r["step"], -1) + 1
                out.writerow([method, sampling, r["step"], row, zlib.crc32(r["completion"].encode())])


def row_shares(report_dir: Path, methods: list[str]) -> list[str]:
    """Per sampling: the share of rows the two methods sampled identically, step by step."""
    with open(report_dir / "rows.csv") as f:
        rows = list(csv.DictReader(f))
    lines = ["", f"Rows {methods[1]} and {methods[0]} sample identically, by step (from rows.csv):", ""]
    for sampling in dict.fromkeys(r["sampling"] for r in rows):
        got = {
            (r["method"], r["step"], r["row"]): r["completion_crc32"]
            for r in rows
            if r["sampling"] == sampling
        }
        steps = sorted({int(s) for m, s, _ in got if m == methods[0]})
        shares = []
        for step in steps:
            keys = [k for k in got if k[0] == methods[0] and k[1] == str(step)]
            same = [got[k] == got.get((methods[1], k[1], k[2])) for k in keys]
            shares.append(sum(same) / len(same))
        lines.append(
            f"- {sampling}: "
            + " ".join(f"{x:.2f}" for x in shares)
            + f" (mean {statistics.mean(shares):.2f})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", type=Path)
    parser.add_argument(
        "--axis", default="model.sampling_key", help="the results.csv column of the sampling axis"
    )
    parser.add_argument("--metric", default="test/pass@1")
    parser.add_argument(
        "--samples", nargs="*", default=[], help="METHOD:SAMPLING=PATH to a samples/fit.jsonl"
    )
    args = parser.parse_args(argv)
    if args.samples:
        write_rows(args.report_dir, args.samples)
    with open(args.report_dir / "results.csv") as f:
        rows = list(csv.DictReader(f))
    if not rows or args.axis not in rows[0]:
        print(f"{args.report_dir}/results.csv has no column {args.axis!r}: pass --axis", file=sys.stderr)
        return 2
    methods = list(dict.fromkeys(r["method"] for r in rows))
    if len(methods) != 2:
        print(f"{args.report_dir}: needs exactly two methods, found {methods}", file=sys.stderr)
        return 2
    cell = {(r["method"], r[args.axis], r["seed"]): r for r in rows}
    lines = [
        f"# Coupling: {methods[1]} against {methods[0]}, by {args.axis}",
        "",
        f"| {args.axis} | seed | coupled steps | identical steps | steps | {args.metric} difference |",
        "|---|---|---|---|---|---|",
    ]
    summary = []
    for key in dict.fromkeys(r[args.axis] for r in rows):
        diffs, leads = [], []
        for seed in dict.fromkeys(r["seed"] for r in rows):
            a, b = cell.get((methods[0], key, seed)), cell.get((methods[1], key, seed))
            if a is None or b is None:
                continue
            lead, same, n = coupling(
                hashes(args.report_dir, a["run_id"]), hashes(args.report_dir, b["run_id"])
            )
            diff = float(b[args.metric]) - float(a[args.metric])
            diffs.append(diff)
            leads.append(lead)
            lines.append(f"| {key} | {seed} | {lead} | {same} | {n} | {100 * diff:+.1f} |")
        if len(diffs) > 1:
            sd = 100 * statistics.stdev(diffs)
            summary.append(
                f"| {key} | {len(diffs)} | {statistics.median(leads):g} | "
                f"{100 * statistics.mean(diffs):+.2f} | {sd:.2f} |"
            )
    lines += [
        "",
        f"| {args.axis} | seeds | median coupled steps | mean difference (points) | SD of the differences |",
        "|---|---|---|---|---|",
        *summary,
    ]
    if (args.report_dir / "rows.csv").exists():
        lines += row_shares(args.report_dir, methods)
    text = "\n".join(lines) + "\n"
    (args.report_dir / "coupling.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
