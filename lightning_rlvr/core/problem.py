"""A problem and a verifier's verdict: what every layer above passes around.

Layer: ``core`` (imports nothing of the package). Tasks make ``Problem`` s and return ``Verdict`` s;
the rollout batch carries them; credit methods and metrics read ``Verdict.correct``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "val", "test")


def split_of(key: str, test_fraction: float) -> str:
    """``test``, ``val`` or ``train`` for ``key`` by a stable hash: a fixed share each for test and val.

    Procedural tasks assign every item to a split by its content, so splits are
    disjoint by construction and never change under a fixed seed (put it in ``key``).
    """
    h = hashlib.blake2b(key.encode(), digest_size=8).digest()
    u = int.from_bytes(h, "little") / 2**64
    if u < test_fraction:
        return "test"
    if u < 2 * test_fraction:
        return "val"
    return "train"


@dataclass
class Problem:
    """One prompt with its reference answer and, when the task has one, a worked solution."""

    prompt: str
    answer: str
    solution: str | None = None  # a completion that earns reward 1 (for the warm start)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    """A verifier's output: a reward, a short feedback message (used by hindsight methods) and correctness.

    ``correct`` is the one definition of success every component reads (peer choice, routing,
    accuracy, pass@k). It defaults to ``reward > 0.5``; a task with partial credit sets it itself.
    Reward shaping (e.g. an overlong penalty) changes the reward, never ``correct``.
    """

    reward: float
    feedback: str = ""
    correct: bool | None = None  # None: decided from the reward

    def __post_init__(self) -> None:
        if self.correct is None:
            self.correct = float(self.reward) > 0.5
