"""Verification: the one place a batch of completions meets the task's verifier.

Layer: ``collect``. ``Task.check_batch`` scores every text (a verifier that raises scores 0 and is
counted); ``verify`` fills a single-turn rollout, ``check_texts`` scores loose texts (Monte-Carlo
continuations). Episodes are scored by their game as they are played (``episodes.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.problem import Problem
from ..core.rollout import Rollout
from ..tasks.base import Task


@dataclass
class VerifierScores:
    """The verifier's scores of a batch of texts, one entry per text."""

    rewards: Tensor  # [n] float32
    correct: Tensor  # [n] bool, the verifier's ``Verdict.correct``
    feedback: list[str]  # [n]
    errors: int  # verifier calls that raised


def check_texts(task: Task, texts: list[str], problems: list[Problem], device=None) -> VerifierScores:
    """Score ``texts[i]`` against ``problems[i]`` with the task's verifier."""
    results = task.check_batch(texts, problems) if texts else []  # [(verdict, raised)] * n
    return VerifierScores(
        rewards=torch.tensor([float(v.reward) for v, _ in results], dtype=torch.float32, device=device),
        correct=torch.tensor([bool(v.correct) for v, _ in results], dtype=torch.bool, device=device),
        feedback=[v.feedback for v, _ in results],
        errors=sum(raised for _, raised in results),
    )


def verify(task: Task, rollout: Rollout) -> int:
    """Fill a single-turn rollout's ``rewards``, ``correct`` and ``feedback``; returns the verifier errors."""
    problems = [rollout.problems[int(g)] for g in rollout.group]
    scores = check_texts(task, rollout.completions, problems, rollout.completion_ids.device)
    rollout.rewards, rollout.correct, rollout.feedback = scores.rewards, scores.correct, scores.feedback
    return scores.errors
