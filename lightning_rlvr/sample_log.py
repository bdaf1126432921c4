"""Samples as JSONL, to read what the model writes: ``--model.log_samples N``.

Layer: beside ``module`` (it reads a verified rollout and the task). Each line holds the stage, the RL
step, the prompt as the task gives it, the reference, the completion, the answer the task's parser
extracts, the reward, the verdict and the verifier's feedback. Training writes the first N rows of every
step's rollout to ``<log dir>/samples/fit.jsonl``; validation and test write the first N rows of each
evaluation to ``samples/val.jsonl`` and ``samples/test.jsonl``. Lines are appended as they come.
"""

from __future__ import annotations

import json
from pathlib import Path

from .core.rollout import Rollout
from .tasks.base import Task, safe_extract_answer


def sample_rows(stage: str, step: int, rollout: Rollout, task: Task, limit: int) -> list[dict]:
    """The first ``limit`` rows of a verified ``rollout`` as records."""
    rows = []
    for i in range(min(limit, len(rollout.completions))):
        problem = rollout.problems[int(rollout.group[i])]
        completion = rollout.completions[i]
        rows.append(
            {
                "stage": stage,
                "step": step,
                "prompt": problem.prompt,
                "reference": problem.answer,
                "completion": completion,
                "answer": safe_extract_answer(task, completion),
                "reward": float(rollout.rewards[i]),
                "correct": bool(rollout.correct[i]),
                "feedback": rollout.feedback[i] if rollout.feedback else None,
            }
        )
    return rows


def append_samples(log_dir: str | Path, stage: str, rows: list[dict]) -> None:
    """Append ``rows`` to ``log_dir/samples/<stage>.jsonl``."""
    if not rows:
        return
    path = Path(log_dir) / "samples" / f"{stage}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
