"""Padding-free passes over a rollout: rows of similar length in one micro-batch, each cut to its longest row.

A rollout is laid out ``[prompt left-padded to P | completion right-padded to T]``,
P and T set by the longest prompt and the longest completion of the whole batch.
Every pass of the policy over the rollout (the scorer's no-grad policy pass, the
reference's log-probs, the update's forward and backward) goes through
``micro_batches`` + ``forward`` here, so none of them pays for the padding:

* rows are sorted by their real length (prompt + completion tokens), longest
  first, and cut into micro-batches of at most ``max_rows`` rows (the memory
  bound) and, when ``max_tokens`` is set, at most ``max_tokens`` padded tokens
  (rows x the micro-batch's own width);
* each micro-batch keeps only the columns ``[P - p_m, P + T_m)``, with ``p_m``
  and ``T_m`` its own longest prompt and completion: dropped columns are
  left padding of every row in it (never attended to) or right padding after
  every row's end (never seen by a causal model at an earlier position), so
  with the positions of the padded layout (``position_ids(attention_mask)``,
  unchanged by dropping all-padding columns on the left) every kept logit is
  the padded layout's logit, up to float rounding;
* results come back as ``[m, T_m, ...]`` and callers place them at columns
  ``[0, T_m)`` of the ``[N, T]`` layout (``place``).

Why trimming and not true packing (several sequences concatenated in one row):
packing needs attention kept inside each sequence, i.e. variable-length kernels
(flash-attention ``cu_seqlens``) or a block-diagonal mask. CPU SDPA has no
variable-length kernel, and a dense [L, L] mask per packed row costs O(L^2)
memory and compute over the packed length, more than the padding it removes at
these lengths. Sorting and trimming works with every model and attention
implementation; the padding left is the length spread inside a micro-batch.

Why a token budget and not a row count: a budget bounds the padded tokens of one
forward, so long rows go in small micro-batches and short rows in big ones, and
``micro_batch_size`` (rows) stays the memory bound. On a CPU the budget is also a
speed setting: each forward has a fixed per-op cost (many tiny micro-batches are
slow), while one forward over all 128 quickstart rows is slow per token (its
activations fall out of cache). Measured on the quickstart rollout (128 rows,
prompt 10 + completion ~35 tokens, 7,424 padded / 5,810 real tokens), forward +
backward of the update: 0.66-0.80 s as one padded batch, 0.43-0.59 s with budgets
of 768-1,536 tokens, 0.56-0.82 s at 4,096; hence the default 1,024
(``RLVRModule(micro_batch_tokens=...)``). On a GPU, where a forward's cost barely
grows with its size until memory runs out, raise it to what memory allows.

Under several ranks every forward is a collective (FSDP), so the number of
micro-batches is made equal on all ranks: a rank with fewer gets empty ones
(``MicroBatch.rows`` of length 0), on which the caller runs an idle forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_rlvr.distributed import max_over_ranks
from lightning_rlvr.rollout import Rollout, position_ids


def causal_lm_forward(model, input_ids: Tensor, attention_mask: Tensor, hidden: bool = False):
    """The model on a left-padded batch, with positions that skip the padding (as in ``generate``)."""
    return model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask),
        output_hidden_states=hidden,
        use_cache=False,
    )


@dataclass
class MicroBatch:
    """Rows of a rollout run together, and the columns they keep."""

    index: Tensor  # [m] positions of the rows in the ``rows`` the batches were cut from
    rows: Tensor  # [m] rollout rows
    prompt: int  # p_m, longest prompt (>= 1): columns [P - p_m, P) of the prompt are kept
    width: int  # T_m, longest completion: completion columns [0, T_m) are kept


def micro_batches(
    rollout: Rollout, rows: Tensor, max_rows: int, max_tokens: int | None = None
) -> list[MicroBatch]:
    """Cut ``rows`` [n] of ``rollout`` into length-sorted micro-batches (same count on every rank).

    Greedy over the rows sorted longest first: a micro-batch takes the next row while it
    has fewer than ``max_rows`` rows and, with ``max_tokens`` set, its padded size
    (rows x (p_m + T_m)) stays within ``max_tokens``; a row is never split, so one row
    longer than the budget is a micro-batch of its own.
    """
    rows = rows.to(rollout.prompt_mask.device)
    p_len = rollout.prompt_mask[rows].sum(-1).tolist()  # [n]
    c_len = rollout.completion_mask[rows].sum(-1).tolist()  # [n]
    order = sorted(range(len(p_len)), key=lambda j: -(p_len[j] + c_len[j]))  # stable: ties keep order
    groups: list[list[int]] = []
    p_max = c_max = 0
    for j in order:
        p, c = max(p_max, p_len[j], 1), max(c_max, c_len[j])
        fits = (
            groups
            and len(groups[-1]) < max_rows
            and (max_tokens is None or (len(groups[-1]) + 1) * (p + c) <= max_tokens)
        )
        if fits:
            groups[-1].append(j)
            p_max, c_max = p, c
        else:
            groups.append([j])
            p_max, c_max = max(p_len[j], 1), c_len[j]
    out = []
    for g in groups:
        index = torch.tensor(g, dtype=torch.long, device=rows.device)
        prompt = max(1, max(p_len[j] for j in g))
        out.append(MicroBatch(index, rows[index], prompt, max(c_len[j] for j in g)))
    missing = max_over_ranks(len(out), rows.device) - len(out)
    empty = torch.zeros(0, dtype=torch.long, device=rows.device)
    return out + [MicroBatch(empty, empty, 1, 0) for _ in range(missing)]


def forward(model, rollout: Rollout, mb: MicroBatch, hidden: bool = False) -> tuple[Tensor, Tensor | None]:
    """The policy on micro-batch ``mb``: logits predicting its completion tokens [m, T_m, V]
    and, with ``hidden``, the last-layer states at those positions [m, T_m, H] (model dtype).

    Gradients flow when the caller allows them. An empty micro-batch runs one token (an idle
    forward: under FSDP every rank joins every forward) and returns [0, 0, V] logits.
    """
    P = rollout.prompt_ids.shape[1]
    if not len(mb.rows):
        ids = rollout.completion_ids[:1, :1]
        out = causal_lm_forward(model, ids, torch.ones_like(ids), hidden=hidden)
        h = out.hidden_states[-1][:0, :0] if hidden else None
        return out.logits[:0, :0], h
    ids = torch.cat(
        [rollout.prompt_ids[mb.rows, P - mb.prompt :], rollout.completion_ids[mb.rows, : mb.width]], 1
    )
    attn = torch.cat(
        [rollout.prompt_mask[mb.rows, P - mb.prompt :], rollout.completion_mask[mb.rows, : mb.width]], 1
    )  # [m, p_m + T_m]
    out = causal_lm_forward(model, ids, attn, hidden=hidden)
    cols = slice(mb.prompt - 1, mb.prompt - 1 + mb.width)  # the logit at column j predicts token j + 1
    return out.logits[:, cols], (out.hidden_states[-1][:, cols] if hidden else None)


def place(dst: Tensor, mb: MicroBatch, src: Tensor) -> None:
    """Write ``src`` [m, T_m, ...] at rows ``mb.rows``, completion columns [0, T_m) of ``dst`` [N, T, ...]."""
    if len(mb.rows):
        dst[mb.rows, : mb.width] = src.to(dst.dtype)
