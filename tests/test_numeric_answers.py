"""Number tasks compare numbers as numbers, read a stated answer over its restatement, and say which
rows of an answer column cannot be read as the chosen kind."""

from __future__ import annotations

import json

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.rewards.answers import AnswerParser, canonical_number, number_value
from lightning_rlvr.tasks import JsonlTask, ReasoningGymTask

# (a reference as a file writes it, completions that state it in another form)
SAME = [
    ("51.0", ["51", "51.00", "The answer is 51.", "#### 51.0", "answer: 51"]),
    ("51", ["51.0", "so 51.000", "<answer>51.</answer>"]),
    ("1,000", ["1000", "1 000", "1\u2009000", "1\u202f000", "$1\\,000$ in total", "1000.00"]),
    ("1000", ["1,000", "answer: 1 000.", "The answer is 1,000. It took 3 steps."]),
    ("-3", ["\u22123", "-3.0", "The answer is \u22123."]),
    ("\u22123", ["-3", "answer: -3"]),
    ("0.5", [".5", "0.50", "The answer is 0.500"]),
    ("12345.6", ["12,345.6", "12 345.60"]),
]
DIFFERENT = [
    ("51.0", ["52", "5.1", "510", "-51"]),
    ("-3", ["3", "answer: 3"]),
    ("1,000", ["1", "100", "1,0000"]),
]


def _file(tmp_path, answers, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": a}) + "\n" for i, a in enumerate(answers))
    )
    return str(path)


@pytest.mark.parametrize("reference, completions", SAME)
def test_jsonl_numbers_equal_in_value_are_the_same_answer(tmp_path, reference, completions):
    task = JsonlTask(test_file=_file(tmp_path, [reference, "7"]))
    assert task.answers.kind == "number"
    p = task.problem("test", 0)
    for completion in completions:
        assert task.check(completion, p).correct, completion
        assert task.extract_answer(completion) == canonical_number(reference)  # maj@k votes by value


@pytest.mark.parametrize("reference, completions", DIFFERENT)
def test_jsonl_numbers_of_another_value_are_wrong(tmp_path, reference, completions):
    task = JsonlTask(test_file=_file(tmp_path, [reference]))
    for completion in completions:
        assert not task.check(completion, task.problem("test", 0)).correct, completion


def test_reasoning_gym_numbers_compare_by_value_and_are_scored_as_the_dataset_writes_them():
    config = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
    task = ReasoningGymTask("chain_sum", config=config, answers=AnswerParser(kind="number"))
    negatives = 0
    for i in range(30):
        p = task.problem("test", i)
        value = int(p.answer)
        negatives += value < 0
        for written in [
            f"{value}.0",
            f"{value}.00",
            str(value).replace("-", "\u2212"),
            f"The answer is {value}.",
        ]:
            assert task.check(written, p).correct, (written, p.answer)
        assert not task.check(f"{value + 1}.0", p).correct
    assert negatives > 0  # the unicode minus was tried on negative answers


@pytest.mark.parametrize(
    "answers, rows",
    [
        (["51.0"] * 9 + ["N/A"], "rows.jsonl row 9 (1 of 10"),
        (["1", "two", "3", "4", "5"], "rows.jsonl row 1 (1 of 5"),
        (["x"] * 7 + ["1"] * 8, "rows.jsonl rows 0, 1, 2, 3, 4, ... (7 of 15"),
    ],
)
def test_a_number_column_with_unreadable_rows_is_one_line_naming_them(tmp_path, answers, rows):
    path = _file(tmp_path, answers)
    for explicit in [None, AnswerParser(kind="number")]:
        with pytest.raises(RLVRError) as err:
            JsonlTask(test_file=path, answers=explicit)
        message = str(err.value)
        assert "\n" not in message and "not numbers" in message and "answers.kind" in message
        count = rows.split("(")[1]
        assert rows.split(" (")[0] in message and count.split(" of ")[0] in message.split(" of ")[0], message
    assert JsonlTask(test_file=path, answers=AnswerParser(kind="text")).answers.kind == "text"  # the way out


def test_a_mostly_text_column_is_text_and_the_error_names_rows_in_each_file(tmp_path):
    words = JsonlTask(test_file=_file(tmp_path, ["Paris", "1969", "Rome"]))
    assert words.answers.kind == "text"
    for completion in ["<answer>**Paris**</answer>", "Answer: Paris.", "The answer is $Paris$"]:
        assert words.check(completion, words.problem("test", 0)).correct, completion
    train = _file(tmp_path, ["1", "2", "x"], "train.jsonl")
    test = _file(tmp_path, ["1", "y", "3", "4"], "test.jsonl")
    with pytest.raises(RLVRError, match=r"2 of 7 .*train\.jsonl row 2; .*test\.jsonl row 1"):
        JsonlTask(train, test)


def test_a_test_file_alone_serves_validate_and_test_and_fit_says_what_is_missing(tmp_path):
    task = JsonlTask(test_file=_file(tmp_path, ["4", "5"]))
    assert task.size("test") == task.size("val") == 2 and task.problem("val", 1).answer == "5"
    for call in [lambda: task.size("train"), lambda: task.train_problem(0), lambda: task.problem("train", 0)]:
        with pytest.raises(RLVRError, match="no train_file: fit needs one .*train_file"):
            call()
    with pytest.raises(RLVRError, match="needs test_file"):
        JsonlTask(train_file=_file(tmp_path, ["4"]))


# A sum whose answer is stated, then the question restated (cut off or not), must read as the stated sum.
RESTATED = [
    "{a} + {b} = {s}\n\nThis is the result of {a} + {b}",
    "{a} + {b} = {s}\n\nThis is the result of {a} +",
    "{a} + {b} = {s}. So {a} + {b}",
    "To add {a} and {b}: {a} + {b} = {s}",
    "First {a} + {b} = {s}, that is adding {b} to {a}",
]
# New numbers after the equation are a new answer; a list of numbers is never read as any of them.
NOT_RESTATED = [
    ("{a} + {b} = {s}. Wait, it is {w}", "{w}"),
    ("{a} + {b} = {s}\n\nor maybe {w}", "{w}"),
    ("{a} + {b} = {w}\n\nThis is the result of {a} + {b}", "{w}"),
]


@pytest.mark.parametrize("a, b", [(25, 31), (7, 8), (40, 2), (99, 1)])
def test_a_stated_sum_is_read_over_its_restatement(a, b):
    parser, s, w = AnswerParser(kind="number"), a + b, a + b + 11
    for text in RESTATED:
        assert parser(text.format(a=a, b=b, s=s)) == str(s), text
    for text, answer in NOT_RESTATED:
        assert parser(text.format(a=a, b=b, s=s, w=w)) == answer.format(w=w), text


def test_a_completion_listing_many_numbers_commits_to_one():
    parser = AnswerParser(kind="number")
    hedges = [
        " ".join(f"{n}," for n in range(200)),
        "25 + 31 = " + " or ".join(map(str, range(50, 60))),
        "25 + 31 = 56 or 57 or 55, 25 + 31",
        "\n".join(f"{n} + 0 = {n}" for n in range(100)),
    ]
    for text in hedges:
        got = parser(text)
        matches = [v for v in range(-5, 300) if number_value(got) == v]
        assert len(matches) == 1, (text[:40], got)  # one number; only that gold could score
    assert parser(hedges[2]) == "55"  # the last new number, not the equation's first result
