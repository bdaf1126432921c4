"""HSD's peak memory with a dense teacher ([n, T, V]) against a top-k teacher ([n, T, k] + tail).

A tiny Llama built in code with a 32,000-token vocabulary (so the teacher's
distributions, not the weights, dominate), a hand-made rollout of B x G rows of
T completion tokens, and one HSD step: ``assign`` (the teacher pass) followed by
the policy update through ``Credit.token_loss``. Each mode runs in a fresh
process; the figure is the process's peak RSS during assign + update minus its
RSS just before (the model, the rollout and the runtime are already there).

    python benchmarks/hsd_memory.py                    # dense and k = 64, ~1 min on 2 cores
    python benchmarks/hsd_memory.py --top_k 64 --rows 8 --tokens 32   # smoke test

Writes ``benchmarks/results/hsd_memory.md``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class CharTokenizer:
    """Enough of a tokenizer for HSD's templates: one id per character (ids below 128)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) % 128 for c in text]}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_once(top_k: int | None, rows: int, tokens: int, vocab: int, micro_batch: int) -> dict:
    """One HSD assign + update in this process; returns the peak RSS growth in MB."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_rlvr.core.problem import Problem
    from lightning_rlvr.core.rollout import Rollout
    from lightning_rlvr.credit.hsd import HSDCredit
    from lightning_rlvr.losses import PPOClip
    from lightning_rlvr.scoring.scorer import Scorer

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4 * tokens + 64,
    )
    model = LlamaForCausalLM(config)
    G, P = 4, 8
    B = rows // G
    prompt = torch.randint(200, vocab, (B, P)).repeat_interleave(G, 0)  # [N, P]
    completion = torch.randint(200, vocab, (rows, tokens))  # [N, T], every row full length
    correct = torch.tensor([i % G == 0 for i in range(rows)])  # one success per group: its peer
    rollout = Rollout(
        prompt_ids=prompt,
        prompt_mask=torch.ones_like(prompt),
        completion_ids=completion,
        completion_mask=torch.ones_like(completion),
        group=torch.arange(B).repeat_interleave(G),
        problems=[Problem(prompt="", answer="42") for _ in range(B)],
        completions=[""] * rows,
        pad_id=0,
        eos_id=1,
        rewards=correct.float(),
        correct=correct,
    )
    credit = HSDCredit(peer_template="{prompt}{reference};{answer};{prompt}", teacher_top_k=top_k)
    loss_fn = PPOClip()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    before = rss_mb()
    base_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # ---- assign (teacher pass) + one update, as RLVRModule.update does it
    scorer = Scorer(model, rollout, CharTokenizer(), micro_batch_size=micro_batch)
    out = credit.assign(rollout, scorer)
    mask = rollout.completion_mask.float()
    weights = loss_fn.weights(mask, tokens, lambda x: x)
    for i in range(0, rows, micro_batch):
        idx = torch.arange(i, min(i + micro_batch, rows))
        logits = model(input_ids=rollout.input_ids[idx], attention_mask=rollout.attention_mask[idx]).logits
        logits = logits[:, P - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, completion[idx, :, None]).squeeze(-1)
        tok, _ = loss_fn(logp, logp.detach(), out.advantages[idx], mask[idx])
        loss = (tok * weights[idx]).sum() + (out.token_loss(logits, idx) * weights[idx]).sum()
        loss.backward()
    opt.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "top_k": top_k,
        "peak_growth_mb": peak - before,  # an upper bound if the peak was set before (see base_peak_mb)
        "peak_mb": peak,
        "before_mb": before,
        "base_peak_mb": base_peak,
        "distilled_rows": int(round(out.metrics["frac_distilled_rows"] * rows)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top_k", type=int, nargs="*", default=[64], help="sparse teachers to measure")
    parser.add_argument("--rows", type=int, default=16, help="N = B x G rows (G = 4)")
    parser.add_argument("--tokens", type=int, default=128, help="completion tokens per row (T)")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--micro_batch", type=int, default=4)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        top_k = None if args.child == "dense" else int(args.child)
        print(json.dumps(run_once(top_k, args.rows, args.tokens, args.vocab, args.micro_batch)))
        return
    results = []
    for mode in ["dense"] + [str(k) for k in args.top_k]:
        sizes = ["--rows", str(args.rows), "--tokens", str(args.tokens), "--vocab", str(args.vocab)]
        cmd = [sys.executable, __file__, "--child", mode, *sizes, "--micro_batch", str(args.micro_batch)]
        env_out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO)
        results.append(json.loads(env_out.stdout.strip().splitlines()[-1]))
    n, T, V = results[0]["distilled_rows"], args.tokens, args.vocab
    lines = [
        f"HSD assign + update, tiny Llama (1 layer, width 64), V = {V}, N = {args.rows} rows "
        f"(G = 4, {n} distilled), T = {T}, micro-batch {args.micro_batch}, one thread.",
        "",
        "| teacher | peak RSS growth MB | teacher kept for the update MB |",
        "|---|---|---|",
    ]
    for r in results:
        k = r["top_k"]
        kept = n * T * V * 4 if k is None else n * T * (k + 1) * 4 + n * T * k * 8
        name = "dense" if k is None else f"top-{k}"
        lines.append(f"| {name} | {r['peak_growth_mb']:.0f} | {kept / 2**20:.1f} |")
    lines += ["", "Command: `python benchmarks/hsd_memory.py " + " ".join(sys.argv[1:]) + "`"]
    text = "\n".join(lines) + "\n"
    print(text)
    (REPO / "benchmarks" / "results").mkdir(exist_ok=True)
    (REPO / "benchmarks" / "results" / "hsd_memory.md").write_text(text)


if __name__ == "__main__":
    main()
