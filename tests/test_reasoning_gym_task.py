"""reasoning-gym: any dataset by name and config, disjoint deterministic splits, its own scorer."""

from __future__ import annotations

import pytest

from lightning_rlvr.errors import RLVRError
from lightning_rlvr.tasks import ReasoningGymTask, safe_check
from lightning_rlvr.tasks.reasoning_gym import extract_answer


@pytest.fixture(scope="module")
def legs():
    return ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=3)


def test_reference_answers_score_one_and_wrong_ones_zero(legs):
    for i in range(10):
        p = legs.problem("train", i)
        assert legs.check(p.solution, p).reward == 1.0
        assert legs.check(f"<answer>{int(p.answer) + 1}</answer>", p).reward == 0.0
        assert legs.check(f"thinking... answer: {p.answer}", p).reward == 1.0


def test_splits_are_deterministic_and_disjoint(legs):
    again = ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=3)
    assert [legs.problem("test", i).prompt for i in range(10)] == [
        again.problem("test", i).prompt for i in range(10)
    ]
    qs = {s: {legs.problem(s, i).prompt for i in range(150)} for s in ("train", "val", "test")}
    assert not qs["train"] & qs["test"] and not qs["train"] & qs["val"] and not qs["val"] & qs["test"]
    other = ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=4)
    assert [other.problem("test", i).prompt for i in range(10)] != [
        legs.problem("test", i).prompt for i in range(10)
    ]


def test_another_dataset_by_name_and_config():
    task = ReasoningGymTask(
        "basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    )
    p = task.problem("val", 0)
    assert task.check(p.solution, p).reward == 1.0


def test_unknown_dataset_and_bad_config_are_clear_errors():
    with pytest.raises(RLVRError, match="unknown reasoning-gym dataset 'no_such'"):
        ReasoningGymTask("no_such")
    with pytest.raises(RLVRError, match="rejected config"):
        ReasoningGymTask("leg_counting", {"no_such_field": 1})


@pytest.mark.parametrize("completion", ["", "<answer>", "<answer></answer>", "answer:", "🙂" * 50, None])
def test_verifier_never_raises_on_malformed_completions(legs, completion):
    verdict, _ = safe_check(legs, completion, legs.problem("train", 0))
    assert verdict.reward == 0.0


def test_answer_extraction():
    assert extract_answer("a <answer>1</answer> b <answer> 2 </answer>") == "2"
    assert extract_answer("so answer: 7\nmore") == "7"
    assert extract_answer("nothing") is None
