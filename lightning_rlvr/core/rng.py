"""Random draws fixed by a key alone (bottom layer: imports nothing of the package).

``seeded(*key)`` runs a block on the global torch RNG seeded from ``key`` and restores the
outer state afterwards, so what the block draws depends on the key only, never on what ran
before it, and what runs after it never sees the block's draws.
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
