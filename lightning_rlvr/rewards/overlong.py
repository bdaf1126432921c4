"""DAPO's soft overlong penalty: a length-aware term added to the verifier's reward.

    penalty(|y|) = 0                                   if |y| <= L_max - L_cache
                 = ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
                 = -1                                  if |y| > L_max

It grows linearly from 0 to -1 over the last ``L_cache`` tokens before
``L_max``, so truncated chains are discouraged without the cliff of a hard
zero reward. ``|y|`` counts completion tokens (EOS included).

On a multi-turn episode ``|y|`` is the episode's longest action (``Rollout.action_lengths``) and
L_max the module's ``max_new_tokens``, the budget of one action: truncation happens per action,
so that is where the penalty means what DAPO meant. (The episode's total policy tokens against
``max_turns`` x the budget would instead punish long, valid interactions of short actions.)
"""

from __future__ import annotations

import torch
from torch import Tensor


class RewardShaper:
    """Maps verifier rewards [N] and completion lengths [N] to shaped rewards [N].

    ``lengths`` are what the budget bounds (``Rollout.action_lengths``): the completion's tokens,
    or an episode's longest action.

    ``max_new_tokens`` is the module's completion budget, passed at every call so a shaper
    that depends on it never holds a second copy of it.
    """

    def __call__(self, rewards: Tensor, lengths: Tensor, max_new_tokens: int | None = None) -> Tensor:
        raise NotImplementedError


class OverlongPenalty(RewardShaper):
    """DAPO's soft overlong punishment.

    Args:
        max_length: L_max, the length at which the penalty reaches -1
            (None = the module's ``max_new_tokens``, given at call time).
        cache: L_cache, the width of the linear ramp before ``max_length``.
    """

    def __init__(self, max_length: int | None = None, cache: int = 8) -> None:
        if max_length is not None:
            self._check(max_length, cache)
        elif cache <= 0:
            raise ValueError(f"need cache > 0, got cache={cache}")
        self.max_length = max_length
        self.cache = cache

    @staticmethod
    def _check(max_length: int, cache: int) -> None:
        if not 0 < cache <= max_length:
            raise ValueError(f"need 0 < cache <= max_length, got cache={cache}, max_length={max_length}")

    def penalty(self, lengths: Tensor, max_new_tokens: int | None = None) -> Tensor:
        """The penalty of each length: [N], in [-1, 0]."""
        max_length = self.max_length if self.max_length is not None else max_new_tokens
        if max_length is None:
            raise ValueError("OverlongPenalty needs max_length or the module's max_new_tokens")
        self._check(max_length, self.cache)
        length = lengths.float()
        start = max_length - self.cache
        ramp = (start - length) / self.cache
        out = torch.where(length <= start, torch.zeros_like(length), ramp)
        return torch.where(length > max_length, torch.full_like(length, -1.0), out)

    def __call__(self, rewards: Tensor, lengths: Tensor, max_new_tokens: int | None = None) -> Tensor:
        return rewards + self.penalty(lengths, max_new_tokens).to(rewards.device)
