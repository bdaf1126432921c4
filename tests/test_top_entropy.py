"""Top-entropy tokens: which tokens keep their advantage, by hand and through the scorer."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_rlvr.core.objectives import group_advantages
from lightning_rlvr.credit.top_entropy import TopEntropyCredit
from tests.test_teacher_context import EOS, make_rollout, make_scorer, rule_logp


def test_top_fifth_of_ten_valid_tokens_by_hand():
    entropy = torch.tensor([[0.0, 1, 2, 3, 4, 99], [5, 6, 7, 8, 9, 99]])  # 99: padding, never counted
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0]])
    keep, tau = TopEntropyCredit(top_quantile=0.2).select(entropy, mask)
    assert tau == pytest.approx(7.2)  # 0.8 quantile of 0..9, linear interpolation
    assert keep.nonzero().tolist() == [[1, 3], [1, 4]]
    keep, tau = TopEntropyCredit(top_quantile=0.5).select(entropy, mask)
    assert tau == pytest.approx(4.5) and int(keep.sum()) == 5 and not bool(keep[:, 5].any())
    keep, _ = TopEntropyCredit(top_quantile=1.0).select(entropy, mask)
    assert torch.equal(keep, mask.bool())  # q = 1 is GRPO


@pytest.mark.parametrize("q", [0.05, 0.2, 0.6])
def test_ties_are_kept_and_empty_or_nan_entropies_give_finite_answers(q):
    credit = TopEntropyCredit(top_quantile=q)
    same = torch.full((3, 4), 0.7)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # incl. a one-token and an empty row
    keep, tau = credit.select(same, mask)
    assert tau == pytest.approx(0.7) and torch.equal(keep, mask.bool())  # all equal: every token kept
    keep, tau = credit.select(same, torch.zeros_like(mask))
    assert math.isnan(tau) and not bool(keep.any())
    nan = torch.tensor([[float("nan"), 1.0, 2.0, 3.0]])
    keep, tau = credit.select(nan, torch.ones(1, 4))
    assert not bool(keep[0, 0]) and bool(keep[0, 3]) and math.isfinite(tau)


def test_assign_uses_the_rollout_time_entropies_from_the_scorer():
    prompts = [[3, 4, 5]] * 4 + [[6, 2]] * 4
    completions = [[2, 7, 3, EOS], [5, 5, EOS], [8, 2, 2, 4, EOS], [4, 6]] + [[3, EOS], [7], [], [2, 2, EOS]]
    rewards = [1, 0, 0, 1] + [0, 0, 0, 0]
    rollout = make_rollout(prompts, completions, [0] * 4 + [1] * 4, rewards)
    out = TopEntropyCredit(top_quantile=0.25).assign(rollout, make_scorer(rollout))
    # entropies by hand from FakeLM's rule, then the 0.75 quantile of the 17 valid tokens
    ent = {}
    for i, comp in enumerate(completions):
        for t in range(len(comp)):
            lp = rule_logp(prompts[i] + comp[:t])
            ent[(i, t)] = float(-(lp.exp() * lp).sum())
    values = sorted(ent.values())
    pos = 0.75 * (len(values) - 1)
    tau = values[math.floor(pos)] + (values[math.ceil(pos)] - values[math.floor(pos)]) * (
        pos - math.floor(pos)
    )
    assert out.metrics["entropy_threshold"] == pytest.approx(tau, rel=1e-5)
    adv = group_advantages(rollout.rewards, rollout.group)
    kept = 0
    for (i, t), h in ent.items():
        expected = float(adv[i]) if h >= tau else 0.0
        assert float(out.advantages[i, t]) == pytest.approx(expected, abs=1e-6), (i, t)
        kept += h >= tau
    assert out.metrics["frac_tokens_kept"] == pytest.approx(kept / len(ent))
    assert 0 < kept <= math.ceil(0.25 * len(ent)) + 1
    assert out.advantages[4:].abs().sum() == 0  # an all-equal group has no signal at any token
    assert (out.advantages * (1 - rollout.completion_mask)).abs().sum() == 0  # padding stays 0


def test_bad_quantile_is_rejected():
    for q in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="top_quantile"):
            TopEntropyCredit(top_quantile=q)
