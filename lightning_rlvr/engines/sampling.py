"""Sampling maths shared by decode loops: ``generate``'s logits processing and its random numbers.

Layer: engines (imports only torch and ``engines.base``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Sampling


def process_logits(logits: Tensor, sampling: Sampling) -> Tensor:
    """Temperature, top-k, top-p, in ``generate``'s order and with its tie rules: [n, V]."""
    z = logits / sampling.temperature if sampling.temperature != 1.0 else logits
    if sampling.top_k > 0:
        k = min(sampling.top_k, z.shape[-1])
        z = z.masked_fill(z < torch.topk(z, k).values[..., -1:], float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(z, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - sampling.top_p
        drop[..., -1:] = False  # always keep the most likely token
        z = z.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return z


_UNIFORM_IS_EXPONENTIAL: bool | None = None  # whether this torch's CPU exponential_ is -log1p(-uniform fp64)


def _uniform_is_exponential() -> bool:
    """Checked once per process on a fixed seed (the global RNG is restored): torch's CPU ``exponential_``
    draws one fp64 uniform u per element and returns -log1p(-u); if this build does otherwise, say so."""
    global _UNIFORM_IS_EXPONENTIAL
    if _UNIFORM_IS_EXPONENTIAL is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(12345)
            want = torch.empty(4099).exponential_(1)
            torch.manual_seed(12345)
            got = torch.empty(4099, dtype=torch.float64).uniform_().neg_().log1p_().neg_().float()
        _UNIFORM_IS_EXPONENTIAL = torch.equal(want, got)
    return _UNIFORM_IS_EXPONENTIAL


def exponential(shape: tuple[int, ...], device: torch.device) -> Tensor:
    """``torch.empty(shape).exponential_(1)``, the same numbers from the same RNG state, faster on CPU.

    ``torch.multinomial(p, 1)`` (what ``generate`` samples with) is ``argmax(p / E)`` with E ~ Exp(1)
    for the whole [N, V] batch; at V = 49k that draw was 14% of a SmolLM2 rollout. CPU torch computes
    each E as -log1p(-u) of an fp64 uniform, elementwise and unvectorised; drawing the uniforms in one
    call and transforming them in place gives the same bits (checked once: ``_uniform_is_exponential``)
    in about a third of the time. Other devices, or a build that draws differently, use ``exponential_``.
    """
    if torch.device(device).type == "cpu" and _uniform_is_exponential():
        return torch.empty(shape, dtype=torch.float64).uniform_().neg_().log1p_().neg_().float()
    return torch.empty(shape, device=device).exponential_(1)
