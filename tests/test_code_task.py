"""Code tasks: HumanEval from the installed package, problem + unit-test files, parallel batch checks."""

from __future__ import annotations

import json

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.rewards.sandbox import SandboxLimits
from lightning_rlvr.tasks import CodeTask, HumanEvalTask, Problem, Task, Verdict
from lightning_rlvr.tasks.code import called_names, extract_code

LIMITS = SandboxLimits(wall_s=2.0, cpu_s=2, memory_mb=512)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def humaneval():
    return HumanEvalTask(sandbox=LIMITS, workers=4)


def test_humaneval_is_read_from_the_package(humaneval):
    assert humaneval.size("test") == 164
    p = humaneval.problem("test", 0)
    assert p.meta["task_id"] == "HumanEval/0" and p.prompt.startswith("from typing import List")


def test_canonical_solutions_pass_and_wrong_ones_fail_in_a_batch(humaneval):
    problems = [humaneval.problem("test", i) for i in range(8)]
    completions = [p.solution for p in problems] + ["    return None\n"] * 8
    results = humaneval.check_batch(completions, problems + problems)
    assert [v.reward for v, _ in results] == [1.0] * 8 + [0.0] * 8
    assert not any(raised for _, raised in results)


def test_a_fenced_full_redefinition_passes(humaneval):
    p = humaneval.problem("test", 2)  # truncate_number
    completion = (
        "Sure:\n```python\ndef truncate_number(number: float) -> float:\n    return number % 1.0\n```\n"
    )
    assert humaneval.check(completion, p).reward == 1.0


def test_disjoint_split_by_fraction():
    task = HumanEvalTask(test_fraction=0.5, sandbox=LIMITS)
    train = {task.problem("train", i).meta["task_id"] for i in range(task.size("train"))}
    test = {task.problem("test", i).meta["task_id"] for i in range(task.size("test"))}
    assert train and test and not train & test and len(train | test) == 164


def test_code_task_from_problem_and_tests_rows(tmp_path):
    rows = [
        {
            "text": "Write add(a, b).",
            "test_list": "assert add(1, 2) == 3\nassert add(-1, 1) == 0",
            "ref": "def add(a, b):\n    return a + b",
        }
    ]
    f = write_jsonl(tmp_path / "code.jsonl", rows)
    task = CodeTask(f, f, prompt_field="text", tests_field="test_list", solution_field="ref", sandbox=LIMITS)
    p = task.problem("train", 0)
    assert p.prompt == "Write add(a, b)."
    assert task.check(p.solution, p).reward == 1.0
    assert task.check("```python\ndef add(a, b):\n    return a - b\n```", p).reward == 0.0
    verdict = task.check("def add(a, b):\n    return a - b", p)
    assert verdict.reward == 0.0 and "AssertionError" in verdict.feedback


def test_code_rows_without_tests_name_the_file_and_row(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [{"prompt": "p", "tests": "assert True"}])
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"prompt": "p", "tests": "assert True"}, {"prompt": "p", "tests": " "}]
    )
    with pytest.raises(RLVRError, match=r"bad\.jsonl: row 1 has no 'tests'"):
        CodeTask(good, bad)


def test_extract_code():
    assert extract_code("x\n```python\na = 1\n```\ny\n```py\nb = 2\n```") == "b = 2\n"
    assert extract_code("plain = 1") == "plain = 1"
    assert extract_code("```python\nunterminated = 1\n") == "unterminated = 1\n"


SOLUTION = "def add(a, b):\n    return a + b\n"
LAYOUTS = {  # completion -> the code that must run
    "solution then usage example": (
        f"Here:\n```python\n{SOLUTION}```\nUsage:\n```python\nprint(add(1, 2))\n```\n",
        SOLUTION,
    ),
    "two versions, the later wins": (
        "```python\ndef add(a, b):\n    return a - b\n```\nFixed:\n```py\n" + SOLUTION + "```",
        SOLUTION,
    ),
    "no fences": (SOLUTION, SOLUTION),
    "no block defines it: the last block": ("```python\nx = 1\n```\n```python\ny = 2\n```", "y = 2\n"),
    "unfinished defining block, then an example": (
        "```python\ndef add(a, b):\n    return a + b\n    if\n```\n```python\nadd(1, 2)\n```",
        "def add(a, b):\n    return a + b\n    if\n",
    ),
    "defined by assignment": (
        "```python\nadd = lambda a, b: a + b\n```\n```python\nadd(1, 1)\n```",
        "add = lambda a, b: a + b\n",
    ),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_the_last_block_that_defines_the_entry_point_runs(layout):
    completion, expected = LAYOUTS[layout]
    assert extract_code(completion, {"add"}) == expected
    assert called_names("assert add(1, 2) == 3\nassert math.isclose(add(0.1, 0.2), 0.3)") == {"add", "math"}


def test_a_solution_followed_by_a_usage_example_passes(tmp_path):
    f = write_jsonl(
        tmp_path / "code.jsonl", [{"prompt": "add", "tests": "assert add(1, 2) == 3", "ep": "add"}]
    )
    plain = CodeTask(f, f, sandbox=LIMITS, workers=2)
    with_entry = CodeTask(f, f, entry_point_field="ep", sandbox=LIMITS, workers=2)
    with_entry_tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    completions = [
        LAYOUTS[k][0] for k in ("solution then usage example", "two versions, the later wins", "no fences")
    ]
    p = plain.problem("test", 0)
    assert [v.reward for v, _ in plain.check_batch(completions, [p] * 3)] == [1.0, 1.0, 1.0]
    q = with_entry.problem("test", 0)
    q.answer = with_entry_tests
    assert [v.reward for v, _ in with_entry.check_batch(completions, [q] * 3)] == [1.0, 1.0, 1.0]
    # a usage example that needs input() would fail if it ran: it does not
    needs_input = f"```python\n{SOLUTION}```\n```python\nprint(add(int(input()), 1))\n```"
    assert plain.check(needs_input, p).reward == 1.0


def test_check_batch_keeps_safe_check_semantics():
    class Flaky(Task):
        def check(self, completion, problem):
            if completion == "boom":
                raise RuntimeError("verifier bug")
            return Verdict(float(completion == problem.answer))

    results = Flaky().check_batch(["1", "boom", "2"], [Problem("q", "1")] * 3)
    assert [(v.reward, raised) for v, raised in results] == [(1.0, False), (0.0, True), (0.0, False)]
    with pytest.raises(ValueError):
        Flaky().check_batch(["1"], [])


def test_parallel_check_batch_counts_a_raising_completion(humaneval, monkeypatch):
    problems = [humaneval.problem("test", i) for i in range(4)]
    original = HumanEvalTask.program

    def program(self, completion, problem):
        if completion == "boom":
            raise RuntimeError("program builder bug")
        return original(self, completion, problem)

    monkeypatch.setattr(HumanEvalTask, "program", program)
    completions = [problems[0].solution, "boom", problems[2].solution, None]
    results = humaneval.check_batch(completions, problems)
    assert [(v.reward, raised) for v, raised in results] == [
        (1.0, False),
        (0.0, True),
        (1.0, False),
        (0.0, True),
    ]
