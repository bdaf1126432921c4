"""One engine call's KV cache, kept for the next call, whose contexts may extend its rows.

A multi-turn episode's next context is its last context, the action just sampled and the
environment's reply. A call that prefills it from scratch recomputes every key and value of the
interaction so far, each turn (quadratic in the number of turns). ``keep`` remembers, after a
call, each row's cache columns: its context and the sampled tokens that were fed back through the
model. ``reuse`` copies, before the next call's prefill, the columns of the longest kept row that
a new context extends into that context's cache rows, so only the rest runs.

Exact up to float rounding: a key's rotation depends only on its position in the sequence, and
positions count a row's real tokens (left padding skipped) in both calls, so a kept column is the
column a full prefill would compute. The cache is reused only while the weights are those it was
computed with (compared exactly, so an update by any path, an optimiser step, a warm start's SFT
step or a checkpoint load, drops it) and only by the call right after the one that kept it.

Layout (``FastEngine``): a cache is a list, one ``(K, V)`` pair a layer, each ``[rows, Hkv, S, D]``;
a context of length L sits left-padded in columns ``P - L .. P - 1`` and sampled token t in
column ``P + t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

Cache = list[tuple[Tensor, Tensor]]


@dataclass
class KeptCache:
    """The previous call's KV cache, by row."""

    weights: list[Tensor]  # a copy of the weights it was computed with
    rows: dict[tuple[int, ...], list[tuple[Cache, int, int, Tensor]]]  # context -> (cache, row, column, fed)
    lengths: list[int]  # the distinct context lengths, longest first


def _equal(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


def _left_packed(mask: Tensor) -> Tensor:
    """[B] bool: the row's real tokens are its last ``length`` columns (left padding, no gaps)."""
    return mask[:, -1].bool() & (mask.sum(-1) == mask.shape[1] - mask.int().argmax(-1))


def keep(
    weights: list[Tensor],
    ids: Tensor,
    mask: Tensor,
    n: int,
    out: Tensor,
    last: int,
    eos: int,
    home: list[tuple[Cache, int]],
) -> KeptCache:
    """What a call leaves for the next: every row's context and the sampled tokens fed back.

    Args:
        weights: the weights the call ran with (copied here).
        ids, mask: the call's left-padded contexts [B, P]; row r continued context r // n.
        out: the sampled tokens [N, t + 1]; ``last`` = t, the last step, whose token was never fed.
        eos: a row's tokens from its EOS on were not fed while it was live.
        home: ``(cache, row)`` where row r's cache columns ended up (rows leave the batch as they
            finish, so not every row is in the final cache).
    """
    P = ids.shape[1]
    lengths = mask.sum(-1).tolist()  # [B]
    packed = _left_packed(mask).tolist()  # contexts whose real tokens are the last `length` columns
    is_eos = out == eos
    first_eos = torch.where(is_eos.any(-1), is_eos.int().argmax(-1), out.shape[1])  # [N]
    fed = first_eos.clamp(max=last).tolist()  # sampled tokens of row r with keys in its cache
    rows: dict[tuple[int, ...], list] = {}
    for r, (cache, j) in enumerate(home):
        b = r // n
        if not packed[b]:
            continue
        context = tuple(ids[b, P - lengths[b] :].tolist())
        rows.setdefault(context, []).append((cache, j, P - lengths[b], out[r, : fed[r]]))
    return KeptCache([t.clone() for t in weights], rows, sorted({len(c) for c in rows}, reverse=True))


def reuse(kept: KeptCache | None, weights: list[Tensor], ids: Tensor, mask: Tensor, cache: Cache) -> int:
    """Copy into ``cache`` (the new call's, [B, Hkv, P + T, D] a layer) the kept columns of every
    context that extends a kept row: its longest kept context, then the fed tokens it repeats.

    Returns how many columns at the end the prefill must still run: the most any context has left
    (P when nothing is reused; at least 1, as a context's last token gives the first logits).
    """
    P = ids.shape[1]
    if kept is None or not all(_equal(a, b) for a, b in zip(weights, kept.weights)):
        return P  # nothing kept, or kept under other weights
    run = 0
    packed, first = _left_packed(mask).tolist(), mask.int().argmax(-1).tolist()
    for b, length in enumerate(mask.sum(-1).tolist()):
        if not packed[b]:  # a gap inside the context: it runs from its first real token, nothing reused
            run = max(run, P - first[b])
            continue
        tokens = ids[b, P - length :]
        best, src = 0, None
        for size in (s for s in kept.lengths if s < length):
            for entry in kept.rows.get(tuple(tokens[:size].tolist()), ()):
                fed = entry[3][: length - 1 - size]  # leave the context's last token to run
                same = fed == tokens[size : size + len(fed)]
                agree = int(same.int().cumprod(0).sum()) if len(same) else 0  # fed tokens it repeats
                if size + agree > best:
                    best, src = size + agree, entry
            if src is not None:
                break  # the longest kept context this one extends
        if src is not None:
            old, j, col, _ = src
            start = P - length
            for (k, v), (k_old, v_old) in zip(cache, old):
                k[b, :, start : start + best] = k_old[j, :, col : col + best]
                v[b, :, start : start + best] = v_old[j, :, col : col + best]
        run = max(run, length - best)
    return max(run, 1)
