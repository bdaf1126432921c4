"""Random draws fixed by a key alone (bottom layer: imports nothing of the package).

``seeded(*key)`` runs a block on the global torch RNG seeded from ``key`` and restores the
outer state afterwards, so what the block draws depends on the key only, never on what ran
before it, and what runs after it never sees the block's draws.

``RowStreams(keys)`` gives each row of a batch its own generator seeded by its key, so a row's draws
depend on its key alone, never on the other rows, the batch size, or the global RNG (which it neither
reads nor moves): common random numbers for sampling (``model.sampling_key: keyed``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def key_seed(*key: object) -> int:
    """A stable 31-bit seed from ``key`` (CRC32 of its repr: the same across runs and processes)."""
    return zlib.crc32(repr(key).encode()) & 0x7FFFFFFF


@contextmanager
def seeded(*key: object) -> Iterator[None]:
    """Seed the global CPU (and CUDA) RNG from ``key`` for the block; restore the previous state after."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(key_seed(*key))
        yield


class RowStreams:
    """One random stream per row, each seeded by its own key: what a row draws depends on its key alone.

    ``exponential(rows, width)`` draws the next [len(rows), width] Exp(1) numbers, row ``j`` of the
    result from the stream of row ``rows[j]``, each stream advanced by its own draw only. So a row's
    t-th draw is the same whatever other rows there are, how many, in which order, or which of them
    are drawn alongside it. The numbers are ``exponential_``'s own: -log1p(-u) of fp64 uniforms, one
    generator call a row (the transform runs once for the batch, so at a large width this costs what
    one batched ``exponential_`` costs; at a small one, a few microseconds a row).

    Args:
        keys: one integer seed a row (``key_seed`` of what identifies the row).
        device: where the generators live (CPU and CUDA generators give different numbers).
    """

    def __init__(self, keys: list[int], device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.generators = [torch.Generator(self.device).manual_seed(int(k)) for k in keys]

    def __len__(self) -> int:
        return len(self.generators)

    def exponential(self, rows: list[int], width: int) -> torch.Tensor:
        """The next Exp(1) draws of ``rows`` (indices into ``keys``): [len(rows), width] float32."""
        u = torch.empty(len(rows), width, dtype=torch.float64, device=self.device)
        for j, r in enumerate(rows):
            u[j].uniform_(generator=self.generators[r])
        return u.neg_().log1p_().neg_().float()
