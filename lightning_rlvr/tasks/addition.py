"""Multi-digit addition with a digit-by-digit carry chain.

Prompt ``Q 347+285=``; worked solution ``" 7+5+0=12;4+8+1=13;3+2+1=06; answer:632"``:
one ``a+b+carry=SS`` step per digit, least significant first, then the answer.
Each problem needs ``digits`` dependent steps, so a policy must carry state
through its chain of thought, and a reward is only 1 when every carry is right.

Splits are disjoint by construction: a pair ``(a, b)`` belongs to ``test``,
``val`` or ``train`` by a hash of the pair and the seed; the ``index``-th
problem of a split is drawn from an RNG seeded by ``(seed, split, index)``.
"""

from __future__ import annotations

import random
import re

from ..core.arithmetic_steps import first_difference
from ..core.problem import SPLITS, Problem, Verdict, split_of
from .base import Task

_ANSWER = re.compile(r"answer:\s*(-?\d+)")


def addition_solution(a: int, b: int, digits: int) -> str:
    """The worked chain of thought for ``a + b``, ending with the answer."""
    steps, carry = [], 0
    for i in range(digits):
        da, db = (a // 10**i) % 10, (b // 10**i) % 10
        s = da + db + carry
        steps.append(f"{da}+{db}+{carry}={s:02d}")
        carry = s // 10
    return " " + ";".join(steps) + f"; answer:{a + b}"


def extract_answer(completion: str) -> str | None:
    """The number after the first ``answer:``, or None."""
    m = _ANSWER.search(completion)
    return m.group(1) if m else None


class AdditionTask(Task):
    """``digits``-digit addition with a worked carry chain.

    Args:
        digits: digits per operand (1 for tests, 3 for the quickstart).
        seed: fixes the split assignment and the problem streams.
        test_fraction: share of operand pairs reserved for ``test`` (the same again for ``val``).
    """

    def __init__(self, digits: int = 3, seed: int = 0, test_fraction: float = 0.1) -> None:
        if digits < 1:
            raise ValueError("digits must be >= 1")
        self.digits = digits
        self.seed = seed
        self.test_fraction = test_fraction
        self._lo = 0 if digits == 1 else 10 ** (digits - 1)
        self._hi = 10**digits - 1

    def problem(self, split: str, index: int) -> Problem:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        rng = random.Random(f"{self.seed}:{split}:{index}")
        while True:
            a, b = rng.randint(self._lo, self._hi), rng.randint(self._lo, self._hi)
            if split_of(f"{self.seed}:{a}:{b}", self.test_fraction) == split:
                break
        return Problem(
            prompt=self.prompt_template().format(question=f"{a}+{b}="),
            answer=str(a + b),
            solution=addition_solution(a, b, self.digits),
            meta={"a": a, "b": b},
        )

    def size(self, split: str) -> int | None:
        return None

    def prompt_template(self) -> str:
        return "Q {question}"

    def first_error(self, completion: str, problem: Problem) -> int | None:
        """Where a failed completion first departs from the worked carry chain (character offset).

        The task's step format ``da+db+c=SS;`` (least significant digit first, then
        ``; answer:<sum>``) admits exactly one correct derivation per problem: every digit,
        carry and partial sum is forced by the operands. So the first error of a completion
        is its longest common prefix with ``addition_solution(a, b)``: the first character
        that differs (a wrong digit, carry or sum, or a broken format), or ``len(completion)``
        when the completion is a proper prefix of the solution (it stopped too early).
        None for a correct completion.
        """
        if self.check(completion, problem).correct:
            return None
        reference = addition_solution(problem.meta["a"], problem.meta["b"], self.digits)
        return first_difference(completion, reference)

    def extract_answer(self, completion: str) -> str | None:
        """The number after ``answer:`` as a canonical integer (``"042"`` and ``"42"`` vote together)."""
        got = extract_answer(completion)
        return None if got is None else str(int(got))

    def check(self, completion: str, problem: Problem) -> Verdict:
        got = extract_answer(completion)
        if got is None:
            return Verdict(0.0, "no 'answer:' found")
        if int(got) == int(problem.answer):
            return Verdict(1.0, "correct")
        return Verdict(0.0, f"wrong answer {got}")
