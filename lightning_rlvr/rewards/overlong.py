"""DAPO's soft overlong penalty: a length-aware term added to the verifier's reward.

    penalty(|y|) = 0                                   if |y| <= L_max - L_cache
                 = ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
                 = -1                                  if |y| > L_max

It grows linearly from 0 to -1 over the last ``L_cache`` tokens before
``L_max``, so truncated chains are discouraged without the cliff of a hard
zero reward. ``|y|`` counts completion tokens (EOS included).
"""

from __future__ import annotations

import torch
from torch import Tensor


class RewardShaper:
    """Maps verifier rewards [N] and completion lengths [N] to shaped rewards [N]."""

    def __call__(self, rewards: Tensor, lengths: Tensor) -> Tensor:
        raise NotImplementedError


class OverlongPenalty(RewardShaper):
    """DAPO's soft overlong punishment.

    Args:
        max_length: L_max, the length at which the penalty reaches -1.
        cache: L_cache, the width of the linear ramp before ``max_length``.
    """

    def __init__(self, max_length: int = 48, cache: int = 8) -> None:
        if not 0 < cache <= max_length:
            raise ValueError(f"need 0 < cache <= max_length, got cache={cache}, max_length={max_length}")
        self.max_length = max_length
        self.cache = cache

    def penalty(self, lengths: Tensor) -> Tensor:
        """The penalty of each length: [N], in [-1, 0]."""
        length = lengths.float()
        start = self.max_length - self.cache
        ramp = (start - length) / self.cache
        out = torch.where(length <= start, torch.zeros_like(length), ramp)
        return torch.where(length > self.max_length, torch.full_like(length, -1.0), out)

    def __call__(self, rewards: Tensor, lengths: Tensor) -> Tensor:
        return rewards + self.penalty(lengths).to(rewards.device)
