"""Model FLOPs of a step's generation and update, and this machine's matmul peak to set them against.

The count is the arithmetic the useful tokens need, the usual "model FLOPs"
(as in MFU): work done on padding, on rows that already finished, or twice
(recomputation) is not counted, so a faster implementation of the same step
shows up as more FLOP/s. With ``W`` the weights of every ``nn.Linear`` (the LM
head included, tied or not: it is a matmul per token; the input embedding is a
lookup and is left out), ``L`` layers and ``A`` = query heads x head dim:

* **generation**, per generated token (up to and including EOS) that sees ``c``
  keys: ``2 W + 4 L A c`` (a multiply-add per weight; ``QK^T`` and ``attn @ V``
  cost ``2 A c`` each per layer). The ``j``-th token (from 0) of a row with
  ``p`` prompt tokens is produced by a forward that sees ``c = p + j`` keys.
  Prompt prefill beyond that is not counted.
* **update**, per trained token (the row's real prompt and completion tokens,
  ``S`` of them, pads excluded) at causal position ``i = 1..S``:
  ``4 W + 2 W_t + 12 L A i`` (forward ``2 W + 4 L A i``; backward ``2 W`` for the
  input gradients, ``2 W_t`` for the weight gradients of the ``W_t`` trained weights,
  ``8 L A i`` for attention), once per optimiser pass over the batch
  (``ppo_epochs``). Fully trained, ``W_t = W``: the usual ``6 W``; with LoRA the
  frozen base needs no weight gradients and ``W_t`` is the adapters' few weights.
  That is ``update`` (what a plain forward over each row costs). The benchmarks
  count ``update_needed``: each group's shared prompt once, and the LM head only at
  the positions whose logit is trained (those predicting completion tokens), since
  repeating a prompt G times or computing unused logits is work done for nothing.

Norms, activations, softmax, rotary and the optimiser are left out (well under
1% here). The peak is the best ``torch.matmul`` rate on the model's own Linear
shapes with the step's row counts, on the thread count the benchmark runs with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class FlopModel:
    """What the FLOP count needs to know about a causal LM (see the module docstring)."""

    matmul_params: int  # W: weights of every Linear, LM head included
    trained_params: int  # W_t: those of them that train (all of W, or a LoRA's adapters)
    head_params: int = 0  # W_head: the LM head's weights (in W), needed only where a logit is used
    head_trained: bool = True  # whether the head's weights train (not under LoRA)
    layers: int = 0  # L
    attn_width: int = 0  # A: query heads x head dim
    shapes: tuple[tuple[int, int], ...] = ()  # distinct (in_features, out_features) of the model's Linears
    # (a LoRA's rank-r adapters are left out: the peak is the rate the model's own matmuls could reach)

    @classmethod
    def of(cls, model: torch.nn.Module) -> FlopModel:
        """Read W, L, A and the Linear shapes from a Hugging Face causal LM (LoRA-wrapped or not)."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        cfg = base.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        named = [(n, m) for n, m in base.named_modules() if isinstance(m, torch.nn.Linear)]
        linears = [m for _, m in named]
        model_shapes = {(m.in_features, m.out_features) for n, m in named if "lora_" not in n}  # not adapters
        head = base.get_output_embeddings()
        head = head if isinstance(head, torch.nn.Linear) else None
        return cls(
            matmul_params=sum(m.weight.numel() for m in linears),
            trained_params=sum(m.weight.numel() for m in linears if m.weight.requires_grad),
            head_params=head.weight.numel() if head is not None else 0,
            head_trained=head is None or head.weight.requires_grad,
            layers=cfg.num_hidden_layers,
            attn_width=cfg.num_attention_heads * head_dim,
            shapes=tuple(sorted(model_shapes)),
        )

    def generation(self, prompt_lens: Tensor, completion_lens: Tensor) -> float:
        """FLOPs to generate ``completion_lens[i]`` tokens after ``prompt_lens[i]`` prompt ones: [N], [N]."""
        p, n = prompt_lens.double(), completion_lens.double()
        keys = n * p + n * (n - 1) / 2  # sum over j < n of (p + j)
        return float((2 * self.matmul_params * n + 4 * self.layers * self.attn_width * keys).sum())

    def update_needed(
        self, prompt_lens: Tensor, completion_lens: Tensor, group: Tensor | None = None
    ) -> float:
        """FLOPs one forward + backward needs to train rows of ``prompt_lens[i]`` + ``completion_lens[i]``
        tokens, ``group[i]`` naming rows that share one prompt: [N] each.

        Work a step needs, not work an implementation may repeat: each distinct prompt once per group
        (a prompt's state does not depend on what follows it), and the LM head only at the positions
        whose logit is trained (those predicting completion tokens), where ``update`` counts every row's
        prompt and the head everywhere. An implementation that repeats the prompt or computes unused
        logits does more arithmetic than this and shows a lower share of the peak.
        """
        p, c = prompt_lens.double(), completion_lens.double()
        group = torch.arange(len(p)) if group is None else group
        first = torch.ones(len(p), dtype=torch.bool)
        first[1:] = group[1:] != group[:-1]  # rows of a group are consecutive (a rollout's layout)
        heads = first.double()  # the row that carries its group's prompt
        body = self.matmul_params - self.head_params
        body_w = 4 * body + 2 * (self.trained_params - (self.head_params if self.head_trained else 0))
        head_w = (6 if self.head_trained else 4) * self.head_params
        keys = heads * p * (p + 1) / 2 + c * p + c * (c + 1) / 2  # prompt once; completion j sees p + j keys
        tokens = heads * p + c
        return float((body_w * tokens + head_w * c + 12 * self.layers * self.attn_width * keys).sum())

    def update(self, seq_lens: Tensor) -> float:
        """FLOPs of one forward + backward over rows of ``seq_lens[i]`` real tokens: [N]."""
        s = seq_lens.double()
        keys = s * (s + 1) / 2  # sum over i = 1..S of i
        weights = 4 * self.matmul_params + 2 * self.trained_params
        return float((weights * s + 12 * self.layers * self.attn_width * keys).sum())


