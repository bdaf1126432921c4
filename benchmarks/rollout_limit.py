"""Our rollout against the limit: a bare batched ``model.generate`` of the same batch.

The rollout is the module's own ``RLVRModule.rollout`` (tokenise the B prompts,
repeat each G times, one ``generate`` with KV cache, cut the completions at the
first EOS, decode them). The bare baseline is only the ``generate`` call, on
prompt tensors prepared outside the timer, with the same sampling settings
(temperature 1.0, top-k and top-p off, 48 new tokens, EOS stop). Both calls are
seeded alike each round, so they sample the same tokens (checked): the work is
identical and the ratio of tokens per second is the inverse ratio of times.
Model: the quickstart's warm-started tiny policy (loaded from the cache).
Rounds alternate the two (order rotates); the first ``--warmup`` are dropped.

    python benchmarks/rollout_limit.py                                   # ~30 s
    python benchmarks/rollout_limit.py --rounds 3 --batch_size 2 --out /tmp/bench_smoke
"""

from __future__ import annotations

import argparse
import time

import common
import torch


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (default 8)")
    parser.add_argument("--warmup", type=int, default=1, help="leading rounds left out (default 1)")
    parser.add_argument("--batch_size", type=int, default=16, help="prompts B (default 16)")
    parser.add_argument("--group_size", type=int, default=8, help="completions per prompt G (default 8)")
    parser.add_argument("--max_new_tokens", type=int, default=48, help="completion budget (default 48)")
    common.add_common_args(parser)
    args = parser.parse_args()
    common.set_threads(args.threads)
    started, load_start = time.time(), common.load_average()

    module = common.build_cli("grpo", overrides=["--model.max_new_tokens", str(args.max_new_tokens)]).model
    module.warm_start.run(module.model, module.tokenizer, module.policy_source, module.task)
    model, tok = module.model, module.tokenizer
    problems = [module.task.train_problem(i) for i in range(args.batch_size)]
    enc = tok([p.prompt for p in problems], return_tensors="pt", padding=True, add_special_tokens=False)
    ids = enc["input_ids"].repeat_interleave(args.group_size, 0)
    mask = enc["attention_mask"].repeat_interleave(args.group_size, 0)
    seed = [0]
    last: dict[str, torch.Tensor] = {}

    def ours() -> tuple[float, int]:
        torch.manual_seed(seed[0])
        t = time.perf_counter()
        rollout = module.rollout(problems, args.group_size)
        dt = time.perf_counter() - t
        last["ours"] = rollout.completion_ids
        return dt, int(rollout.lengths.sum())

    @torch.no_grad()
    def bare() -> tuple[float, int]:
        torch.manual_seed(seed[0])
        model.eval()
        t = time.perf_counter()
        out = common.bare_generate(model, tok, ids, mask, args.max_new_tokens)
        dt = time.perf_counter() - t
        comp = out[:, ids.shape[1] :]
        last["bare"] = comp
        is_eos = comp == tok.eos_token_id
        n_tokens = int(((is_eos.cumsum(-1) - is_eos.long()) == 0).sum())  # up to and including the first EOS
        return dt, n_tokens

    same = []

    def both_done() -> None:
        a, b = last["ours"], last["bare"]
        b = b.masked_fill(
            (b == tok.eos_token_id).cumsum(-1) - (b == tok.eos_token_id).long() > 0, tok.pad_token_id
        )
        same.append(a.shape == b.shape and bool((a == b).all()))
        seed[0] += 1

    results: dict[str, list[tuple[float, int]]] = {"ours": [], "bare": []}
    for r in range(args.rounds):
        order = ["ours", "bare"] if r % 2 == 0 else ["bare", "ours"]
        for name in order:
            results[name].append(ours() if name == "ours" else bare())
        both_done()
        print(f"round {r + 1}/{args.rounds} (load {common.load_average()})", flush=True)

    def tps(name: str) -> list[float]:
        return [n / t for t, n in results[name][args.warmup :]]

    o_t = common.median([t for t, _ in results["ours"][args.warmup :]])
    b_t = common.median([t for t, _ in results["bare"][args.warmup :]])
    o_tps, b_tps = common.median(tps("ours")), common.median(tps("bare"))
    per_round = [o / b for o, b in zip(tps("ours"), tps("bare"))]
    ratio = common.median(per_round)
    rows = [
        ["ours (`RLVRModule.rollout`)", common.fmt(o_t), common.fmt(o_tps, 0)],
        ["bare `model.generate`", common.fmt(b_t), common.fmt(b_tps, 0)],
        ["ours / bare (tokens per second)", "", common.fmt(ratio, 3)],
    ]
    body = "\n".join(
        [
            f"Batch: {args.batch_size} prompts x {args.group_size} completions, "
            f"at most {args.max_new_tokens} "
            f"new tokens. {args.rounds} interleaved rounds, first {args.warmup} dropped; medians. "
            "Tokens = completion tokens up to and including EOS. "
            f"Same sampled tokens in {sum(same)}/{len(same)} rounds.",
            "",
            common.md_table(["rollout", "seconds", "tokens/s"], rows),
            "",
            "Per-round ratios: " + ", ".join(common.fmt(x, 3) for x in per_round) + ".",
            "",
            f"Target: ours >= 0.95x bare: {'met' if ratio >= 0.95 else 'missed'} ({common.fmt(ratio, 3)}x).",
        ]
    )
    common.write_result(
        "rollout_limit", "Rollout against a bare generate", body, started, load_start, args.out
    )


if __name__ == "__main__":
    main()
