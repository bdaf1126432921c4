"""First errors beyond addition: checkable intermediate results in reasoning-gym completions."""

from __future__ import annotations

import pytest

from lightning_rlvr.core.steps import evaluate, first_difference, first_wrong_result
from lightning_rlvr.tasks.base import Problem


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0-4=-4;-4-8=-12;", None),
        ("0-4=-4;-4-8=-13;", 14),  # the '3' of -13
        ("0-4=-5;-5-8=-13;", 5),  # the first wrong one wins, even if later steps follow from it
        ("2*(3+4)=14, 14/4=3.5", None),
        ("2 x 3 = 7", 8),
        ("7+5=1", 4),  # a written prefix of the value: its last character is where it stops too early
        ("3+4=17", 4),
        ("step 3: the answer is 12", None),  # nothing checkable
        ("1/0=3", None),  # not a value: skipped, not an error
        ("v2+3=5", None),  # '2' belongs to a word: not an equation
    ],
)
def test_first_wrong_result_points_at_the_first_wrong_digit(text, expected):
    assert first_wrong_result(text) == expected


def test_exact_arithmetic_and_prefixes():
    assert evaluate("0.1+0.2") == evaluate("0.3") and evaluate("1/3*3") == 1
    assert evaluate("__import__('os')") is None and evaluate("2**10") is None
    assert first_difference("-12", "-13") == 2 and first_difference("", "x") == 0


@pytest.fixture(scope="module")
def arithmetic():
    from lightning_rlvr.tasks.reasoning_gym import ReasoningGymTask

    config = {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"],
              "allow_parentheses": False, "allow_negation": False}  # fmt: skip
    return ReasoningGymTask("basic_arithmetic", config, template="{question}", pool_size=100)


@pytest.mark.parametrize(
    "completion,expected",
    [
        (" 0-4=-4;-4-8=-12; answer:-12", None),  # correct
        (" 0-4=-4;-4-8=-13; answer:-13", 15),  # a wrong intermediate result: its wrong digit
        (" 0-4=-5;-4-8=-12; answer:-12", None),  # right answer, wrong step: correct is correct
        (" 0-4=-4;-4-8=-12; answer:-11", 27),  # every step right, the answer's second digit wrong
        (" answer:-14", 10),  # no steps: the answer's first wrong character
        (" answer:-1", 10),  # a proper prefix of the answer: its end
        (" answer: 12", 9),  # the sign is missing: the first character of the answer
        (" 0-4=-4;-4-8=", 13),  # no answer: the end
        ("", 0),
        (" <answer>-13</answer>", 11),
    ],
)
def test_reasoning_gym_first_error(arithmetic, completion, expected):
    problem = Problem("Calculate 0 - 4 - 8.", "-12", meta={"entry": {"answer": "-12", "metadata": {}}})
    assert arithmetic.first_error(completion, problem) == expected
    if expected is not None and expected < len(completion):
        assert completion[:expected] in (" 0-4=-4;-4-8=-1", " 0-4=-4;-4-8=-12; answer:-1", " answer:-1",
                                         " answer: ", " <answer>-1")  # fmt: skip
