"""What an exact resume needs that Lightning does not checkpoint: the RNG streams, and what may go in hparams.

Every value stored here loads under ``torch.load(weights_only=True)`` (NumPy's
key array travels as a tensor), so checkpoints stay loadable without
unpickling arbitrary objects.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def checkpoint_safe(value: Any) -> bool:
    """True for values a checkpoint can hold under ``torch.load(weights_only=True)``."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return True
    if isinstance(value, (list, tuple)):
        return all(checkpoint_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and checkpoint_safe(v) for k, v in value.items())
    return False


def capture_rng() -> dict:
    """The torch (and CUDA), NumPy and Python RNG states, in checkpoint-safe types."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]],
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    """Undo ``capture_rng``: the next random draw continues the captured streams exactly."""
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy(), *rest))
    random.setstate(tuple(v if not isinstance(v, list) else tuple(v) for v in state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
