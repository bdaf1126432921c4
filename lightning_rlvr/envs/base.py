"""An environment is a task the policy solves over several turns.

``Environment`` is a ``Task``: ``problem(split, index)``, ``size(split)`` and ``train_problem`` serve
its problems (one game each, identified by ``Problem.meta``) to the data module unchanged. On top of
that it plays one episode at a time:

- ``reset(problem) -> observation``: start the game of ``problem`` (deterministic given the problem);
- ``step(action) -> (observation, done, verdict)``: play one action; ``verdict`` is the final score
  when ``done`` and None before;
- ``clone()``: an independent copy of the same configuration, so a batch of episodes can run side by
  side (``lightning_rlvr.collect.episodes.run_episodes`` clones one per row).

An action the game cannot parse is a move like any other: the environment answers it with its own
error observation. ``safe_step`` turns an adapter that raises into an observation that ends the episode
with reward 0, so a broken game never stops training.

Training collects episodes through ``lightning_rlvr.collect.roll_out``: ``group_size`` episodes of each
problem, one call of the module's rollout engine per turn over every live episode, scored by the game's
verdicts. The warm start trains on the expert's episodes (``collect.worked_example``) and
``rollout_metrics`` reports success, turns and invalid actions.

``check(completion, problem)`` replays a completion as one action per line, so a single-turn policy (or
the worked ``Problem.solution``, the expert's actions joined by newlines) is scored by the same rules.
"""

from __future__ import annotations

import copy

from ..core import text_roles as roles
from ..core.problem import Problem, Verdict
from ..core.rollout import Rollout
from ..tasks.base import Task


class Environment(Task):
    """Base class. Subclasses implement ``problem``, ``size``, ``reset`` and ``step``.

    ``max_turns`` is the episode's turn limit; an episode still running at the limit ends with
    ``verdict_at_limit()`` (reward 0 unless the game says otherwise).
    """

    max_turns: int = 20

    # Texts by role for episodes in a word vocabulary (envs/vocab.py), used without a prompt format
    # (core/text_roles.py). The prompt is the first observation and {reference} a peer's whole episode (its
    # final EOS removed), which ends with an action; every action ends with <eos> before an observation, so
    # "<eos>" (the word tokenizer's EOS) makes the repeated first observation read as the next one.
    # Without a successful peer a teacher sees the prompt alone (the answer "won" tells it nothing), and
    # there is no answer context. The hindsight: the reply to the action, every later turn, the verdict and
    # the game's message.
    role_texts = {
        roles.PEER_CONTEXT: "{prompt}{reference}<eos>{prompt}",
        roles.NO_PEER_CONTEXT: "{prompt}",
        roles.HINDSIGHT: "\n{future}\n{verdict}. {feedback}",
        roles.HINDSIGHT_SEPARATOR: "\n",
        roles.PASS_TEXT: "1",
        roles.FAIL_TEXT: "0",
    }

    def reset(self, problem: Problem) -> str:
        """Start the game of ``problem``; the first observation."""
        raise NotImplementedError

    def step(self, action: str) -> tuple[str, bool, Verdict | None]:
        """Play ``action``: ``(observation, done, verdict)``; ``verdict`` is set when ``done``."""
        raise NotImplementedError

    def verdict_at_limit(self) -> Verdict:
        """The verdict of an episode cut at the turn limit."""
        return Verdict(0.0, f"turn limit ({self.max_turns}) reached", correct=False)

    def clone(self) -> Environment:
        """A copy that plays its own episode; pools and caches are shared, episode state is not.

        The default is a shallow copy: subclasses keep per-episode state in attributes that ``reset``
        replaces (never mutates in place), so a clone's episode never touches its parent's.
        """
        return copy.copy(self)

    def close(self) -> None:
        """Release the episode's resources (a game process); the environment stays usable."""

    def is_invalid(self, action: str, observation: str) -> bool:
        """Whether the game could not carry out ``action`` (it answered ``observation``); counted per episode.

        The default knows no invalid action; adapters say it from their game's own signals.
        """
        return False

    # -- training: how the module rolls out, warm-starts and reports an environment ---------------

    def policy_token_budget(self, max_new_tokens: int) -> int:
        """``max_turns`` actions of at most ``max_new_tokens`` each (Dr. GRPO's constant normaliser)."""
        return self.max_turns * max_new_tokens

    def rollout_metrics(self, rollout: Rollout) -> dict[str, float]:
        """``success`` (share of won episodes), ``turns`` (mean per episode), ``invalid_actions`` (mean)."""
        turns = (rollout.turn_index.max(-1).values + 1).clamp(min=1).float()  # [N]
        metrics = {"success": float(rollout.correct.float().mean()), "turns": float(turns.mean())}
        if rollout.invalid_actions is not None:
            metrics["invalid_actions"] = float(rollout.invalid_actions.float().mean())
        return metrics

    def vocabulary_texts(self, split: str = "train", limit: int = 64) -> list[str]:
        """Texts whose words the offline tokenizer should know (observations, commands, objects).

        The default plays the worked solution of the first ``limit`` problems of ``split`` and returns
        every observation and action it sees.
        """
        n = self.size(split)
        texts: list[str] = []
        for i in range(limit if n is None else min(n, limit)):
            problem = self.problem(split, i)
            env = self.clone()
            texts.append(safe_reset(env, problem))
            for action in (problem.solution or "").splitlines():
                obs, done, verdict = safe_step(env, action)
                texts += [action, obs] + ([verdict.feedback] if verdict is not None else [])
                if done:
                    break
            env.close()
        return texts

    def check(self, completion: str, problem: Problem) -> Verdict:
        """Replay ``completion`` as one action per line from the start of ``problem``'s game."""
        env = self.clone()
        try:
            safe_reset(env, problem)
            actions = [a for a in completion.splitlines() if a.strip()]
            for action in actions[: self.max_turns]:
                _, done, verdict = safe_step(env, action)
                if done:
                    return verdict if verdict is not None else Verdict(0.0, "ended without a verdict")
            return env.verdict_at_limit()
        finally:
            env.close()


def safe_reset(env: Environment, problem: Problem) -> str:
    """``env.reset`` that re-raises with the problem named (a game that cannot start is a setup error)."""
    try:
        return env.reset(problem)
    except Exception as err:
        raise RuntimeError(f"{type(env).__name__} could not start {problem.meta}: {err}") from err


def safe_step(env: Environment, action: str) -> tuple[str, bool, Verdict | None]:
    """``env.step`` that never raises: an adapter error ends the episode with reward 0 and says why."""
    try:
        obs, done, verdict = env.step(action)
    except Exception as err:  # noqa: BLE001 - a failing game is a lost episode, never a stopped run
        msg = f"environment error: {type(err).__name__}: {err}"
        return msg, True, Verdict(0.0, msg, correct=False)
    if done and verdict is None:
        verdict = Verdict(0.0, "episode ended without a verdict", correct=False)
    return obs, done, verdict