def completion_lengths(completion_ids: Tensor, eos_id: int) -> Tensor:
    """Tokens up to and including the first EOS (all of them when there is none): [N, T] -> [N]."""
    is_eos = completion_ids == eos_id
    after = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after).sum(-1)


class FlopMeter:
    """Counts one ``RLVRModule``'s generation and update FLOPs by wrapping its ``collect`` and ``update``.

    The wrappers are instance attributes set by the benchmark; the module's code
    is untouched. Generation counts the rollout each ``collect`` returns (the rows
    a step trains on: rows DAPO's dynamic sampling draws and drops are not
    counted), update everything that trains through ``module.update``.
    ``take()`` returns the totals since the last call and resets them.
    """

    def __init__(self, module, flops: FlopModel | None = None) -> None:
        self.flops = flops or FlopModel.of(module.model)
        self.gen = self.upd = 0.0
        self.gen_tokens = self.upd_tokens = 0
        collect, update = module.collect, module.update

        def counted_collect(*args, **kwargs):
            collected, stats = collect(*args, **kwargs)
            out = collected.rollout
            self.gen += self.flops.generation(out.prompt_mask.sum(-1), out.lengths)
            self.gen_tokens += int(out.lengths.sum())
            return collected, stats

        def counted_update(out, *args, **kwargs):
            p, c = out.prompt_mask.sum(-1), out.completion_mask.sum(-1)  # [N] each
            self.upd += self.flops.update_needed(p, c, out.group) * module.ppo_epochs
            self.upd_tokens += int((p + c).sum()) * module.ppo_epochs
            return update(out, *args, **kwargs)

        module.collect, module.update = counted_collect, counted_update

    def take(self) -> dict[str, float]:
        out = {
            "gen_flops": self.gen,
            "update_flops": self.upd,
            "gen_tokens": float(self.gen_tokens),
            "update_tokens": float(self.upd_tokens),
        }
        self.gen = self.upd = 0.0
        self.gen_tokens = self.upd_tokens = 0
        return out


def matmul_peak(
    shapes: tuple[tuple[int, int], ...], rows: int, device: str = "cpu", tries: int = 5, work: float = 2e8
) -> tuple[float, str]:
    """Best ``torch.matmul`` FLOP/s on ``[rows, in] @ [in, out]`` over ``shapes``: (FLOP/s, the shape).

    Each try repeats the product until about ``work`` FLOPs are done (a few ms at
    these sizes, so timer resolution does not matter); the best of ``tries`` tries
    over all shapes is the peak, the rate the machine reaches when nothing else gets
    in the way (a shared machine only ever makes a try slower).
    """
    best, where = 0.0, ""
    for in_f, out_f in shapes:
        x = torch.randn(rows, in_f, device=device)
        w = torch.randn(in_f, out_f, device=device)
        per = 2 * rows * in_f * out_f
        reps = max(1, int(work // per))
        torch.matmul(x, w)  # first-call set-up outside the timer
        for _ in range(tries):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(reps):
                torch.matmul(x, w)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            rate = per * reps / (time.perf_counter() - t)
            if rate > best:
                best, where = rate, f"[{rows}, {in_f}] x [{in_f}, {out_f}]"
    return best, where


def rate_line(label: str, rate: float, peak: float) -> str:
    """``"update: 61.00 GFLOP/s = 0.45 of matmul peak 135.0 GFLOP/s"`` (rates in FLOP/s)."""
    return f"{label}: {rate / 1e9:.2f} GFLOP/s = {rate / peak:.2f} of matmul peak {peak / 1e9:.1f} GFLOP/s"
