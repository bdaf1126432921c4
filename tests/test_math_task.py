"""Math: answer equivalence through math-verify, GSM8K/MATH column mapping, data errors naming the row."""

from __future__ import annotations

import json

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.rewards.math import (
    completion_answer,
    last_boxed,
    math_equal,
    math_reward,
    reference_answer,
)
from lightning_rlvr.tasks import MathTask, safe_check


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    "a, b",
    [
        ("0.5", "1/2"),
        ("0.5", "\\frac{1}{2}"),
        ("1/2", "\\frac{1}{2}"),
        ("\\dfrac{3}{4}", "0.75"),
        ("1,000", "1000"),
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
        ("x = 2", "2"),
        ("(1,2)", "(1, 2)"),
    ],
)
def test_equivalent_answers(a, b):
    assert math_equal(a, b) and math_equal(b, a)


@pytest.mark.parametrize("a, b", [("2", "3"), ("\\frac{1}{3}", "0.5"), ("-1", "1"), ("12", "1.2")])
def test_different_answers(a, b):
    assert not math_equal(a, b)


def test_boxed_extraction_takes_the_last_balanced_box():
    assert last_boxed("first \\boxed{1} then \\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert last_boxed("no box") is None
    assert last_boxed("truncated \\boxed{\\frac{1}{2") is None
    assert completion_answer("so x = \\boxed{7}.") == "7"
    assert completion_answer("work ... #### 1,234") == "1,234"
    assert completion_answer("work ... answer: 42") == "42"


def test_reference_answers_from_gsm8k_and_math_cells():
    assert reference_answer("She sells 3+4=7.\n#### 1,234") == "1234"
    assert reference_answer("The area is $\\boxed{\\pi/2}$.") == "\\pi/2"
    assert reference_answer(" 42 ") == "42"


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("So the answer is \\boxed{\\frac{1}{2}}.", 1.0),
        ("3 + 4, so #### 0.5", 1.0),
        ("answer: 1/2", 1.0),
        ("I get 0.5", 1.0),
        ("\\boxed{2}", 0.0),
        ("I get 0.5 no wait 3", 0.0),
        ("", 0.0),
    ],
)
def test_math_reward(completion, reward):
    assert math_reward(completion, "#### 0.5")[0] == reward


def test_gsm8k_shaped_jsonl_with_column_mapping(tmp_path):
    rows = [{"q": "2+3?", "a": "2+3=5\n#### 5"}, {"q": "half of 1?", "a": "1/2 = 0.5\n#### 0.5"}]
    f = write_jsonl(tmp_path / "gsm.jsonl", rows)
    task = MathTask(f, f, question_field="q", answer_field="a", template="Q: {question}\n")
    p = task.problem("train", 1)
    assert (p.prompt, p.answer) == ("Q: half of 1?\n", "0.5")
    assert task.size("test") == 2
    assert task.check("The answer is \\boxed{\\frac{1}{2}}", p).reward == 1.0
    assert task.check("#### 2", p).reward == 0.0


def test_math_shaped_parquet_with_problem_and_solution_columns(tmp_path):
    from datasets import Dataset

    f = tmp_path / "math.parquet"
    Dataset.from_dict(
        {"problem": ["Simplify $2/4$."], "solution": ["$2/4 = \\boxed{\\frac{1}{2}}$"], "level": ["Level 1"]}
    ).to_parquet(str(f))
    task = MathTask(
        str(f), str(f), question_field="problem", answer_field="solution", solution_field="solution"
    )
    p = task.problem("test", 0)
    assert p.answer == "\\frac{1}{2}"
    assert task.check(p.solution, p).reward == 1.0
    assert task.check("0.5", p).reward == 1.0
    assert task.check("\\boxed{0.25}", p).reward == 0.0


@pytest.mark.parametrize(
    "bad",
    [
        {"question": "q"},
        {"question": "q", "answer": ""},
        {"question": "q", "answer": None},
        {"question": "q", "answer": "work but no final #### "},
    ],
)
def test_a_row_without_its_answer_names_the_file_and_row(tmp_path, bad):
    f = write_jsonl(tmp_path / "rows.jsonl", [{"question": "ok", "answer": "#### 1"}, bad])
    good = write_jsonl(tmp_path / "good.jsonl", [{"question": "ok", "answer": "#### 1"}])
    with pytest.raises(RLVRError, match=r"rows\.jsonl: row 1 has no 'answer'"):
        MathTask(good, f)


@pytest.mark.parametrize("completion", ["", "\\boxed{", "\\boxed{\\frac{", "$$$", "}" * 50, "🙂" * 100, None])
def test_math_verifier_never_raises_on_malformed_completions(tmp_path, completion):
    f = write_jsonl(tmp_path / "r.jsonl", [{"question": "q", "answer": "#### 3"}])
    task = MathTask(f, f)
    verdict, raised = safe_check(task, completion, task.problem("train", 0))
    assert verdict.reward == 0.0
    if completion is not None:
        assert not raised
