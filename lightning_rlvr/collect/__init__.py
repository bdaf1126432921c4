"""Collection: the one place that knows a single-turn task from a multi-turn environment.

Layer: above ``engines``, ``tasks``, ``envs``, ``rewards`` and ``core``; below the module, evaluation and
the warm start. ``roll_out`` samples ``group_size`` completions (or episodes) of each problem and
returns them **verified**: a single-turn batch is checked here by the task's verifier, an episode
carries the game's own verdicts. Callers never verify and never ask which kind of task they hold.

- ``single_turn``: prompts rendered and tokenised, one engine call, the ``Rollout`` assembled;
- ``episodes``: multi-turn play, one engine call per turn over every live episode;
- ``continuations``: Monte-Carlo continuations of partial completions (sampled and verified);
- ``dynamic_sampling``: DAPO's resampling of all-equal groups.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..core.problem import Problem
from ..core.rollout import Rollout
from ..envs.base import Environment
from ..tasks.base import Task
from .episodes import engine_generate, expert_rollout, run_episodes
from .single_turn import Sampler, generate_rollout, row_keys
from .verify import verify

__all__ = ["CollectedRollout", "Sampler", "roll_out", "verify", "worked_example"]


@dataclass
class CollectedRollout:
    """A verified rollout and what collecting it cost."""

    rollout: Rollout
    verifier_errors: int  # verifier calls that raised (each scored as reward 0)
    generate_s: float  # seconds spent sampling (an episode's game steps included)
    verify_s: float  # seconds spent in the verifier (0 for episodes: the game scored them as it went)


def roll_out(task: Task, sampler: Sampler, problems: list[Problem], group_size: int) -> CollectedRollout:
    """``group_size`` verified samples of each problem, rows laid out group by group.

    A task answers in one completion of at most ``sampler.sampling.max_new_tokens`` tokens; an
    environment plays episodes with that budget per action, stopping before the context outgrows
    the model's positions.
    """
    t0 = time.perf_counter()
    s = sampler
    if isinstance(task, Environment):
        generate = engine_generate(s.engine, s.model, s.tokenizer, s.sampling)
        positions = getattr(getattr(s.model, "config", None), "max_position_embeddings", None)
        rollout = run_episodes(
            task,
            problems,
            group_size,
            generate,
            s.tokenizer,
            max_new_tokens_per_turn=s.sampling.max_new_tokens,
            render=s.render,
            max_context_tokens=positions,
            keys=None if s.key is None else row_keys(s.key, problems, group_size),
        )
        device = next(s.model.parameters()).device
        rollout.rewards, rollout.correct = rollout.rewards.to(device), rollout.correct.to(device)
        return CollectedRollout(rollout, 0, time.perf_counter() - t0, 0.0)
    rollout = generate_rollout(
        s.engine, s.model, s.tokenizer, problems, group_size, s.sampling, s.render, key=s.key
    )
    t1 = time.perf_counter()
    errors = verify(task, rollout)
    return CollectedRollout(rollout, errors, t1 - t0, time.perf_counter() - t1)


def worked_example(task: Task, problem: Problem, tokenizer, render=None) -> tuple[list[int], list[int]]:
    """A supervised example for the warm start: ids and labels (-100 where no loss applies).

    A task's worked solution (``Task.worked_example``); an environment's expert episode, with labels
    on the expert's actions only.
    """
    if not isinstance(task, Environment):
        return task.worked_example(problem, tokenizer, render)
    r = expert_rollout(task, [problem], tokenizer, render=render)
    prompt, n = r.prompt_tokens(0).tolist(), int(r.completion_mask[0].sum())
    completion = r.completion_ids[0, :n].tolist()
    labels = [t if int(m) else -100 for t, m in zip(completion, r.loss_mask[0, :n].tolist())]
    return prompt + completion, [-100] * len(prompt) + labels
