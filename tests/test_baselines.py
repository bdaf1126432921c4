"""DAPO's pieces (dynamic sampling, overlong penalty) and Dr. GRPO, against hand-computed numbers."""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr.collect.dynamic_sampling import (
    EXTRA_OFFSET,
    DynamicSampling,
    extra_prompt_position,
    informative_groups,
)
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.objectives import loss_weights
from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.credit import DrGRPOCredit, GRPOCredit
from lightning_rlvr.rewards import OverlongPenalty
from lightning_rlvr.tasks.base import Task

G = 4


def fake_draw(correct_by_prompt: dict[str, int]):
    """A sampler whose prompt "p" yields ``correct_by_prompt[p]`` correct rollouts out of G."""
    calls = []

    def draw(problems: list[Problem]) -> Rollout:
        calls.append([p.prompt for p in problems])
        n = len(problems) * G
        rewards = torch.tensor([float(j < correct_by_prompt[p.prompt]) for p in problems for j in range(G)])
        length = torch.arange(n) % 3 + 2  # completions of 2-4 tokens
        ids = torch.arange(1, 6).repeat(n, 1)
        return Rollout(
            prompt_ids=torch.full((n, len(problems[0].prompt)), 7),
            prompt_mask=torch.ones(n, len(problems[0].prompt), dtype=torch.long),
            completion_ids=ids,
            completion_mask=(torch.arange(5) < length[:, None]).long(),
            group=torch.arange(len(problems)).repeat_interleave(G),
            problems=list(problems),
            completions=[f"{p.prompt}/{j}" for p in problems for j in range(G)],
            pad_id=0,
            eos_id=9,
            rewards=rewards,
            correct=rewards > 0.5,
            feedback=[""] * n,
        )

    return draw, calls


def problems(names: str) -> list[Problem]:
    return [Problem(prompt=c, answer="") for c in names]


def test_informative_groups():
    correct = torch.tensor([1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0], dtype=torch.bool)
    assert informative_groups(correct, torch.arange(3).repeat_interleave(4)).tolist() == [False, True, False]


def test_dynamic_sampling_fills_the_batch_with_informative_groups_only():
    # first batch: a (all right), b (mixed), c (all wrong); round 1: d, e mixed, f all wrong
    draw, calls = fake_draw({"a": 4, "b": 2, "c": 0, "d": 1, "e": 3, "f": 0})
    rollout, stats = DynamicSampling(max_rounds=3).collect(problems("abc"), draw, lambda k: problems("def"))
    assert [p.prompt for p in rollout.problems] == ["b", "d", "e"]
    assert len(calls) == 2 and stats["dynamic_rounds"] == 1.0
    assert stats["groups_kept_frac"] == pytest.approx(3 / 6)
    assert stats["dynamic_shortfall"] == 0.0
    assert informative_groups(rollout.rewards > 0.5, rollout.group).all()
    assert rollout.group.tolist() == [0] * G + [1] * G + [2] * G
    assert rollout.completions[:G] == [f"b/{j}" for j in range(G)]  # rows stay with their group
    # a group kept whole: the rewards of "e" are its own (3 correct)
    assert rollout.rewards[2 * G : 3 * G].tolist() == [1.0, 1.0, 1.0, 0.0]


def test_dynamic_sampling_stops_at_the_bound_and_says_so(caplog):
    draw, calls = fake_draw({"a": 4, "b": 0, "c": 2})
    sampler = DynamicSampling(max_rounds=2)
    rollout, stats = sampler.collect(problems("ab"), draw, lambda k: problems("ab"))
    assert len(calls) == 3  # the first draw + 2 extra rounds
    assert stats["dynamic_shortfall"] == 2.0 and len(rollout.problems) == 2
    assert "found 0 of 2 informative groups in 3 rounds" in caplog.text
    with pytest.raises(RLVRError, match="found 0 of 2 informative groups"):
        DynamicSampling(max_rounds=1, on_shortfall="error").collect(
            problems("ab"), draw, lambda k: problems("ab")
        )


class IndexTask(Task):
    """A task whose problem at stream position i says i (finite: ``n`` problems, cycled)."""

    def __init__(self, n: int | None) -> None:
        self.n = n

    def size(self, split: str) -> int | None:
        return self.n

    def problem(self, split: str, index: int) -> Problem:
        return Problem(prompt=str(index), answer="")


