"""TextArena single-player games by env id (``textarena.make``), scored by the game's own reward.

Problem ``i`` of a split is the game reset with one seed: ``seed + 3 * i + k`` with ``k`` = 0, 1, 2
for train, val and test, so the three splits never share a seed. (A game with few distinct instances,
e.g. a number from 1 to 20, repeats instances across seeds: the splits are disjoint in seeds, not
necessarily in what the player sees.)

TextArena's default wrappers give the whole history as each observation; the adapter passes on only
what is new since the last one, because the episode runner already keeps the history in the context.
Games draw from Python's and NumPy's global random generators, so each episode keeps its own copy of
both and swaps it in around every call: episodes of a batch interleave without changing each other's
games, and a problem always replays the same way.

An invalid move is the game's business: TextArena answers it with its own message (and may end the
game, as its rules say). The reward is the game's at the end (``close()``); ``correct`` is a win,
a reward of at least ``win_reward``.
"""

from __future__ import annotations

import random

import numpy as np

from ..core.problem import SPLITS, Problem, Verdict
from .base import Environment, safe_step

_SPLIT_OFFSET = {"train": 0, "val": 1, "test": 2}
# Moves played to see a game's replies when building the vocabulary (games have no worked solutions):
# numbers, directions and a malformed move, which between them draw most single-player games' messages.
PROBE_MOVES = ("[1]", "[10]", "[20]", "[up]", "[down]", "[left]", "[right]", "[a1]", "hello")


class TextArenaGame(Environment):
    """A single-player TextArena game.

    Args:
        env_id: a registered TextArena id, e.g. ``GuessTheNumber-v0`` or ``FrozenLake-v0``.
        seed: the first reset seed; problem ``i`` of a split uses ``seed + 3 * i + split offset``.
        train_games: problems in ``train`` (None: an endless stream of seeds).
        val_games: problems in ``val``.
        test_games: problems in ``test``.
        max_turns: the episode's turn limit (the game may end sooner by its own rules).
        win_reward: the reward at or above which an episode counts as won.
    """

    def __init__(
        self,
        env_id: str = "GuessTheNumber-v0",
        seed: int = 0,
        train_games: int | None = None,
        val_games: int = 100,
        test_games: int = 100,
        max_turns: int = 10,
        win_reward: float = 1.0,
    ) -> None:
        self.env_id = env_id
        self.seed = seed
        self.train_games = train_games
        self.val_games = val_games
        self.test_games = test_games
        self.max_turns = max_turns
        self.win_reward = win_reward
        self._game = None  # the running episode's textarena environment (replaced by reset)
        self._rng: tuple | None = None  # (python random state, numpy random state) of this episode
        self._seen = ""  # the full observation so far (textarena repeats history)

    def size(self, split: str) -> int | None:
        _check_split(split)
        return {"train": self.train_games, "val": self.val_games, "test": self.test_games}[split]

    def problem(self, split: str, index: int) -> Problem:
        n = self.size(split)
        if index < 0 or (n is not None and index >= n):
            raise IndexError(f"{split} has {n} games, asked for {index}")
        game_seed = self.seed + 3 * index + _SPLIT_OFFSET[split]
        return Problem(
            prompt=f"{self.env_id} seed {game_seed}",
            answer="win",
            meta={"env_id": self.env_id, "seed": game_seed, "split": split, "index": index},
        )

    def vocabulary_texts(self, split: str = "train", limit: int = 64) -> list[str]:
        """First observations, and the replies to each of ``PROBE_MOVES`` (in its own episode, played
        twice), of the first ``limit`` problems."""
        texts: list[str] = []
        for i in range(limit if self.size(split) is None else min(limit, self.size(split))):
            problem = self.problem(split, i)
            for move in PROBE_MOVES:
                env = self.clone()
                texts += [env.reset(problem), move]
                for _ in range(2):
                    obs, done, _ = safe_step(env, move)
                    texts.append(obs)
                    if done:
                        break
        return texts

    def reset(self, problem: Problem) -> str:
        import textarena as ta

        saved = _swap_rng(None)
        try:
            random.seed(problem.meta["seed"])
            np.random.seed(problem.meta["seed"])
            self._game = ta.make(problem.meta.get("env_id", self.env_id))
            self._game.reset(num_players=1, seed=problem.meta["seed"])
            _, obs = self._game.get_observation()
        finally:
            self._rng = _swap_rng(saved)
        self._seen = ""
        return self._new_text(obs)

    def step(self, action: str) -> tuple[str, bool, Verdict | None]:
        if self._game is None:
            raise RuntimeError("step before reset")
        saved = _swap_rng(self._rng)
        try:
            done, _ = self._game.step(action)
            if not done:
                _, obs = self._game.get_observation()
                return self._new_text(obs), False, None
            rewards, info = self._game.close()
            self._game = None
        finally:
            self._rng = _swap_rng(saved)
        reward = float(rewards[0]) if rewards else 0.0
        reason = str((info or {}).get(0, {}).get("reason", "game over"))
        return reason, True, Verdict(reward, reason, correct=reward >= self.win_reward)

    def close(self) -> None:
        self._game = None  # textarena's single-player games hold no outside resources

    def clone(self) -> TextArenaGame:
        twin = super().clone()
        twin._game, twin._rng, twin._seen = None, None, ""
        return twin

    def _new_text(self, obs) -> str:
        """What is new in ``obs`` since the last observation (all of it if the history was rewritten)."""
        text = (
            obs if isinstance(obs, str) else "\n".join(str(m[1] if isinstance(m, tuple) else m) for m in obs)
        )
        new = text[len(self._seen) :] if text.startswith(self._seen) else text
        self._seen = text
        # The game echoes the move as "[Player] ..."; the move is already in the episode's tokens.
        return "\n".join(ln for ln in new.strip().splitlines() if not ln.startswith("[Player]")).strip()


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


def _swap_rng(state: tuple | None) -> tuple:
    """Install ``state`` (python, numpy) into the global generators (None: leave them); return the old."""
    old = (random.getstate(), np.random.get_state())
    if state is not None:
        random.setstate(state[0])
        np.random.set_state(state[1])
    return old
