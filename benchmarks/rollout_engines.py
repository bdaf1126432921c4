"""Rollout engines against a bare batched ``generate``: tokens per second and model FLOP/s.

Three ways to sample the same batch (the quickstart's warm-started tiny policy,
B prompts x G completions, at most 48 new tokens, temperature 1):

* ``bare generate`` -- only the ``model.generate`` call, on prompt tensors made outside the timer;
* ``HFGenerateEngine`` -- the module's ``rollout`` with the default engine (tokenise, generate, mask, decode);
* ``FastEngine`` -- the module's ``rollout`` with the fast engine.

Every runner is seeded alike each round, so all three sample the same tokens
(checked and reported; the fast engine can differ where float rounding flips a
near-tie). Rounds rotate the order; the first ``--warmup`` are dropped; medians and
per-round ratios to the bare ``generate`` of the same round are reported.

Model FLOP/s (``benchmarks/flops.py``) counts ``2 W + 4 L A c`` per completion
token (up to and including EOS) that sees ``c`` keys (W: weights of every Linear,
L layers, A = heads x head dim), over the rollout's wall time: the arithmetic the
useful tokens need, not the work the loop actually did on finished rows. It is
set against this machine's measured matmul peak on the same thread count and the
model's own decode shapes (``[N, in] @ [in, out]`` for its Linears), best of
several tries.

    python benchmarks/rollout_engines.py                                  # ~1 min on an idle machine
    python benchmarks/rollout_engines.py --rounds 3 --batch_size 2 --out /tmp/bench_smoke
    python benchmarks/rollout_engines.py --device cuda --engines hf vllm --name gpu_check   # GPU machines
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import common
import flops
import torch


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rows_equal(a: torch.Tensor, b: torch.Tensor, pad_id: int) -> float:
    """Share of rows of two [N, T] completion batches that are equal token for token (padding aside)."""
    width = max(a.shape[1], b.shape[1])
    a, b = (torch.nn.functional.pad(x, (0, width - x.shape[1]), value=pad_id) for x in (a, b))
    return float((a == b).all(-1).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (default 8)")
    parser.add_argument("--warmup", type=int, default=1, help="leading rounds left out (default 1)")
    parser.add_argument(
        "--batch_size", type=int, default=None, help="prompts B (default 16, or the config's)"
    )
    parser.add_argument(
        "--group_size", type=int, default=None, help="completions per prompt G (default 8, or the config's)"
    )
    parser.add_argument(
        "--max_new_tokens", type=int, default=None, help="completion budget (default 48, or the config's)"
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["hf", "fast"],
        choices=["hf", "fast", "vllm"],
        help="(default hf fast)",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--name",
        default=None,
        help="results file stem (default rollout_engines, or rollout_engines_<config stem>)",
    )
    common.add_policy_config_arg(parser)
    common.add_common_args(parser)
    args = parser.parse_args()
    common.tiny_batch_defaults(args)
    common.set_threads(args.threads)
    started, load_start = time.time(), common.load_average()

    from lightning_rlvr.collect.single_turn import encode_prompts
    from lightning_rlvr.engines.hf import HFGenerateEngine

    cli = common.build_cli("grpo", overrides=common.batch_overrides(args), base=args.policy_config)
    common.adopt_batch(args, cli)
    module = common.ready_policy(cli.model)
    module.model.to(args.device)
    model, tok = module.model, module.tokenizer
    what = common.policy_source(args)
    params = sum(p.numel() for p in model.parameters())
    count = flops.FlopModel.of(model)
    problems = [module.task.train_problem(i) for i in range(args.batch_size)]
    ids, mask = (
        t.repeat_interleave(args.group_size, 0).to(args.device)
        for t in encode_prompts(tok, problems, module.render)
    )
    engines = {"hf": HFGenerateEngine()}
    if "fast" in args.engines:
        from lightning_rlvr.engines.fast import FastEngine

        engines["fast"] = FastEngine()
    if "vllm" in args.engines:
        from lightning_rlvr.engines.vllm import VLLMEngine

        engines["vllm"] = VLLMEngine()
    seed = [0]
    last: dict[str, torch.Tensor] = {}

    def engine_runner(name: str):
        def run() -> tuple[float, int, float]:
            module.engine = engines[name]
            torch.manual_seed(seed[0])
            sync(args.device)
            t = time.perf_counter()
            rollout = module.rollout(problems, args.group_size)
            sync(args.device)
            dt = time.perf_counter() - t
            last[name] = rollout.completion_ids
            work = count.generation(rollout.prompt_mask.sum(-1), rollout.lengths)
            return dt, int(rollout.lengths.sum()), work

        return run

    @torch.no_grad()
    def bare() -> tuple[float, int, float]:
        torch.manual_seed(seed[0])
        model.eval()
        sync(args.device)
        t = time.perf_counter()
        out = common.bare_generate(model, tok, ids, mask, args.max_new_tokens)
        sync(args.device)
        dt = time.perf_counter() - t
        comp = out[:, ids.shape[1] :]
        is_eos = comp == tok.eos_token_id
        after = (is_eos.cumsum(-1) - is_eos.long()) > 0  # strictly after the first EOS
        last["bare"] = comp.masked_fill(after, tok.pad_token_id)
        lengths = (~after).sum(-1)  # [N]
        return dt, int(lengths.sum()), count.generation(mask.sum(-1), lengths)

    names = {
        "bare": "bare `model.generate`",
        "hf": "`HFGenerateEngine` rollout",
        "fast": "`FastEngine` rollout",
        "vllm": "`VLLMEngine` rollout",
    }
    runners = {"bare": bare, **{k: engine_runner(k) for k in engines}}
    results: dict[str, list[tuple[float, int, float]]] = {k: [] for k in runners}
    same: dict[str, list[float]] = {k: [] for k in engines}  # per round: share of rows equal to bare's
    order = list(runners)
    for r in range(args.rounds):
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            results[name].append(runners[name]())
        for name in same:
            a, b = last[name], last["bare"]
            same[name].append(rows_equal(a, b, tok.pad_token_id))
        seed[0] += 1
        print(f"round {r + 1}/{args.rounds} (load {common.load_average()})", flush=True)
    peak, peak_shape = flops.matmul_peak(count.shapes, args.batch_size * args.group_size, args.device)

    kept = slice(args.warmup, None)
    bare_tps = [n / t for t, n, _ in results["bare"][kept]]
    rows, ratios, rate_lines = [], {}, []
    for name in runners:
        secs = [t for t, _, _ in results[name][kept]]
        tps = [n / t for t, n, _ in results[name][kept]]
        ratios[name] = [a / b for a, b in zip(tps, bare_tps)]
        rate = common.median([w / t for t, _, w in results[name][kept]])
        rate_lines.append(f"- {flops.rate_line(names[name], rate, peak)}")
        rows.append(
            [
                names[name],
                common.fmt(common.median(secs)),
                common.fmt(common.median(tps), 0),
                common.fmt(common.median(ratios[name]), 2),
                common.fmt(rate / 1e9, 2),
                f"{rate / peak:.2f}",
                "-" if name == "bare" else f"{common.fmt(sum(same[name]) / len(same[name]), 2)}",
            ]
        )
    fast = common.median(ratios.get("fast", [float("nan")]))
    target = 2.0 if args.policy_config else 1.5  # the real model's bar (issue 28); the tiny one's (16)
    threads = f"{torch.get_num_threads()} thread(s)" if args.device == "cpu" else args.device
    body = "\n".join(
        [
            f"Batch: {args.batch_size} prompts x {args.group_size} completions, "
            f"at most {args.max_new_tokens} new tokens, temperature 1. "
            f"Model: {what}, {params:,} parameters. "
            f"{args.rounds} interleaved rounds, first {args.warmup} dropped; medians. Tokens = completion "
            "tokens up to and including EOS. `x bare` is the median of per-round ratios of tokens/s. "
            "`same rows` is the share of completions equal to the bare `generate`'s token for token "
            "(all rounds; a float-rounding near-tie flips a row from there on).",
            "",
            common.md_table(
                [
                    "rollout",
                    "seconds",
                    "tokens/s",
                    "x bare",
                    "model GFLOP/s",
                    "of matmul peak",
                    "same rows",
                ],
                rows,
            ),
            "",
            f"Matmul peak on this machine, {threads}: {peak / 1e9:.1f} GFLOP/s "
            f"(best `torch.matmul` over the model's Linear shapes with the batch's rows, at {peak_shape}). "
            "Model FLOP/s = (2 W + 4 L A c) per completion token that sees c keys / rollout seconds; "
            "W = weights of every Linear (LM head included), L layers, A = heads x head dim "
            "(`benchmarks/flops.py`).",
            "",
            *rate_lines,
            "",
            "Per-round ratios to bare `generate` (tokens/s):",
            *(f"- {names[n]}: " + ", ".join(common.fmt(x, 2) for x in ratios[n]) for n in engines),
            "",
            ""
            if "fast" not in engines
            else f"Target: `FastEngine` >= {target}x bare `generate`: "
            f"{'met' if fast >= target else 'missed'} "
            f"({common.fmt(fast, 2)}x).",
        ]
    )
    stem = f"rollout_engines_{Path(args.policy_config).stem}" if args.policy_config else "rollout_engines"
    common.write_result(
        args.name or stem, "Rollout engines against a bare generate", body, started, load_start, args.out
    )


if __name__ == "__main__":
    main()
