"""Step time per method at the quickstart scale, each as a ratio to GRPO measured in the same run.

What it measures is what a user's step costs: every method's module is built
from the YAMLs (``configs/quickstart.yaml`` + ``configs/method/<m>.yaml``) with
``RLVRCLI(run=False)``, warm-started from the on-disk cache, and driven by
``trainer.fit`` itself (the real ``training_step``, real AdamW, Lightning's
logging), with ``max_steps`` raised by ``--steps`` each round. Methods take
turns in rounds (the order rotates) so slow drift of the shared machine hits
them alike; the first ``--warmup`` rounds are dropped and medians reported.

Per step it records the wall time of ``training_step`` (batch start to batch
end), the module's own split (``time/rollout_s``, ``time/score_s``,
``time/credit_s``, ``time/update_s``), rollout tokens per second
(``perf/tokens_per_s``: completion tokens / rollout time) and the RSS
high-water mark during the step (``/proc/self/status`` VmHWM, reset before the
step through ``/proc/self/clear_refs``; all methods live in one process, so
the peak includes the other methods' modules: the step's own growth over its
starting RSS is shown too).

    python benchmarks/step_time.py                                   # all methods, ~3 min
    python benchmarks/step_time.py --methods grpo dapo --rounds 2 --steps 1 --warmup 1 \\
        --extra_config tests/configs/tiny.yaml --out /tmp/bench_smoke  # smoke test
"""

from __future__ import annotations

import argparse
import time

import common


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--methods", nargs="*", help="method YAML stems (default: every configs/method/*.yaml)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument("--steps", type=int, default=2, help="steps of each method per round (default 2)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="leading rounds left out of the medians (default 1)"
    )
    parser.add_argument(
        "--extra_config", nargs="*", default=[], help="more YAMLs composed after the method's"
    )
    common.add_common_args(parser)
    args = parser.parse_args()
    common.set_threads(args.threads)
    if args.rounds <= args.warmup:
        parser.error("--rounds must exceed --warmup")

    started, load_start = time.time(), common.load_average()
    methods = common.available_methods(args.methods)
    if "grpo" not in methods:
        methods = ["grpo", *methods]
    clis, recorders = {}, {}
    for m in methods:
        clis[m] = common.build_cli(m, args.extra_config)
        recorders[m] = common.StepRecorder()
        print(f"built {m}: {type(clis[m].model.credit).__name__}")

    runners = {m: (lambda m=m: common.fit_steps(clis[m], recorders[m], args.steps)) for m in methods}
    results = common.interleave(runners, args.rounds)

    rows, base = [], None
    for m in methods:
        steps = [s for r in results[m][args.warmup :] for s in r]
        med = {k: common.median([s.get(k, float("nan")) for s in steps]) for k in steps[0]}
        grow = common.median([s["peak_rss_mb"] - s["rss_before_mb"] for s in steps])
        if m == "grpo":
            base = med["step_s"]
        module, dm = clis[m].model, clis[m].datamodule
        parts = sum(med[f"time/{k}_s"] for k in ("rollout", "score", "credit", "update"))
        rows.append(
            [
                common.display(m),
                f"{dm.batch_size}x{module.group_size}",
                len(steps),
                common.fmt(med["step_s"]),
                "",  # ratio filled below
                common.fmt(med["time/rollout_s"]),
                common.fmt(med["time/score_s"]),
                common.fmt(med["time/credit_s"]),
                common.fmt(med["time/update_s"]),
                common.fmt(med["step_s"] - parts),
                common.fmt(med["train/completion_len"], 1),
                common.fmt(med["perf/tokens_per_s"], 0),
                common.fmt(med["peak_rss_mb"], 0),
                common.fmt(grow, 0),
            ]
        )
    for row in rows:
        row[4] = common.fmt(float(row[3]) / base, 2)
    headers = [
        "method", "B x G", "steps", "step s", "x GRPO", "rollout s", "score s", "credit s", "update s",
        "other s", "completion len", "rollout tok/s", "peak RSS MB", "step RSS growth MB",
    ]  # fmt: skip
    body = "\n".join(
        [
            f"Interleaved: {args.rounds} rounds x {args.steps} steps per method, "
            f"first {args.warmup} round(s) dropped; medians over the remaining steps. "
            "`step s` is the wall time of `training_step` under "
            "`trainer.fit`; `other s` is what the module's four timers do not cover (Lightning logging, "
            "metric reductions). `rollout tok/s` is completion tokens (up to EOS) over rollout time. "
            "`peak RSS MB` is the VmHWM during the step in one process holding every method's module; "
            "`step RSS growth MB` is that peak minus the RSS at the step's start.",
            "",
            common.md_table(headers, rows),
        ]
    )
    common.write_result(
        "step_time", "Step time per method (quickstart scale)", body, started, load_start, args.out
    )


if __name__ == "__main__":
    main()
