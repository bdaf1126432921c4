"""A distillation term towards fixed teacher distributions: the ``Credit.token_loss`` of HSD and OPSD.

The teacher's next-token distributions are computed once at rollout time (no gradient); in
each update the student's current logits are compared with them token by token. The teacher
is dense, log-probs [N, T, V], or sparse, a ``TopK`` (its k most likely tokens plus the
rest's mass): then the student is bucketed the same way (its log-probs of the same k tokens
and of the rest), and the divergence runs over those k + 1 buckets.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.rollout import Rollout
from ..scoring.logprobs import TopK, bucket_logprobs
from .base import TokenLoss

LOG_ZERO = -1.0e4  # stands for log 0 in bucket log-probs: exp() is exactly 0, and no inf - inf


def teacher_token_loss(
    rollout: Rollout, rows: list[int], teacher: Tensor | TopK, per_token: Callable[[Tensor, Tensor], Tensor]
) -> TokenLoss:
    """A ``Credit.token_loss`` distilling rows ``rows`` towards fixed teacher distributions.

    ``teacher``: log-probs [N, T, V], or a ``TopK`` at [N, T, k]. ``per_token(student, teacher)``
    ([h, T, V] or [h, T, k + 1] log-probs, x2 -> [h, T]) is the weighted divergence. The closure
    keeps only the distilled rows' distributions; positions beyond a row's completion get a
    placeholder (uniform when dense, all mass in the tail when sparse), so the divergence stays
    finite where the completion mask zeroes it. It returns [m, T], 0 for rows without the term.
    """
    sparse = isinstance(teacher, TopK)
    device = teacher.logp.device if sparse else teacher.device
    N, T = rollout.completion_ids.shape
    index = torch.as_tensor(rows, dtype=torch.long, device=device)
    beyond = torch.arange(T, device=device)[None] >= rollout.lengths.to(device)[index][:, None]  # [n, T]
    if sparse:  # [n, T, k + 1] bucket log-probs and [n, T, k] their token ids
        store = teacher.buckets()[index].clamp(min=LOG_ZERO)
        ids = teacher.ids[index]
        store[beyond] = torch.cat([torch.full_like(store[0, 0, :-1], LOG_ZERO), store.new_zeros(1)])
    else:
        store = teacher[index]  # [n, T, V]: advanced indexing copies, so the placeholder below is safe
        store[beyond] = -math.log(store.shape[-1])
    slot = torch.full((N,), -1, dtype=torch.long, device=device)  # row -> its place in store, or -1
    slot[index] = torch.arange(len(rows), device=device)
    completion_mask = rollout.completion_mask

    def token_loss(logits: Tensor, batch: Tensor) -> Tensor:
        out = torch.zeros(logits.shape[:2], device=logits.device)  # [m, T]
        where = slot[batch.to(slot.device)]  # [m]
        has = (where >= 0).to(logits.device)
        if not bool(has.any()):
            return out
        k = where[where >= 0]
        if sparse:
            student = bucket_logprobs(logits[has], ids[k].to(logits.device)).clamp(min=LOG_ZERO)
        else:
            student = F.log_softmax(logits[has].float(), dim=-1)  # [h, T, V] with grad
        m = completion_mask[batch[has].to(completion_mask.device)].to(student.device).float()
        out[has] = per_token(student, store[k].to(student.device)) * m
        return out

    return token_loss
