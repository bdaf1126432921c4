"""The policy-gradient objective, checked against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_rlvr.objectives import (
    aggregate,
    group_advantages,
    kl_k3,
    loss_weights,
    zero_std_groups,
)


def test_grpo_advantages_match_hand_computation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(rewards, group, eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(1/3); (1 - 0.5) / 0.57735 = 0.866
    s = math.sqrt(1 / 3)
    expected = torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0])
    torch.testing.assert_close(adv, expected)


def test_all_equal_group_gives_zero_advantage_and_no_nan():
    for value in (0.0, 1.0, 0.37):
        rewards = torch.full((4,), value)
        adv = group_advantages(rewards, torch.zeros(4, dtype=torch.long), eps=0.0)
        assert torch.equal(adv, torch.zeros(4))
    assert zero_std_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1])).tolist() == [
        True,
        False,
    ]


def test_dr_grpo_advantages_are_centred_not_scaled():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = group_advantages(rewards, torch.zeros(4, dtype=torch.long), scale=False)
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_single_rollout_groups_are_zero_not_nan():
    adv = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    assert torch.equal(adv, torch.zeros(2))


# token losses [2, 4]: row 0 has 2 tokens, row 1 has 4
TOK = torch.tensor([[1.0, 3.0, 100.0, 100.0], [2.0, 2.0, 2.0, 6.0]])
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])


def test_seq_mean_aggregation():
    # mean of per-sequence means: ((1+3)/2 + (2+2+2+6)/4) / 2 = (2 + 3) / 2
    assert aggregate(TOK, MASK, "seq_mean", max_len=4).item() == 2.5


def test_token_mean_aggregation():
    # all 6 real tokens: (1+3+2+2+2+6) / 6
    assert aggregate(TOK, MASK, "token_mean", max_len=4).item() == pytest.approx(16 / 6)


def test_constant_aggregation():
    # Dr. GRPO: token sum over (sequences * L_max) = 16 / (2 * 8)
    assert aggregate(TOK, MASK, "constant", max_len=8).item() == 1.0


def test_weights_split_across_micro_batches_sum_to_the_whole():
    for mode in ("seq_mean", "token_mean", "constant"):
        w = loss_weights(MASK, mode, 4)
        parts = (TOK[:1] * w[:1]).sum() + (TOK[1:] * w[1:]).sum()
        torch.testing.assert_close(parts, aggregate(TOK, MASK, mode, 4))


def test_k3_is_zero_at_equality_and_positive_elsewhere():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    assert torch.equal(kl_k3(logp, logp), torch.zeros(3))
    ref = torch.tensor([-1.5, -1.0, -0.5])
    d = ref - logp
    torch.testing.assert_close(kl_k3(logp, ref), torch.exp(d) - d - 1)
    assert (kl_k3(logp, ref)[:2] > 0).all()
