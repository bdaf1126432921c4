"""Step time against completion length and group size, per method, with fitted growth exponents.

Each method's module is built once from the YAMLs (quickstart + method) with
``--data.batch_size`` prompts per step and a policy whose ``max_positions``
covers the longest teacher / hindsight context (2 x the longest completion +
64); the quickstart's warm-started weights are loaded into it from the cache
(RoPE has no position parameters, so the same weights fit). Long completions
are forced by **suppressing EOS** in sampling (``generation_config.suppress_tokens``):
every completion is exactly ``L`` tokens, so the rollout, the scorer's passes,
the credit and the update all see the full length, and rewards still come from
the verifier (the worked solution is still sampled first).

Length sweep: each method at its configured group size (HP-RLVR: G = 1), L in
``--lengths``. Group-size sweep: every method at G in ``--group_sizes`` with
EOS sampling as usual and ``--gs_length`` new tokens (HP-RLVR is designed for
G = 1; its row shows what G rows per prompt would cost). Each point is the
median of ``--repeats`` steps under ``trainer.fit``; methods take turns at each
point (order rotates). The exponent k is the least-squares slope of
log(step time) on log(L) or log(G) (step ~ x^k).

    python benchmarks/scaling.py                                            # ~4 min
    python benchmarks/scaling.py --methods grpo --lengths 16 32 --group_sizes 2 4 --repeats 1 \\
        --extra_config tests/configs/tiny.yaml --out /tmp/bench_smoke       # smoke test
"""

from __future__ import annotations

import argparse
import time

import common

from lightning_rlvr.models import TinyPolicy
from lightning_rlvr.warmstart import WarmStart


def load_quickstart_weights(module) -> None:
    """The quickstart's cached warm start (quickstart WarmStart + 128-position TinyPolicy) into ``module``."""
    ws = WarmStart(min_accuracy=0.2, lr=1.0e-3, batch_size=64)
    policy = TinyPolicy(**{k: v for k, v in vars(module.policy_source).items() if k != "max_positions"})
    policy.max_positions = 128
    module.warm_start_summary = ws.run(module.model, module.tokenizer, policy, module.task)


def sweep(clis, recorders, methods, knob: str, values: list[int], repeats: int) -> dict[str, list[float]]:
    """Median step time of each method at each value of ``knob`` (``max_new_tokens`` or ``group_size``)."""
    out: dict[str, list[float]] = {m: [] for m in methods}
    for i, v in enumerate(values):
        shift = i % len(methods)
        for m in methods[shift:] + methods[:shift]:
            setattr(clis[m].model, knob, v)
            steps = common.fit_steps(clis[m], recorders[m], repeats)
            out[m].append(common.median([s["step_s"] for s in steps]))
        print(f"{knob}={v} done (load {common.load_average()})", flush=True)
    return out


def table(methods, values, times, label: str) -> str:
    rows = []
    for m in methods:
        k = common.growth_exponent(values, times[m])
        rows.append([common.display(m), *(common.fmt(t, 2) for t in times[m]), common.fmt(k, 2)])
    return common.md_table(["method", *(f"{label}={v}" for v in values), "exponent k"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--methods", nargs="*", help="method YAML stems (default: every configs/method/*.yaml)"
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[32, 64, 128, 256], help="completion lengths"
    )
    parser.add_argument("--group_sizes", type=int, nargs="+", default=[2, 4, 8, 16], help="group sizes")
    parser.add_argument("--gs_length", type=int, default=48, help="max new tokens in the group-size sweep")
    parser.add_argument("--batch_size", type=int, default=2, help="prompts per step (default 2)")
    parser.add_argument("--repeats", type=int, default=2, help="steps per point, median (default 2)")
    parser.add_argument(
        "--extra_config", nargs="*", default=[], help="more YAMLs composed after the method's"
    )
    common.add_common_args(parser)
    args = parser.parse_args()
    common.set_threads(args.threads)
    started, load_start = time.time(), common.load_average()

    methods = common.available_methods(args.methods)
    positions = 2 * max(args.lengths + [args.gs_length]) + 64
    overrides = [
        "--data.batch_size",
        str(args.batch_size),
        "--model.warm_start",
        "null",
        "--model.policy.init_args.max_positions",
        str(positions),
    ]
    clis, recorders, configured_g = {}, {}, {}
    for m in methods:
        clis[m] = common.build_cli(m, args.extra_config, overrides)
        module = clis[m].model
        if not args.extra_config:
            load_quickstart_weights(module)
        configured_g[m] = module.group_size
        recorders[m] = common.StepRecorder()
        module.max_new_tokens = args.lengths[0]
        common.fit_steps(clis[m], recorders[m], 1)  # warm-up step, dropped
    eos = clis[methods[0]].model.tokenizer.eos_token_id

    for m in methods:
        clis[m].model.model.generation_config.suppress_tokens = [eos]
    by_length = sweep(clis, recorders, methods, "max_new_tokens", args.lengths, args.repeats)
    lens = {
        m: common.median([s["train/completion_len"] for s in recorders[m].steps[-args.repeats :]])
        for m in methods
    }
    for m in methods:
        clis[m].model.model.generation_config.suppress_tokens = None
        clis[m].model.max_new_tokens = args.gs_length
    by_group = sweep(clis, recorders, methods, "group_size", args.group_sizes, args.repeats)

    body = "\n".join(
        [
            f"{args.batch_size} prompts per step; median of {args.repeats} steps per point; step = wall time "
            "of `training_step` under `trainer.fit`, in seconds.",
            "",
            "### Against completion length L (EOS suppressed: every completion has exactly L tokens)",
            "",
            "Group size as configured: "
            + ", ".join(f"{common.display(m)} G={configured_g[m]}" for m in methods)
            + ". Completion length measured at the longest L: "
            + ", ".join(f"{common.display(m)} {common.fmt(lens[m], 0)}" for m in methods)
            + ".",
            "",
            table(methods, args.lengths, by_length, "L"),
            "",
            f"### Against group size G (EOS sampled as usual, at most {args.gs_length} new tokens)",
            "",
            table(methods, args.group_sizes, by_group, "G"),
        ]
    )
    common.write_result(
        "scaling", "Scaling with completion length and group size", body, started, load_start, args.out
    )


if __name__ == "__main__":
    main()
