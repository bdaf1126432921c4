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

**Shared prompts** (``share=True``, the update's forwards: ``RLVRModule(share_prompts=...)``).
The G rows of a group repeat one prompt; run per row, the update pays for it G
times (quickstart: a 10-token prompt before ~36 completion tokens, G = 8: ~19%
of the update's tokens). With sharing, rows with identical prompt tokens are
kept next to each other (groups longest first, each group's rows longest
first), a micro-batch's size counts each distinct prompt once
(``d x p_m + m x T_m`` tokens), and ``forward`` runs a micro-batch in two
forwards: its d distinct prompts (with gradients, the LM head only at the last
position), then the rows' completions after a copy of their prompt's KV cache
(``prefix_scoring.continue_prefixes``: an ``index_select``, so each copy's
gradient flows back to its prompt). The logits predicting completion token 0
are the prompt forward's last; the rest come from the completion forward, which
skips each row's last token (its logit predicts nothing). A causal model's state
at a position depends only on the tokens before it, so logits, hidden states and
gradients are the unshared path's up to float rounding. Where it cannot apply
the unshared path runs, decided here (``shares_prompts``; a micro-batch where no
prompt has two rows, or with an empty prompt, runs unshared): a model with no KV
cache (``supports_prefix_cache``), gradient checkpointing (Hugging Face drops
the cache under it), or several ranks, where every rank must make the same
forward calls (FSDP collectives) and a shared micro-batch makes two.

Both paths compute the LM head only where a logit is used when the model takes
``logits_to_keep`` (Hugging Face causal LMs): never at prompt positions but the
last. At V = 24 that is free; at V = 150k the head over the prompt tokens is a
large part of a forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.distributed import max_over_ranks, world_size
from ..core.rollout import Rollout
from ..core.tensors import position_ids
from .prefix_scoring import continue_prefixes, keeps_logits, run_prefixes, supports_prefix_cache


def causal_lm_forward(model, input_ids: Tensor, attention_mask: Tensor, hidden: bool = False, **kwargs):
    """The model on a left-padded batch, with positions that skip the padding (as in ``generate``)."""
    return model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask),
        output_hidden_states=hidden,
        use_cache=False,
        **kwargs,
    )


def shares_prompts(model, enabled: bool = True) -> bool:
    """Whether ``forward`` may run each distinct prompt of a micro-batch once (module docstring).

    ``enabled`` is the user's switch (``RLVRModule(share_prompts=...)``); the rest is what the
    shared path needs: a KV-cache model, no gradient checkpointing, one rank.
    """
    new = "is_activation_checkpointing"  # transformers 5; ``is_gradient_checkpointing`` before
    checkpointing = getattr(model, new if hasattr(model, new) else "is_gradient_checkpointing", False) is True
    return enabled and world_size() == 1 and supports_prefix_cache(model) and not checkpointing


@dataclass
class MicroBatch:
    """Rows of a rollout run together, and the columns they keep."""

    index: Tensor  # [m] positions of the rows in the ``rows`` the batches were cut from
    rows: Tensor  # [m] rollout rows
    prompt: int  # p_m, longest prompt (>= 1): columns [P - p_m, P) of the prompt are kept
    width: int  # T_m, longest completion: completion columns [0, T_m) are kept
    heads: Tensor | None = None  # [d] one rollout row per distinct prompt, when the prompts run once
    owner: Tensor | None = None  # [m] each row's prompt among ``heads`` (None: every row runs its own)


def micro_batches(
    rollout: Rollout, rows: Tensor, max_rows: int, max_tokens: int | None = None, share: bool = False
) -> list[MicroBatch]:
    """Cut ``rows`` [n] of ``rollout`` into length-sorted micro-batches (same count on every rank).

    Greedy over the rows sorted longest first: a micro-batch takes the next row while it
    has fewer than ``max_rows`` rows and, with ``max_tokens`` set, its padded size
    (rows x (p_m + T_m)) stays within ``max_tokens``; a row is never split, so one row
    longer than the budget is a micro-batch of its own.

    With ``share`` (``shares_prompts``), rows with the same prompt tokens come one after
    another (their groups longest first, each group's rows longest first, so padding stays
    low), a micro-batch's size counts each distinct prompt once (``d x p_m + m x T_m``), and
    a micro-batch where some prompt has 2+ rows gets ``heads``/``owner``: ``forward`` runs
    each of its prompts once. A group may still be split by the budget; each part shares.
    """
    rows = rows.to(rollout.prompt_mask.device)
    p_len = rollout.prompt_mask[rows].sum(-1).tolist()  # [n]
    c_len = rollout.completion_mask[rows].sum(-1).tolist()  # [n]
    if share:  # identical prompts: identical left-padded rows of the [N, P] layout
        ids = rollout.prompt_ids[rows].where(rollout.prompt_mask[rows].bool(), -1)  # [n, P]
        keys: list = [tuple(k) for k in ids.tolist()]
        same: dict[tuple, list[int]] = {}
        for j, k in enumerate(keys):
            same.setdefault(k, []).append(j)
        sets = [sorted(js, key=lambda j: -c_len[j]) for js in same.values()]
        sets.sort(key=lambda js: -(p_len[js[0]] + c_len[js[0]]))  # stable: ties keep order
        order = [j for js in sets for j in js]
    else:
        keys = list(range(len(p_len)))  # every row its own prompt
        order = sorted(range(len(p_len)), key=lambda j: -(p_len[j] + c_len[j]))  # stable: ties keep order
    groups: list[list[int]] = []
    p_max = c_max = 0
    prompts: set = set()
    for j in order:
        p, c = max(p_max, p_len[j], 1), max(c_max, c_len[j])
        d = len(prompts) + (keys[j] not in prompts)  # distinct prompts with row j in (unshared: rows)
        fits = (
            groups
            and len(groups[-1]) < max_rows
            and (max_tokens is None or d * p + (len(groups[-1]) + 1) * c <= max_tokens)
        )
        if fits:
            groups[-1].append(j)
            p_max, c_max = p, c
            prompts.add(keys[j])
        else:
            groups.append([j])
            p_max, c_max = max(p_len[j], 1), c_len[j]
            prompts = {keys[j]}
    out = []
    for g in groups:
        index = torch.tensor(g, dtype=torch.long, device=rows.device)
        mb = MicroBatch(index, rows[index], max(1, max(p_len[j] for j in g)), max(c_len[j] for j in g))
        first: dict = {}  # prompt -> its first row here, in order of appearance
        for j in g:
            first.setdefault(keys[j], j)
        if share and len(first) < len(g) and mb.width and min(p_len[j] for j in g):
            slot = {k: s for s, k in enumerate(first)}
            mb.heads = rows[torch.tensor(list(first.values()), dtype=torch.long, device=rows.device)]
            mb.owner = torch.tensor([slot[keys[j]] for j in g], dtype=torch.long, device=rows.device)
        out.append(mb)
    missing = max_over_ranks(len(out), rows.device) - len(out)
    empty = torch.zeros(0, dtype=torch.long, device=rows.device)
    return out + [MicroBatch(empty, empty, 1, 0) for _ in range(missing)]