@pytest.mark.parametrize(("B", "rounds", "world"), [(1, 1, 1), (3, 2, 1), (4, 3, 2), (2, 5, 4)])
def test_extra_prompt_positions_are_distinct_deterministic_and_past_the_main_stream(B, rounds, world):
    steps = 50
    positions = [
        extra_prompt_position(step * world + rank, k, i, B, rounds)
        for step in range(steps)
        for rank in range(world)
        for k in range(1, rounds + 1)
        for i in range(B)
    ]
    assert len(set(positions)) == len(positions)  # no two extra draws share a position
    assert min(positions) == EXTRA_OFFSET and max(positions) == EXTRA_OFFSET + len(positions) - 1  # dense
    # generated task: the main stream (positions < steps * world * B) never serves an extra prompt
    main = {str(p) for p in range(steps * world * B)}
    generated = IndexTask(None)
    assert not main & {generated.train_problem(p).prompt for p in positions}
    # finite split of n: positions wrap, so extra prompts are ordinary problems of the split
    for n in (5, 64, 1000):
        extra = {IndexTask(n).train_problem(p).prompt for p in positions}
        assert extra <= {str(j) for j in range(n)}
    with pytest.raises(ValueError):
        extra_prompt_position(0, 0, 0, B, rounds)  # rounds count from 1
    with pytest.raises(ValueError):
        extra_prompt_position(0, rounds + 1, 0, B, rounds)
    with pytest.raises(ValueError):
        extra_prompt_position(0, 1, B, B, rounds)


def test_overlong_penalty_three_pieces_at_the_boundaries():
    shaper = OverlongPenalty(max_length=20, cache=4)
    lengths = torch.tensor([0, 16, 17, 18, 20, 21, 40])
    # <= 16: 0; (16, 20]: (16 - L) / 4; > 20: -1
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])
    torch.testing.assert_close(shaper.penalty(lengths), expected)
    torch.testing.assert_close(shaper(torch.ones(7), lengths), 1.0 + expected)
    with pytest.raises(ValueError):
        OverlongPenalty(max_length=4, cache=8)


def test_overlong_penalty_defaults_to_the_module_budget_given_at_call_time():
    shaper = OverlongPenalty(cache=4)  # max_length None: the module's max_new_tokens
    lengths = torch.tensor([0, 16, 18, 20, 21])
    for budget, expected in (
        (20, [0.0, 0.0, -0.5, -1.0, -1.0]),
        (24, [0.0, 0.0, 0.0, 0.0, -0.25]),  # ramp starts at 24 - 4 = 20
    ):
        torch.testing.assert_close(shaper(torch.zeros(5), lengths, budget), torch.tensor(expected))
    explicit = OverlongPenalty(max_length=20, cache=4)  # a fixed max_length wins over the budget
    torch.testing.assert_close(explicit(torch.zeros(5), lengths, 24), shaper(torch.zeros(5), lengths, 20))
    with pytest.raises(ValueError, match="max_new_tokens"):
        shaper.penalty(lengths)
    with pytest.raises(ValueError):
        shaper(torch.zeros(5), lengths, 3)  # cache 4 does not fit a budget of 3


def test_dr_grpo_advantages_and_constant_normaliser_by_hand():
    draw, _ = fake_draw({"x": 1})
    rollout = draw(problems("x"))  # rewards 1, 0, 0, 0; lengths 2, 3, 4, 2
    adv = DrGRPOCredit().assign(rollout, scorer=None).advantages  # [4, 5]
    expected_rows = [0.75, -0.25, -0.25, -0.25]
    for i, a in enumerate(expected_rows):
        n = int(rollout.completion_mask[i].sum())
        assert adv[i, :n].tolist() == [a] * n and adv[i, n:].abs().sum() == 0
    # constant normaliser: sum of token losses / (4 sequences * L_max 10)
    tok = torch.ones(4, 5)
    assert (
        tok * loss_weights(rollout.completion_mask, "constant", max_len=10)
    ).sum().item() == pytest.approx(11 / 40)
    grpo = GRPOCredit().assign(rollout, scorer=None).advantages
    assert grpo[0, 0].item() == pytest.approx(0.75 / 0.5, rel=1e-4)  # GRPO divides by the std (0.5)
