"""Scoring many short continuations of a few shared prefixes: each prefix runs once.

Credit methods score the same text under many contexts that share a long head:
SC-GRPO's and HSD's teacher context (the prompt, a peer's whole solution, the
prompt again) is the same for every row of a group that drew the same peer, and
RREDCoT asks for the answer's probability after every cut ``b`` of one chain,
``[prompt; o_{<b}; cue; answer]``, whose heads are prefixes of ``[prompt; o]``.
Run naively, every view pays for its head again.

Here an *item* is ``(prefix p, keep k, suffix s)``: the model on
``[prefixes[p][:k]; s]``, and we want the logits that predict each token of ``s``.
Per micro-batch the distinct prefixes run once with their KV cache kept; the
cache is copied to the items that use it, and only the suffixes run, attending
to their prefix's first ``k`` tokens (the attention mask hides the rest, so a
cut anywhere inside a prefix costs nothing extra). To get the prediction of the
first suffix token without keeping the prefix's logits, the item re-feeds the
prefix's last kept token in front of its suffix (the cached copy of that token
is masked out). Identical items (same prefix, keep and suffix) run once.

Exact up to float rounding: a causal model's state at a position depends only on
the tokens before it, so cutting the cache at ``k`` and continuing gives what the
whole sequence gives. Needs a model that takes ``past_key_values`` (a Hugging
Face causal LM, ``supports_prefix_cache``); ``Scorer`` falls back to whole
sequences otherwise, and under several ranks (whose forwards must stay in lockstep).

The cache handling (``run_prefixes``: prefixes once with their cache;
``continue_prefixes``: the cache copied to the rows that use it, and their
tokens run after it) is shared with the update's shared-prompt forward
(``packing.py``), which runs it with gradients: the copy is an ``index_select``
on the batch dimension, so the gradient of every copy flows back to its prefix.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor

from ..core.tensors import position_ids

Item = tuple[int, int, Tensor]  # (prefix index, tokens of it kept (>= 1), suffix ids [S])


def supports_prefix_cache(model) -> bool:
    """Whether ``model`` continues from a KV cache (generation-capable Hugging Face models do)."""
    return callable(getattr(model, "prepare_inputs_for_generation", None))


def _forward_params(model) -> set[str]:
    """The keywords ``model``'s forward names; a ``peft`` wrapper (``**kwargs`` only) is looked through."""
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    try:
        return set(inspect.signature(getattr(base, "forward", base)).parameters)
    except (TypeError, ValueError):
        return set()


def _cache_arg(model) -> str:
    """The keyword a model takes its KV cache by (``cache`` since transformers 5.x, else the old name)."""
    return "cache" if "cache" in _forward_params(model) else "past_key_values"


def keeps_logits(model) -> bool:
    """Whether ``model`` computes logits at only some positions on request (``logits_to_keep``, HF)."""
    return "logits_to_keep" in _forward_params(model)


def run_prefixes(model, ids: Tensor, mask: Tensor, **kwargs) -> tuple[Any, Any]:
    """The model on left-padded prefixes ids/mask [d, L] (positions skip the padding), its KV cache kept.

    Returns the model's output and the cache. ``kwargs`` go to the model (``output_hidden_states``,
    ``logits_to_keep``).
    """
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True, **kwargs)
    return out, (out.cache if getattr(out, "cache", None) is not None else out.past_key_values)


def continue_prefixes(model, cache, owner: Tensor, ids: Tensor, attention: Tensor, positions: Tensor, **kw):
    """The model on ``ids`` [n, S], row j after prefix ``owner[j]`` of ``cache`` (from ``run_prefixes``).

    The cache is copied to the rows in place (an ``index_select`` on the batch dimension:
    differentiable, so each copy's gradient reaches its prefix). ``attention`` [n, L + S] covers
    the cached columns and the new ones; ``positions`` [n, S] are the new tokens' positions;
    ``kw`` go to the model.
    """
    cache.reorder_cache(owner)  # one copy of the prefix cache per row
    return model(
        input_ids=ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        **{_cache_arg(model): cache},
        **kw,
    )


def _key(item: Item) -> tuple:
    p, k, s = item
    return (p, k, tuple(s.tolist()))


def suffix_logits(model, prefixes: list[Tensor], items: list[Item], pad_id: int) -> tuple[Tensor, int]:
    """Logits [n, S, V] predicting each item's suffix tokens (right-padded to the longest, S), in one
    micro-batch: one forward over the distinct prefixes the items use, one over their distinct suffixes.

    Row j of item i predicts ``suffix_i[j]`` given ``prefixes[p_i][:k_i] + suffix_i[:j]``.
    Returns the logits and the number of tokens run through the model (padding excluded).
    """
    device = prefixes[0].device if prefixes else items[0][2].device
    uniq: dict[tuple, int] = {}
    where = [uniq.setdefault(_key(it), len(uniq)) for it in items]  # item -> distinct item
    distinct = [None] * len(uniq)
    for it, u in zip(items, where):
        distinct[u] = it
    used = sorted({p for p, _, _ in distinct})
    slot = {p: j for j, p in enumerate(used)}

    # the distinct prefixes, left-padded, with their cache
    seqs = [prefixes[p] for p in used]
    Lp = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), Lp), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(seqs), Lp), dtype=torch.long, device=device)
    for j, s in enumerate(seqs):
        ids[j, Lp - len(s) :], mask[j, Lp - len(s) :] = s, 1
    _, cache = run_prefixes(model, ids, mask)
    tokens = int(mask.sum())

    # the distinct suffixes, each behind its prefix's last kept token, right-padded (no per-item ops)
    owner = torch.tensor([slot[p] for p, _, _ in distinct], device=device)  # [n]
    keep = torch.tensor([k for _, k, _ in distinct], device=device)  # [n]
    lengths = torch.tensor([len(prefixes[p]) for p, _, _ in distinct], device=device)  # [n]
    s_len = torch.tensor([len(s) for _, _, s in distinct], device=device)  # [n]
    body = torch.nn.utils.rnn.pad_sequence(
        [s for _, _, s in distinct], batch_first=True, padding_value=pad_id
    )
    refed = ids[owner, Lp - lengths + keep - 1]  # [n] the prefix's last kept token, re-fed
    sfx = torch.cat([refed[:, None], body.to(device=device, dtype=torch.long)], dim=1)  # [n, S + 1]
    S = sfx.shape[1] - 1
    sfx_mask = (torch.arange(S + 1, device=device)[None] <= s_len[:, None]).long()  # [n, S + 1]
    col = torch.arange(Lp, device=device)[None]  # prefix token t of item j sits at column Lp - len_j + t
    start = (Lp - lengths)[:, None]
    head = (col >= start) & (col < start + keep[:, None] - 1)  # [n, Lp] the kept prefix, last token re-fed
    attention = torch.cat([head.long(), sfx_mask], dim=1)  # [n, Lp + S + 1]
    pos = (keep - 1)[:, None] + torch.arange(S + 1, device=device)[None]  # [n, S + 1]
    logits = continue_prefixes(model, cache, owner, sfx, attention, pos).logits[:, :S]  # [n, S, V]: token j
    tokens += int(sfx_mask.sum())
    return logits[torch.tensor(where, device=device)], tokens
