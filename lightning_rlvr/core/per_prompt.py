"""Per-prompt evaluation results: a stable prompt id and one compact file per evaluation.

Layer: ``core`` (imports nothing of the package above it). Every validation and test writes, per prompt
and sample, the prompt's id, the reward and the verdict (and the completion for the first
``log_samples`` rows) to ``<log dir>/per_prompt/<name>.csv.gz``: ``val_step<k>`` for the validation at
RL step k (``val_step0`` before RL), ``test`` for a test. A prompt's id is ``<split>:<index>:<hash>``,
its split, its index in the split and 8 hex digits of a hash of its text, so two runs (two methods, two
seeds, a checkpoint and the untouched model) that evaluated the same prompt name it alike and a changed
data file never pairs by index alone. The files are gzip with a zero timestamp (the same rows give the
same bytes): 512 prompts x 4 samples is about 10 kB. With several ranks, rank r > 0 writes
``<name>.rank<r>.csv.gz``; ``read_results`` joins them (a prompt a rank padded its share with counts once).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from .files import atomic_file
from .problem import Problem
from .rollout import Rollout

FOLDER = "per_prompt"  # under the evaluation's log dir
SUFFIX = ".csv.gz"
PLACE = "eval_place"  # Problem.meta: (split, index in the split), set by the evaluation loader
COLUMNS = ("prompt_id", "sample", "reward", "correct")
COMPLETION = "completion"  # a fifth column when the run logs samples


def prompt_id(split: str, index: int, prompt: str) -> str:
    """``<split>:<index>:<8 hex digits of the prompt's hash>``, the same in every run that saw it."""
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=4).hexdigest()
    return f"{split}:{index}:{digest}"


def placed(problem: Problem, split: str, index: int) -> Problem:
    """A copy of ``problem`` that knows its place (split, index), for its id in per-prompt results."""
    return replace(problem, meta={**problem.meta, PLACE: (split, index)})


def id_of(problem: Problem) -> str:
    """The problem's ``prompt_id``; ``?:?:<hash>`` for a problem evaluated without a place."""
    split, index = problem.meta.get(PLACE, ("?", "?"))
    return prompt_id(str(split), index, problem.prompt)  # type: ignore[arg-type]


def rollout_rows(rollout: Rollout, completions: int = 0) -> list[dict]:
    """One row per completion of a verified ``rollout``: its prompt's id, the sample's number within its
    prompt, the reward and the verdict; the completion text on the first ``completions`` rows."""
    rows, seen = [], {}
    for i, completion in enumerate(rollout.completions):
        g = int(rollout.group[i])
        sample = seen[g] = seen.get(g, -1) + 1
        row = {"prompt_id": id_of(rollout.problems[g]), "sample": sample}
        row |= {"reward": float(rollout.rewards[i]), "correct": bool(rollout.correct[i])}
        if i < completions:
            row[COMPLETION] = completion
        rows.append(row)
    return rows


def file_name(name: str, rank: int = 0) -> str:
    """``<name>.csv.gz`` (rank 0) or ``<name>.rank<r>.csv.gz``."""
    return f"{name}{'' if rank == 0 else f'.rank{rank}'}{SUFFIX}"


def write_results(path: str | Path, rows: Iterable[dict], completions: bool = False) -> Path:
    """Write per-prompt rows ({prompt_id, sample, reward, correct[, completion]}) as gzip CSV, atomically."""
    columns = [*COLUMNS, *([COMPLETION] if completions else [])]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = [
            row["prompt_id"],
            int(row["sample"]),
            f"{float(row['reward']):.6g}",
            int(bool(row["correct"])),
        ]
        writer.writerow(cells + ([row.get(COMPLETION) or ""] if completions else []))
    path = Path(path)
    with atomic_file(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
        z.write(text.getvalue().encode("utf-8"))
    return path


def read_results(folder: str | Path, name: str) -> list[dict]:
    """The rows of evaluation ``name`` in ``folder`` (every rank's file), typed, each (prompt, sample)
    once; empty when there is none."""
    folder = Path(folder)
    paths = [folder / file_name(name)] + sorted(folder.glob(f"{name}.rank*{SUFFIX}"))
    out: dict[tuple[str, int], dict] = {}
    for path in paths:
        if not path.is_file():
            continue
        with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                typed = {
                    "prompt_id": row["prompt_id"],
                    "sample": int(row["sample"]),
                    "reward": float(row["reward"]),
                    "correct": row["correct"] == "1",
                }
                if row.get(COMPLETION):
                    typed[COMPLETION] = row[COMPLETION]
                out.setdefault((typed["prompt_id"], typed["sample"]), typed)
    return list(out.values())
