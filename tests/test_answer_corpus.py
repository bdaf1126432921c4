"""Math answers read as math-verify reads them: a corpus of phrasings, each checked against math-verify.

Every phrasing (final sentence, trailing prose, units, markers, ``\\boxed``, LaTeX) holds every written
answer (digit grouping, negatives with the unicode minus, fractions, decimals). The value a completion
must score as is math-verify's own reading of the written answer, taken at test time (``parse`` of its
ASCII form: math-verify itself reads neither the unicode minus nor thin spaces); a wrong gold scores 0.
"""

from __future__ import annotations

import pytest
from math_verify import parse, verify

from lightning_rlvr.rewards.math import math_reward

# How answers are written, each with its ASCII form when it has another one.
ANSWERS = [
    "18",
    "1000",
    "1,000",
    "1 000",
    "1\u2009000",  # thin space
    "1\u202f000",  # narrow no-break space
    "12 345 678",
    "1,234.5",
    "-3",
    "\u22123",  # unicode minus
    "3.25",
    "-0.75",
    "3/4",
    "\\frac{3}{4}",
    "-\\frac{1}{2}",
    "1\\,000",  # LaTeX thin space
    "2\\sqrt{3}",
]
ASCII = {"\u2009": " ", "\u202f": " ", "\u2212": "-", "\\,": " "}
# How answers are stated; {x} is the answer.
PHRASINGS = [
    "The answer is {x}.",
    "The answer is {x}. I used 3 steps to get there.",
    "The answer is {x}? Let me check with 7 more examples.",
    "After 4 tries, the final answer is: {x}",
    "So the answer is {x} dollars.",
    "The answer is {x} km. That took 2 hours.",
    "Answer: {x}\nThat was easy, 2 + 2 = 4.",
    "**Final Answer:** {x}",
    "Final Answer: The final answer is {x}. I hope it is correct.",
    "First 5 + 6 = 11.\n#### {x}",
    "We get 9 first.\nThe answer is $\\boxed{{{x}}}$. Done in 2 steps.",
    "<answer>{x}</answer>",
]


def _ascii(text: str) -> str:
    for old, new in ASCII.items():
        text = text.replace(old, new)
    return text


def _reading(answer: str) -> list:
    """math-verify's reading of a written answer (LaTeX in ``$...$``, plain text as is)."""
    text = _ascii(answer)
    return parse(f"${text}$" if "\\" in text else text)


def _gold(answer: str) -> str:
    return _ascii(answer).replace(" ", "") if "\\" not in answer else _ascii(answer)


@pytest.fixture(scope="module")
def readings():
    return {answer: _reading(answer) for answer in ANSWERS}


def _golds(answer: str, readings: dict) -> list[str]:
    """The answer's own gold, the other ways of writing its value, and the next two values (wrong golds)."""
    i = ANSWERS.index(answer)
    same = [a for a in ANSWERS if verify(readings[answer], readings[a])]
    others = [a for a in ANSWERS[i + 1 :] + ANSWERS[:i] if a not in same][:2]
    return same + others


@pytest.mark.parametrize("phrasing", PHRASINGS)
def test_every_phrasing_of_every_answer_scores_as_math_verify_reads_it(phrasing, readings):
    for answer, reading in readings.items():
        assert reading, f"math-verify reads nothing in {answer!r}"
        completion = phrasing.format(x=answer)
        for gold in _golds(answer, readings):
            same = bool(verify(reading, readings[gold]))
            reward, feedback = math_reward(completion, _gold(gold))
            assert reward == float(same), (completion, gold, feedback)


def test_the_corpus_holds_answers_math_verify_reads_alike_and_apart():
    values = {answer: _reading(answer) for answer in ANSWERS}
    assert verify(values["1 000"], values["1,000"]) and verify(values["1000"], values["1\u2009000"])
    assert verify(values["-3"], values["\u22123"]) and verify(values["3/4"], values["\\frac{3}{4}"])
    assert not verify(values["18"], values["1000"]) and not verify(values["-3"], values["3.25"])