def token_chunks(n: int, rows: int, tokens: int | None, widths: list[int] | None = None) -> list[Tensor]:
    """Consecutive index chunks of ``range(n)``: at most ``rows`` items and, when ``tokens`` and ``widths``
    are given, at most ``tokens`` padded tokens (items x the widest) each; never an empty chunk."""
    if tokens is None or widths is None:
        return list(torch.arange(n).split(rows))
    chunks, start, widest = [], 0, 0
    for i in range(n):
        w = max(widest, widths[i], 1)
        if i > start and ((i - start + 1) * w > tokens or i - start >= rows):
            chunks.append(torch.arange(start, i))
            start, w = i, max(widths[i], 1)
        widest = w
    if n:
        chunks.append(torch.arange(start, n))
    return chunks


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
    if mb.owner is not None:
        return _shared_forward(model, rollout, mb, hidden)
    ids = torch.cat(
        [rollout.prompt_ids[mb.rows, P - mb.prompt :], rollout.completion_ids[mb.rows, : mb.width]], 1
    )
    attn = torch.cat(
        [rollout.prompt_mask[mb.rows, P - mb.prompt :], rollout.completion_mask[mb.rows, : mb.width]], 1
    )  # [m, p_m + T_m]
    if mb.width and keeps_logits(model):  # the head only where a logit is used; the last token predicts none
        pos = position_ids(attn)[:, :-1]
        out = model(
            input_ids=ids[:, :-1],
            attention_mask=attn[:, :-1],
            position_ids=pos,
            output_hidden_states=hidden,
            use_cache=False,
            logits_to_keep=mb.width,
        )
        return out.logits, (out.hidden_states[-1][:, -mb.width :] if hidden else None)
    out = causal_lm_forward(model, ids, attn, hidden=hidden)
    cols = slice(mb.prompt - 1, mb.prompt - 1 + mb.width)  # the logit at column j predicts token j + 1
    return out.logits[:, cols], (out.hidden_states[-1][:, cols] if hidden else None)


def _shared_forward(model, rollout: Rollout, mb: MicroBatch, hidden: bool) -> tuple[Tensor, Tensor | None]:
    """``forward`` with each distinct prompt run once (module docstring): the prompts [d, p_m], then
    the completions [m, T_m - 1] after copies of their prompt's cache. Same outputs as ``forward``."""
    P = rollout.prompt_ids.shape[1]
    p_mask = rollout.prompt_mask[mb.heads, P - mb.prompt :]  # [d, p_m]
    keep = {"logits_to_keep": 1} if keeps_logits(model) else {}
    out, cache = run_prefixes(
        model, rollout.prompt_ids[mb.heads, P - mb.prompt :], p_mask, output_hidden_states=hidden, **keep
    )
    logits = out.logits[:, -1:][mb.owner]  # [m, 1, V] predicts completion token 0
    states = out.hidden_states[-1][:, -1:][mb.owner] if hidden else None  # [m, 1, H]
    if mb.width == 1:
        return logits, states
    c_mask = rollout.completion_mask[mb.rows, : mb.width - 1]  # [m, T_m - 1]
    attn = torch.cat([p_mask[mb.owner], c_mask], 1)  # [m, p_m + T_m - 1]
    rest = continue_prefixes(
        model,
        cache,
        mb.owner,
        rollout.completion_ids[mb.rows, : mb.width - 1],
        attn,
        position_ids(attn)[:, mb.prompt :],
        output_hidden_states=hidden,
    )
    logits = torch.cat([logits, rest.logits], 1)  # [m, T_m, V]
    return logits, (torch.cat([states, rest.hidden_states[-1]], 1) if hidden else None)


def place(dst: Tensor, mb: MicroBatch, src: Tensor) -> None:
    """Write ``src`` [m, T_m, ...] at rows ``mb.rows``, completion columns [0, T_m) of ``dst`` [N, T, ...]."""
    if len(mb.rows):
        dst[mb.rows, : mb.width] = src.to(dst.dtype)
