"""On a CUDA GPU: do FastEngine and generate sample the same tokens, and how fast is each (the default).

FastEngine is the default engine wherever it can read the policy (``engines/choose.py``), on the promise that
it samples what ``generate`` samples: under today's random stream (``match_hf_rng``) and under keyed sampling
(``model.sampling_key: keyed``). The CPU tests check that promise; this checks it on a GPU, on random-weight
Llama models of two sizes (a small one and one shaped like SmolLM2-135M: no weights need to travel), and
times the two engines round-robin in one process, so their ratio is measured side by side.

    python benchmarks/gpu_engines.py --out benchmarks/results/gpu_engines.md      # needs a CUDA GPU
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.fast import FastEngine
from lightning_rlvr.engines.hf import HFGenerateEngine

SHAPES = {  # name -> LlamaConfig arguments
    "small (2 x 128, vocab 1k)": dict(
        hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, vocab_size=1024
    ),
    "SmolLM2-135M-shaped (30 x 576, vocab 49k)": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        rope_theta=100000.0,
        tie_word_embeddings=True,
    ),
}
PAD, EOS = 0, 2


def contexts(vocab: int, prompts: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded random prompts of 12-40 tokens: ids [B, P] and mask [B, P]."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(12, 41, (prompts,), generator=g)
    width = int(lengths.max())
    ids = torch.full((prompts, width), PAD, dtype=torch.long)
    mask = torch.zeros(prompts, width, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        ids[i, width - n :] = torch.randint(3, vocab, (n,), generator=g)
        mask[i, width - n :] = 1
    return ids.to(device), mask.to(device)


def sample(engine, model, ids, mask, n: int, sampling: Sampling, keys: list[int] | None) -> torch.Tensor:
    torch.manual_seed(1234)  # the stream both engines start from (keyed rows ignore it)
    out = engine.generate(model, ids, mask, n, sampling, PAD, EOS, keys=keys)
    if ids.is_cuda:
        torch.cuda.synchronize()
    return out.completion_ids


def same_rows(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of rows whose completions are identical (padded to one width)."""
    width = max(a.shape[1], b.shape[1])
    a = torch.nn.functional.pad(a, (0, width - a.shape[1]), value=PAD)
    b = torch.nn.functional.pad(b, (0, width - b.shape[1]), value=PAD)
    return float((a == b).all(dim=1).float().mean())


def check(name: str, shape: dict, prompts: int, n: int, tokens: int, rounds: int, device: str) -> list[str]:
    device = torch.device(device)
    torch.manual_seed(0)
    config = LlamaConfig(max_position_embeddings=256, pad_token_id=PAD, eos_token_id=EOS, **shape)
    model = LlamaForCausalLM(config).to(device).eval()
    ids, mask = contexts(config.vocab_size, prompts, device)
    sampling = Sampling(max_new_tokens=tokens, temperature=1.0)
    keys = list(range(1000, 1000 + prompts * n))
    engines = {"generate": HFGenerateEngine(), "FastEngine": FastEngine()}
    rows = []
    for label, row_keys in (("stream", None), ("keyed", keys)):
        got, seconds = {}, {e: [] for e in engines}
        for _ in range(rounds):  # round-robin: both engines see the same machine state
            for e, engine in engines.items():
                t0 = time.perf_counter()
                got[e] = sample(engine, model, ids, mask, n, sampling, row_keys)
                seconds[e].append(time.perf_counter() - t0)
        hf_s, fast_s = (statistics.median(seconds[e][1:] or seconds[e]) for e in engines)
        same = same_rows(got["generate"], got["FastEngine"])
        rows.append(
            f"| {name} | {label} | {prompts} x {n} x {tokens} | {same:.2f} "
            f"| {hf_s:.3f} | {fast_s:.3f} | {hf_s / fast_s:.2f}x |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--device", default="cuda", help="cpu runs the same check on the CPU")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_engines.py: no CUDA GPU here (--device cpu runs the check on the CPU)")
    where = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    lines = [
        "# FastEngine against generate on a CUDA GPU",
        "",
        f"`python benchmarks/gpu_engines.py --out {args.out}` on {where} "
        f"(torch {torch.__version__}), random-weight Llama models, float32, temperature 1. "
        "'identical rows' is the share of completions both engines sample token for token from the same "
        "seed; seconds are medians of rounds 2-{r} of {r}, the engines interleaved.".format(r=args.rounds),
        "",
        "| model | sampling | prompts x samples x tokens | identical rows | generate s | FastEngine s "
        "| speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, shape in SHAPES.items():
        lines += check(name, shape, args.prompts, args.n, args.tokens, args.rounds, args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
