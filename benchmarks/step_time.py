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
starting RSS is shown too), and the model FLOP/s of generation and update
(``benchmarks/flops.py``) against this machine's matmul peak on the model's shapes.

    python benchmarks/step_time.py                                   # all methods, ~3 min
    python benchmarks/step_time.py --methods grpo dapo --rounds 2 --steps 1 --warmup 1 \\
        --extra_config tests/configs/tiny.yaml --out /tmp/bench_smoke  # smoke test
"""

from __future__ import annotations

import argparse
import time

import common
import flops
import torch


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
        recorders[m] = common.StepRecorder(flops.FlopMeter(clis[m].model))
        print(f"built {m}: {type(clis[m].model.credit).__name__}")

    runners = {m: (lambda m=m: common.fit_steps(clis[m], recorders[m], args.steps)) for m in methods}
    results = common.interleave(runners, args.rounds)

    # the machine's matmul peak on the model's shapes: decode rows (generation) and token rows (update)
    from lightning_rlvr.collect.single_turn import encode_prompts

    grpo, dm = clis["grpo"].model, clis["grpo"].datamodule
    rows_gen = dm.batch_size * grpo.group_size
    problems = [grpo.task.train_problem(i) for i in range(dm.batch_size)]
    width = encode_prompts(grpo.tokenizer, problems)[0].shape[1] + grpo.max_new_tokens
    shapes = flops.FlopModel.of(grpo.model).shapes
    peak_gen, shape_gen = flops.matmul_peak(shapes, rows_gen)
    peak_upd, shape_upd = flops.matmul_peak(shapes, min(grpo.micro_batch_size, rows_gen) * width)

    def gflops(steps: list[dict], work: str, secs: str, peak: float) -> str:
        rate = common.median([s[work] / seconds(s, secs) for s in steps if seconds(s, secs) > 0])
        return f"{rate / 1e9:.2f} ({rate / peak:.2f})"

    def seconds(step: dict, secs: str) -> float:
        """The phase's seconds; a fused update's forwards ran before the credit, inside ``score s``."""
        fused = secs == "time/update_s" and step.get("perf/fused_policy_pass", 0.0) > 0
        return step.get(secs, 0.0) + (step.get("time/score_s", 0.0) if fused else 0.0)

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
                gflops(steps, "gen_flops", "time/rollout_s", peak_gen),
                gflops(steps, "update_flops", "time/update_s", peak_upd),
                common.fmt(med["peak_rss_mb"], 0),
                common.fmt(grow, 0),
            ]
        )
    for row in rows:
        row[4] = common.fmt(float(row[3]) / base, 2)
    headers = [
        "method",
        "B x G",
        "steps",
        "step s",
        "x GRPO",
        "rollout s",
        "score s",
        "credit s",
        "update s",
        "other s",
        "completion len",
        "rollout tok/s",
        "generation GFLOP/s",
        "update GFLOP/s",
        "peak RSS MB",
        "step RSS growth MB",
    ]
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
            "",
            "Model GFLOP/s (in brackets: share of the matmul peak): generation counts 2 W + 4 L A c per "
            "generated token that sees c keys, over `rollout s` (the rows the step trains on; rows DAPO's "
            "dynamic sampling drops are not counted); update counts 4 W + 2 W_t + 12 L A i per trained "
            "token at causal position i (W_t = the weights that train; 6 W when all do; each group's "
            "prompt once and the LM head only where a logit trains: `update_needed`; x `ppo_epochs`), "
            "over `update s` (plus `score s` when the "
            "update's forwards ran before the credit to serve its policy pass, `perf/fused_policy_pass`); "
            "W = weights of every Linear (LM head included), L layers, A = heads x head dim "
            "(`benchmarks/flops.py`). Credit and scoring "
            f"passes are not counted. Matmul peak, {torch.get_num_threads()} thread(s), best `torch.matmul` "
            f"over the model's Linear shapes: {peak_gen / 1e9:.1f} GFLOP/s with the decode batch's rows "
            f"(at {shape_gen}), {peak_upd / 1e9:.1f} GFLOP/s with the update's token rows (at {shape_upd}).",
        ]
    )
    common.write_result(
        "step_time", "Step time per method (quickstart scale)", body, started, load_start, args.out
    )


if __name__ == "__main__":
    main()
