"""Tensor helpers shared by sampling, scoring and training: padding, masks, positions.

Layer: ``core``. One left-pad for the whole package (prompts, teacher contexts, episode contexts).
"""

from __future__ import annotations

import torch
from torch import Tensor


def left_pad(seqs: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Stack 1-D id tensors, padding on the left: ids [n, L], mask [n, L]."""
    length = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long, device=seqs[0].device)
    mask = torch.zeros((len(seqs), length), dtype=torch.long, device=seqs[0].device)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, length - len(s) :] = s
            mask[i, length - len(s) :] = 1
    return ids, mask


def completion_mask_from_ids(completion_ids: Tensor, eos_id: int) -> Tensor:
    """[N, T] mask: 1 up to and including the first EOS (all ones when there is none)."""
    is_eos = completion_ids == eos_id  # [N, T]
    after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after_eos).long()


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions that skip left padding, as ``generate`` uses them: [N, L]."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)
