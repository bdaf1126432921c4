"""KTAE: contingency-table statistics and key-token advantages on hand-made groups."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lightning_rlvr.core.objectives import group_advantages
from lightning_rlvr.credit.ktae import KTAECredit, fisher_exact_p, information_gain
from tests.rollouts import rollout_from_ids

EOS, PAD = 1, 0


def fisher_by_enumeration(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value from every table with the same margins (plain Python, exact fractions)."""
    n, row, col = a + b + c + d, a + b, a + c

    def prob(k: int) -> float:
        return math.comb(col, k) * math.comb(n - col, row - k) / math.comb(n, row)

    observed = prob(a)
    ks = range(max(0, row + col - n), min(row, col) + 1)
    return min(1.0, sum(prob(k) for k in ks if prob(k) <= observed * (1 + 1e-7)))


def test_fisher_p_values_by_hand_and_by_enumeration():
    tables = torch.tensor([[2, 0, 0, 2], [1, 1, 1, 1], [3, 0, 0, 3], [0, 2, 2, 0], [1, 0, 0, 0]])
    p = fisher_exact_p(*tables.T)
    assert p.tolist() == pytest.approx([1 / 3, 1.0, 0.1, 1 / 3, 1.0])
    every = torch.tensor(list(itertools.product(range(5), repeat=4)))  # all tables with cells 0..4
    every = every[every.sum(1) > 0]
    expected = [fisher_by_enumeration(*t) for t in every.tolist()]
    torch.testing.assert_close(fisher_exact_p(*every.T), torch.tensor(expected, dtype=torch.float64))


def test_information_gain_by_hand():
    t = torch.tensor([[2, 0, 0, 2], [1, 1, 1, 1], [2, 1, 0, 1], [3, 3, 0, 0], [0, 0, 0, 0]])
    ig = information_gain(*t.T)
    h3 = -(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3)
    assert ig.tolist() == pytest.approx([1.0, 0.0, 1 - 0.75 * h3, 0.0, 0.0])


# two correct and two incorrect rollouts: 5 only in correct ones, 4 only in incorrect ones, 2 and 3 in both
COMPLETIONS = [[5, 2, EOS], [5, 3, EOS], [4, 2, EOS], [4, 3, EOS]]
REWARDS = [1.0, 1.0, 0.0, 0.0]


def key_by_hand(sign: float, tf_contrast: float = 0.0) -> float:
    """K of a token with table [[2, 0], [0, 2]] (sign +1) or its mirror (sign -1), whose tf contrast
    has magnitude ``tf_contrast``: p = 1/3, IG = 1 bit, |h| = pi / 2."""
    s = (math.exp(-2 / 3) + 1.0) * (math.pi / 2 + tf_contrast) / 2
    return sign * (2 / (1 + math.exp(-min(s, 700.0))) - 1)


def test_key_token_advantages_by_hand_without_the_tf_term():
    rollout = rollout_from_ids([[7, 8]], COMPLETIONS, pad=PAD, eos=EOS, group_size=4, rewards=REWARDS)
    out = KTAECredit(tf_weight=0.0).assign(rollout, None)
    adv = group_advantages(rollout.rewards, rollout.group)  # +-0.866 (std over 4 rows, unbiased)
    k5 = key_by_hand(+1.0)
    expected = torch.tensor(
        [
            [adv[0] + k5, adv[0], adv[0]],
            [adv[1] + k5, adv[1], adv[1]],
            [adv[2] - k5, adv[2], adv[2]],  # token 4: the mirror table, the opposite sign
            [adv[3] - k5, adv[3], adv[3]],
        ]
    )
    torch.testing.assert_close(out.advantages, expected)
    assert out.metrics["frac_mixed_groups"] == 1.0
    assert out.metrics["key_abs_mean"] == pytest.approx(4 * k5 / 12, rel=1e-6)


