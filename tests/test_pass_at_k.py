"""pass@k against its closed form; maj@k on hand-made votes (ties, no answers, k = 1)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_rlvr.pass_at_k import MajorityAtK, PassAtK, majority_answer, majority_correct, pass_at_k


@pytest.mark.parametrize(
    "n,c,k", [(4, 0, 1), (4, 1, 1), (4, 1, 2), (8, 3, 4), (8, 7, 2), (10, 10, 5), (16, 2, 8)]
)
def test_pass_at_k_matches_binomial_closed_form(n, c, k):
    expected = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_k_larger_than_samples_is_an_error():
    with pytest.raises(ValueError, match="at least 4 samples"):
        pass_at_k(2, 1, 4)


def test_metric_averages_over_prompts():
    metric = PassAtK(k=2)
    metric.update(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    metric.update(torch.tensor([[1.0, 1.0, 1.0, 1.0]]))
    expected = ((1 - math.comb(3, 2) / math.comb(4, 2)) + 0.0 + 1.0) / 3
    assert metric.compute().item() == pytest.approx(expected, abs=1e-6)


# maj@k: hand-made prompts (answers, correctness) -> solved?
MAJORITY_CASES = [
    (["4", "4", "5"], [1, 1, 0], True),  # clear majority, correct
    (["5", "4", "5"], [0, 1, 0], False),  # clear majority, wrong (a correct sample does not help)
    (["5", "4", "4", "5"], [0, 1, 1, 0], False),  # 2-2 tie: "5" occurs first
    (["4", "5", "5", "4"], [1, 0, 0, 1], True),  # 2-2 tie: "4" occurs first
    ([None, "7", None, None], [0, 1, 0, 0], True),  # no-answer samples do not vote
    ([None, None, None], [0, 0, 0], False),  # nobody answers: unsolved
    ([None, None], [1, 1], False),  # even if a verifier accepted them
    (["3"], [1], True),  # k = 1: the single sample
    (["3"], [0], False),
]


@pytest.mark.parametrize("answers,correct,solved", MAJORITY_CASES)
def test_majority_vote_per_prompt(answers, correct, solved):
    assert majority_correct(answers, [bool(c) for c in correct]) is solved
    metric = MajorityAtK(k=len(answers))
    metric.update([answers], torch.tensor([correct], dtype=torch.float32))
    assert metric.compute().item() == float(solved)


def test_majority_answer_ties_and_empty():
    assert majority_answer(["b", "a", "a", "b", "c"]) == "b"
    assert majority_answer(["c", "a", "b"]) == "c"
    assert majority_answer([None, None]) is None
    assert majority_answer([]) is None


def test_maj_at_k_uses_the_first_k_samples_and_averages_over_prompts():
    answers = [["1", "2", "2", "2"], ["9", "9", "8", "8"], [None, None, None, None]]
    correct = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0], [0.0, 0, 0, 0]])
    k1, k2, k4 = MajorityAtK(1), MajorityAtK(2), MajorityAtK(4)
    for metric in (k1, k2, k4):
        metric.update(answers, correct)
    assert k1.compute().item() == pytest.approx(2 / 3)  # first samples "1" (right), "9" (right), none
    assert k2.compute().item() == pytest.approx(2 / 3)  # "1"-"2" tie -> "1"; "9" twice
    assert k4.compute().item() == pytest.approx(1 / 3)  # "2" wins (wrong); "9"-"8" tie -> "9" (right)
    k4.update([["5"] * 4], torch.ones(1, 4))
    assert k4.compute().item() == pytest.approx(2 / 4)


def test_maj_at_k_needs_k_samples():
    with pytest.raises(ValueError, match="at least 4 samples"):
        MajorityAtK(4).update([["1", "2"]], torch.ones(1, 2))
