"""A tiny deterministic multi-turn environment for training tests (no game library, milliseconds per episode).

``EchoWords``: the game shows ``say <word>``; the right word moves on to the next one, anything else
is answered ``no: say <word>`` (an invalid action, counted) and costs the turn. Saying every word of
the problem's list wins (reward 1). Problems are fixed lists of 1-3 words from a 4-word vocabulary,
so a policy can learn the game in a few warm-start steps and every method has both outcomes to see.
"""

from __future__ import annotations

from lightning_rlvr.core.problem import SPLITS, Problem, Verdict
from lightning_rlvr.envs.base import Environment

WORDS = ("go", "up", "left", "right")


class EchoWords(Environment):
    """Say the words of the problem in order (see the module docstring).

    Args:
        train_games: problems in ``train``.
        val_games: problems in ``val``.
        test_games: problems in ``test``.
        max_turns: the turn limit of an episode.
    """

    def __init__(self, train_games: int = 16, val_games: int = 4, test_games: int = 4, max_turns: int = 4):
        self.train_games = train_games
        self.val_games = val_games
        self.test_games = test_games
        self.max_turns = max_turns
        self._todo: tuple[str, ...] = ()

    def size(self, split: str) -> int:
        return {"train": self.train_games, "val": self.val_games, "test": self.test_games}[split]

    def problem(self, split: str, index: int) -> Problem:
        k = SPLITS.index(split) * 1000 + index
        words = [WORDS[(k * 7 + 3 * j) % len(WORDS)] for j in range(1 + k % 3)]
        return Problem(
            prompt=f"say {words[0]}", answer="won", solution="\n".join(words), meta={"words": words}
        )

    def reset(self, problem: Problem) -> str:
        self._todo = tuple(problem.meta["words"])
        return f"say {self._todo[0]}"

    def step(self, action: str) -> tuple[str, bool, Verdict | None]:
        if action != self._todo[0]:
            return f"no: say {self._todo[0]}", False, None
        self._todo = self._todo[1:]
        if not self._todo:
            return "won", True, Verdict(1.0, "you said every word", correct=True)
        return f"say {self._todo[0]}", False, None

    def is_invalid(self, action: str, observation: str) -> bool:
        return observation.startswith("no:")
