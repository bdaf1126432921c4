"""Sandboxed code verification throughput: completions verified per second for one batch.

A batch of HumanEval-style completions (half canonical solutions, half wrong ones) goes through
``HumanEvalTask.check_batch``, as ``RLVRModule.verify`` would: one sandboxed process per
completion, ``workers`` at a time.

    python benchmarks/sandbox_throughput.py --batch 64 --workers 0   # 0: the task default
"""

from __future__ import annotations

import argparse
import os
import time

from lightning_rlvr.rewards.sandbox import SandboxLimits, sandbox_report
from lightning_rlvr.tasks import HumanEvalTask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--workers", type=int, default=0, help="parallel sandboxes (0: the task default, 2 x CPUs)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    task = HumanEvalTask(sandbox=SandboxLimits(wall_s=5.0), workers=args.workers or None)
    print("isolation:", sandbox_report())
    problems = [task.problem("test", i % task.size("test")) for i in range(args.batch)]
    completions = [p.solution if i % 2 == 0 else "    return None\n" for i, p in enumerate(problems)]
    rates = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        results = task.check_batch(completions, problems)
        rates.append(args.batch / (time.perf_counter() - t))
        assert [v.reward for v, _ in results] == [float(i % 2 == 0) for i in range(args.batch)]
    load = os.getloadavg()[0]
    print(
        f"batch {args.batch}, workers {task.workers}, cpus {os.cpu_count()}, load {load:.1f}: "
        f"{max(rates):.1f} completions/s best, {sorted(rates)[len(rates) // 2]:.1f} median "
        f"({', '.join(f'{r:.1f}' for r in rates)})"
    )


if __name__ == "__main__":
    main()