def test_key_token_value_with_the_bm25_term_by_hand():
    rollout = rollout_from_ids([[7, 8]], COMPLETIONS, pad=PAD, eos=EOS, group_size=4, rewards=REWARDS)
    key = KTAECredit().key_values(rollout.completion_ids, rollout.completion_mask, rollout.correct, EOS)
    # token 5: 2 occurrences in 6 correct tokens, none in 6 incorrect ones; equal lengths: k = k1 = 2
    tf_c = (2 / 6) * 3 / (2 / 6 + 2)
    assert float(key[0, 0]) == pytest.approx(key_by_hand(+1.0, tf_c / 1e-5), rel=1e-9)
    assert float(key[2, 0]) == pytest.approx(key_by_hand(-1.0, tf_c / 1e-5), rel=1e-9)
    assert key[:, 1:].abs().max() == 0  # shared tokens and EOS: p = 1, IG = 0, h = 0


def test_unequal_lengths_change_the_bm25_normalisation():
    completions = [[5, 2, 2, 2, EOS], [5, EOS], [6, 2, EOS], [6, EOS]]
    rollout = rollout_from_ids([[7]], completions, pad=PAD, eos=EOS, group_size=4, rewards=REWARDS)
    credit = KTAECredit(tf_weight=1.0, tf_eps=1.0)  # eps 1 keeps the ratios moderate
    key = credit.key_values(rollout.completion_ids, rollout.completion_mask, rollout.correct, EOS)
    # token 2: in one correct (3 times) and one incorrect rollout (once): a=1, b=1 -> p = 1, IG = 0: K = 0
    assert float(key[0, 1]) == 0.0
    # token 5: correct only, 2 of L_c = 7 tokens; L_w = 5, L = 6
    len_c, len_w, avg = 7, 5, 6
    tf_c = (2 / len_c) * 3 / (2 / len_c + 2 * (0.5 + 0.5 * len_c / avg))
    tf_w = (2 / len_w) * 3 / (2 / len_w + 2 * (0.5 + 0.5 * len_w / avg))  # token 6: incorrect only
    assert float(key[0, 0]) == pytest.approx(key_by_hand(+1.0, tf_c / 1.0), rel=1e-9)
    assert float(key[2, 0]) == pytest.approx(key_by_hand(-1.0, tf_w / 1.0), rel=1e-9)


def test_uninformative_groups_and_degenerate_completions_get_plain_grpo():
    prompts = [[3], [4], [5]]
    completions = (
        [[5, EOS], [4, EOS], [2]] + [[5, EOS], [], [EOS]] + [[9], [6, EOS], [6, 6, 6]]
    )  # all correct; incl. empty, EOS-only, one-token; a mixed group with empty-free rows
    rewards = [1.0, 1.0, 1.0] + [0.0, 1.0, 0.0] + [0.0, 0.0, 0.0]
    rollout = rollout_from_ids(prompts, completions, pad=PAD, eos=EOS, group_size=3, rewards=rewards)
    out = KTAECredit().assign(rollout, None)
    assert torch.isfinite(out.advantages).all()
    assert out.advantages[:3].abs().sum() == 0 and out.advantages[6:].abs().sum() == 0  # all-equal groups
    # the mixed group: the only correct rollout is empty, so no token is ever in a correct rollout
    adv = group_advantages(rollout.rewards, rollout.group)
    key = out.advantages[3:6] - adv[3:6, None] * rollout.completion_mask[3:6]
    assert float(key[1].abs().sum()) == 0.0  # empty completion: nothing
    assert float(key[2, 0]) == 0.0  # EOS excluded
    assert float(key[0, 0]) < 0  # 5 appears in 1 of 2 incorrect rollouts and no correct one
    assert out.metrics["frac_mixed_groups"] == pytest.approx(1 / 3)
    single = rollout_from_ids([[3]], [[5, EOS]], pad=PAD, eos=EOS, group_size=1, rewards=[1.0])
    assert KTAECredit().assign(single, None).advantages.abs().sum() == 0  # a group of one


def test_bad_weights_are_rejected():
    with pytest.raises(ValueError):
        KTAECredit(fisher_weight=0.0, ig_weight=0.0)
    with pytest.raises(ValueError):
        KTAECredit(tf_eps=0.0)
