"""The privileged-context probe (``benchmarks/reads_context.py``) on scripted models a human can check."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from lightning_rlvr.core.problem import Problem

_spec = importlib.util.spec_from_file_location(
    "bench_reads_context", Path(__file__).resolve().parents[1] / "benchmarks" / "reads_context.py"
)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # its `common` import
rc = sys.modules["bench_reads_context"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rc)

PROBLEMS = [
    Problem(prompt=f"What is {a} + {b}?", answer=str(a + b)) for a, b in [(1, 2), (5, 9), (30, 4), (7, 7)]
]


def extract(text: str) -> str | None:
    found = re.findall(r"-?\d+", text)
    return found[-1] if found else None


def scripted(reader: bool, solves: set[str]):
    """A fake ``generate``: a reader answers with the number its context states; otherwise it answers
    the prompts in ``solves`` right and the others wrong (by 1)."""

    def generate(problems, group_size=1, greedy=True):
        out = []
        for p in problems:
            told = re.search(r"(?:answer is|sum is) (-?\d+)", p.prompt)
            a, b = map(int, re.findall(r"\d+", p.prompt.split("?")[0]))
            own = str(a + b) if p.prompt.split("\n")[0] in solves else str(a + b + 1)
            text = told.group(1) if reader and told else own
            out.append([f"The sum is {text}."] * group_size)
        return out

    return generate


def table(rows):
    return {r[0]: r for r in rows}


def test_a_model_that_reads_copies_what_it_is_told_right_or_wrong():
    solves = {PROBLEMS[0].prompt}
    rows = table(rc.probe(scripted(True, solves), extract, PROBLEMS, samples=2, seed=0))
    assert rows["plain"][2] == "0.250"
    assert rows["answer"][2].startswith("1.000") and rows["answer"][3] == "1.000"
    assert rows["answer"][4].startswith("+3 / -0")
    assert rows["wrong"][2].startswith("0.000") and rows["wrong"][3] == "1.000"  # told wrong, says wrong
    assert rows["wrong"][4].startswith("+0 / -1")
    # only prompt 0 has a correct sample to serve as a peer
    assert rows["peer"][1] == 1 and rows["peer"][2].startswith("1.000")


def test_a_model_that_ignores_the_context_scores_as_it_does_without_it():
    solves = {PROBLEMS[0].prompt, PROBLEMS[2].prompt}
    rows = table(rc.probe(scripted(False, solves), extract, PROBLEMS, samples=2, seed=0))
    for name in ("answer", "wrong"):
        assert rows[name][2] == "0.500 (plain 0.500)"
        assert rows[name][4] == "+0 / -0, p = 1"
    assert rows["wrong"][3] == "0.000"  # never says the wrong number it was given
    assert rows["peer"][1] == 2


def test_the_wrong_answer_is_never_the_answer():
    for answer in ["0", "14", "-3", "99"]:
        assert all(rc.wrong_answer(answer, i) != answer for i in range(20))
    assert rc.wrong_answer("x", 0) != "x"


@pytest.mark.parametrize(("wins", "losses", "p"), [(0, 0, 1.0), (3, 0, 0.25), (0, 5, 1 / 16), (2, 2, 1.0)])
def test_the_sign_test_matches_the_binomial_by_hand(wins, losses, p):
    assert math.isclose(rc.sign_test_p(wins, losses), p)


def test_answers_compare_as_numbers():
    assert rc.same("14.0", "14") and not rc.same("15", "14") and not rc.same(None, "14")
    assert rc.same(" a ", "a")


def test_the_divergence_is_split_by_digit_tokens_and_correctness_as_by_hand():
    divergences = [
        (torch.tensor([0.0, 2.0]), [False, True], False),  # a wrong completion: all its KL on its digit
        (torch.tensor([1.0]), [False], True),  # a correct one without a digit token
    ]
    rows = {r[0]: r[1:] for r in rc.where_divergence_falls(divergences)}
    assert rows["correct"] == [1, 1, "0.000", "1.000", "0.000", "0.000"]
    assert rows["wrong"] == [1, 2, "2.000", "0.000", "0.500", "1.000"]
    assert rows["all"] == [2, 3, "2.000", "0.500", "0.333", "0.667"]
    assert rc.where_divergence_falls([(torch.zeros(2), [True, False], True)])[0][-1] == "-"  # no KL at all
