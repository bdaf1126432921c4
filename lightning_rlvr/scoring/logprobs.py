"""Log-prob maths over next-token logits: per-token log-probs, entropies, sparse top-k distributions.

Layer: scoring (imports only torch). Pure functions of tensors, shared by the ``Scorer``
(``scoring/scorer.py``), ``compare`` (``scoring/compare.py``), the update (``update.py``) and the
credit methods that keep a teacher's top-k distribution (``credit/distill.py``, ``credit/hsd.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

DivergenceFn = Callable[[Tensor, Tensor], Tensor]


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log softmax(logits)[target] without materialising the full log-softmax: [..., T]."""
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@dataclass
class TopK:
    """A sparse next-token distribution: its k most likely tokens and the log of the remaining mass.

    Seen as a distribution over k + 1 buckets (the k tokens, then "everything else"), it is
    exact when k = V (the tail is empty: log 0 = -inf).
    """

    ids: Tensor  # [..., k] long, token ids in descending probability
    logp: Tensor  # [..., k] their log-probs
    tail: Tensor  # [...] log of 1 - sum(exp(logp)), computed without cancellation

    @staticmethod
    def of(logp: Tensor, k: int) -> TopK:
        """The top-k view of full log-probs [..., V]."""
        top, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
        rest = logp.scatter(-1, ids, float("-inf"))  # [..., V] the tokens outside the top k
        return TopK(ids=ids, logp=top, tail=torch.logsumexp(rest, dim=-1))

    def buckets(self) -> Tensor:
        """Log-probs over the k + 1 buckets: [..., k + 1]."""
        return torch.cat([self.logp, self.tail[..., None]], dim=-1)


def bucket_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    """Log-probs of ``softmax(logits)`` over the buckets of a ``TopK``'s ``ids``: [..., k + 1].

    The tokens ``ids`` [..., k], then the mass of every other token (a logsumexp over the
    vocabulary with ``ids`` masked out, so a tail near 0 keeps its precision). Gradients flow.
    """
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)  # [..., 1]
    top = logits.gather(-1, ids) - lse
    if ids.shape[-1] == logits.shape[-1]:  # k = V: the tail is empty (a constant, so no NaN gradient)
        return torch.cat([top, torch.full_like(lse, float("-inf"))], dim=-1)
    tail = torch.logsumexp(logits.scatter(-1, ids, float("-inf")), dim=-1, keepdim=True) - lse
    return torch.cat([top, tail], dim=-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy of softmax(logits): [..., T]. A -inf logit (a masked token) adds 0 log 0 = 0."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).where(logp > float("-inf"), 0.0).sum(-1)
