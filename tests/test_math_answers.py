"""Hand-graded answer pairs (GSM8K- and MATH-style): multi-part answers are compared whole.

Each row is (model's final answer, gold answer, correct?). Every pair is checked through the
boxed path, the ``answer:`` path and against a gold written as a GSM8K ``####`` cell or a MATH
``\\boxed{}`` solution, so no path can fall back to "the last number".
"""

from __future__ import annotations

import pytest

from lightning_rlvr.rewards.math import drop_thousands_separators, math_equal, math_reward, trailing_list

PAIRS = [
    # ordered pairs / open intervals: both parts count, order counts
    ("(3, 5)", "(3, 5)", True),
    ("(3,5)", "(3, 5)", True),
    ("\\left(3, 5\\right)", "(3, 5)", True),
    ("(1, 5)", "(3, 5)", False),
    ("(3, 1)", "(3, 5)", False),
    ("(5, 3)", "(3, 5)", False),
    ("5", "(3, 5)", False),
    ("(3, 5, 7)", "(3, 5)", False),
    ("(-1, 2)", "(-1, 2)", True),
    ("(1, 2)", "(-1, 2)", False),
    ("(\\frac{1}{2}, 3)", "(0.5, 3)", True),
    ("(\\frac{1}{3}, 3)", "(0.5, 3)", False),
    # tuples of three
    ("(1, 2, 3)", "(1, 2, 3)", True),
    ("(3, 2, 1)", "(1, 2, 3)", False),
    ("(1, 2, 4)", "(1, 2, 3)", False),
    # closed and half-open intervals: brackets count
    ("[1, 5]", "[1, 5]", True),
    ("[1, 5]", "[3, 5]", False),
    ("(1, 5]", "(1, 5]", True),
    ("(1, 5)", "(1, 5]", False),
    ("[1, 5]", "(1, 5)", False),
    ("(-\\infty, 3)", "(-\\infty, 3)", True),
    ("(-\\infty, 3]", "(-\\infty, 3)", False),
    ("(-\\infty, 4)", "(-\\infty, 3)", False),
    ("x \\in (1, 5)", "(1, 5)", True),
    # bare lists are unordered sets (math-verify's reading): members count, order does not
    ("3, 5", "3, 5", True),
    ("5, 3", "3, 5", True),
    ("1, 5", "3, 5", False),
    ("2, 3, 5", "3, 5", False),
    ("3", "3, 5", False),
    ("5", "3, 5", False),
    ("-2, 2", "2, -2", True),
    ("2, 2", "2, -2", False),
    ("1, 5", "1,5", True),
    ("15", "1, 5", False),
    # braced sets
    ("\\{1, 2\\}", "\\{1, 2\\}", True),
    ("\\{2, 1\\}", "\\{1, 2\\}", True),
    ("\\{1, 3\\}", "\\{1, 2\\}", False),
    ("\\{1, 2, 3\\}", "\\{1, 2\\}", False),
    ("\\{2\\}", "\\{1, 2\\}", False),
    # single numbers: thousands separators, units, negatives, decimals, fractions
    ("1,000", "1000", True),
    ("1000", "1,000", True),
    ("1,000,000", "1000000", True),
    ("1,000", "1", False),
    ("1,000", "0", False),
    ("18 dollars", "18", True),
    ("\\$18", "18", True),
    ("\\$18.00", "18", True),
    ("5\\text{ cm}", "5", True),
    ("6\\text{ cm}", "5", False),
    ("-3", "-3", True),
    ("3", "-3", False),
    ("-3", "3", False),
    ("-\\frac{1}{2}", "-0.5", True),
    ("\\frac{1}{2}", "-0.5", False),
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{1}{3}", "\\frac{1}{2}", False),
    ("\\dfrac{3}{4}", "0.75", True),
    ("12", "1.2", False),
    ("0.1", "0.1", True),
    ("0.10", "0.1", True),
    ("2\\sqrt{3}", "2\\sqrt{3}", True),
    ("2", "2\\sqrt{3}", False),
    ("2x", "2", False),
    ("2x + 1", "1", False),
    ("x = 2", "2", True),
    ("x = 3", "2", False),
    ("\\pi/2", "\\frac{\\pi}{2}", True),
    # text answers: compared as text, not as a product of letters
    ("\\text{Monday}", "\\text{Monday}", True),
    ("Monday", "\\text{Monday}", True),
    ("\\text{Mondya}", "\\text{Monday}", False),
    ("Mondya", "Monday", False),
    ("Tuesday", "Monday", False),
]


def _gold_forms(gold: str) -> list[str]:
    return [gold, f"The answer is $\\boxed{{{gold}}}$."] + ([] if "\\" in gold else [f"work\n#### {gold}"])


@pytest.mark.parametrize("predicted, gold, correct", PAIRS)
def test_hand_graded_pairs(predicted, gold, correct):
    assert math_equal(predicted, gold) is correct
    for cell in _gold_forms(gold):
        assert math_reward(f"so \\boxed{{{predicted}}}", cell)[0] == float(correct), cell
        assert math_reward(f"work\nanswer: {predicted}", cell)[0] == float(correct), cell


@pytest.mark.parametrize(
    "completion, gold, reward",
    [
        ("The roots are 3, 5", "3, 5", 1.0),
        ("The roots are 5, 3", "3, 5", 1.0),
        ("I get 1, 5", "3, 5", 0.0),
        ("I get 2, 3, 5", "3, 5", 0.0),
        ("I get 2, 3, 5", "5", 0.0),
        ("the point (1, 5)", "(3, 5)", 0.0),
        ("the point (3, 5)", "(3, 5)", 1.0),
        ("the point (1, 5)", "5", 0.0),
        ("it costs 1,000 dollars", "1000", 1.0),
        ("it costs 1,000", "0", 0.0),
        ("I get 0.5 no wait 3", "3", 1.0),
        ("from 3, 4 we get 7", "7", 1.0),
    ],
)
def test_free_text_lists_are_read_whole(completion, gold, reward):
    assert math_reward(completion, gold)[0] == reward


def test_trailing_list_and_thousands_separators():
    assert trailing_list("so x is 1, 5") == "1, 5"
    assert trailing_list("so (x, y) = (1, -2).") == "(1, -2)"
    assert trailing_list("total 1,000") is None
    assert trailing_list("from 3, 4 we get 7") is None
    assert (
        drop_thousands_separators("1,234,567 and 1,5 and 1, 500 and 1,0000")
        == "1234567 and 1,5 and 1, 500 and 1,0000"
    )
