"""First errors as tokens: of a text completion (where the task's ``first_error`` says), and of an
episode (the first action after which the game can no longer be won in time).

Floor ``experiments`` (imports ``core``, ``collect.episodes`` and ``envs.base``), used by the credit
lab's ``evaluate``. Its localisation needs, for a failed episode, the place it went wrong. A game has
no character-level derivation, but it has a turn limit and an expert walkthrough
(``Problem.solution``, one command per line): after the policy's first k actions the game is still
winnable when some continuation wins within the turns left. ``first_fatal_action`` returns the first
k for which none does; its first token is the error.

Winnability is decided by replaying the k actions in a fresh clone of the environment, then:

* the game ended during them: winnable exactly when it was won;
* else the expert's walkthrough is played from there, skipping every command the game reports as
  invalid in that state (``Environment.is_invalid``: already done, or not possible yet) and counting
  only the valid ones against the turns left; winnable when that wins in time.

A win found this way is a real plan, so "winnable" is never wrong. "Not winnable" is exact for games
whose every winning plan does the walkthrough's steps (EchoWords; TextWorld cooking games with one
room and no optional steps, the agent quickstart's); in bigger games another plan could exist, so
the first error found is then at or after the true one (never before: the scan stops at the first k
with no plan found). A failed episode always has one: after its last action no turn is left.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...collect.episodes import action_text
from ...core.problem import Problem
from ...envs.base import Environment


def actions_of(rollout, row: int, tokenizer) -> list[tuple[int, str]]:
    """(first token, command) of each action of an episode row: each run of its policy mask."""
    mask = rollout.policy_mask[row, : int(rollout.lengths[row])].tolist()
    ids = rollout.completion_ids[row].tolist()
    out, t = [], 0
    while t < len(mask):
        if mask[t]:
            end = t
            while end + 1 < len(mask) and mask[end + 1]:
                end += 1
            out.append((t, action_text(tokenizer, ids[t : end + 1])))
            t = end + 1
        else:
            t += 1
    return out


def winnable(env: Environment, problem: Problem, actions: Sequence[str], turns: int) -> bool:
    """Whether the game can still be won within ``turns`` after playing ``actions`` (see the module)."""
    game = env.clone()
    try:
        game.reset(problem)
        for action in actions:
            _, done, verdict = game.step(action)
            if done:
                return bool(verdict is not None and verdict.correct)
        left = turns - len(actions)
        for command in (problem.solution or "").splitlines():
            command = command.strip()
            if not command or left <= 0:
                continue
            observation, done, verdict = game.step(command)
            if done:
                return bool(verdict is not None and verdict.correct)
            if not game.is_invalid(command, observation):
                left -= 1
        return False
    finally:
        game.close()


def first_fatal_action(env: Environment, problem: Problem, actions: Sequence[str], turns: int) -> int | None:
    """Index of the first action after which the game cannot be won within ``turns``; None if none is."""
    if not winnable(env, problem, [], turns):
        return None  # the walkthrough itself does not win in time: nothing to blame on the policy
    for k in range(len(actions)):
        if not winnable(env, problem, actions[: k + 1], turns):
            return k
    return None


def episode_first_errors(env: Environment, rollout, tokenizer) -> list[int | None]:
    """Per row: the first token of the episode's fatal action (None for won episodes or when unknown)."""
    out: list[int | None] = []
    for i in range(rollout.num_rows):
        if bool(rollout.correct[i]):
            out.append(None)
            continue
        acts = actions_of(rollout, i, tokenizer)
        problem = rollout.problems[int(rollout.group[i])]
        k = first_fatal_action(env, problem, [a for _, a in acts], env.max_turns)
        out.append(None if k is None else acts[k][0])
    return out


def char_to_token(tokenizer, ids: list[int], offset: int) -> int | None:
    """Index of the token whose decoded text holds character ``offset`` of the decoded completion.

    An offset at the end of the text points at a final EOS (the completion stopped where it should
    have gone on); None when there is no such token (e.g. a completion cut by the budget).
    """
    prev = 0
    for t in range(len(ids)):
        n = len(tokenizer.decode(ids[: t + 1], skip_special_tokens=True))
        if n > offset:
            return t
        if n == prev and t == len(ids) - 1 and offset >= n:  # a final special token (EOS) adds no text
            return t
        prev = n
    return None


def first_error_tokens(task, rollout, tokenizer) -> list[int | None]:
    """Per row: the token of the first error of a failed completion, None for correct rows or unknown.

    Episodes (a policy mask: actions between observations) have no character-level derivation: their
    first error is the first token of the first action after which the game can no longer be won
    within its turn limit (``episode_first_errors``)."""
    if getattr(rollout, "policy_mask", None) is not None and hasattr(task, "reset"):
        return episode_first_errors(task, rollout, tokenizer)
    out: list[int | None] = []
    for i in range(rollout.num_rows):
        if bool(rollout.correct[i]):
            out.append(None)
            continue
        problem = rollout.problems[int(rollout.group[i])]
        offset = task.first_error(rollout.completions[i], problem)
        ids = rollout.completion_tokens(i).tolist()
        out.append(None if offset is None else char_to_token(tokenizer, ids, offset))
    return out
