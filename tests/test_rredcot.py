"""RREDCoT: segmentation, self-estimated segment values and reward redistribution, on hand-built cases.

The fake policy below makes the probability of the reference answer a known function
of the context: the answer token's logit is -2, +6 once a ``*`` has appeared ("the
decisive step"), -8 once a ``-`` has appeared ("the step that ruins it"); every other
logit is 0. So V(s_k) = p(logit) = e^x / (e^x + 23) can be computed by hand for any prefix.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import completion_mask_from_ids, left_pad
from lightning_rlvr.credit.rredcot import (
    DEFAULT_KEYWORDS,
    RREDCoTCredit,
    candidate_boundaries,
    redistribute,
    select_boundaries,
)
from lightning_rlvr.models import build_tiny_tokenizer
from lightning_rlvr.scoring.scorer import Scorer

TOK = build_tiny_tokenizer()
V = len(TOK)


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False)["input_ids"]


ANS, STAR, MINUS, SEMI = ids("7")[0], ids("*")[0], ids("-")[0], ids(";")[0]


def p_answer(x: float) -> float:
    """Probability of the answer token when its logit is x and the other V - 1 logits are 0."""
    return math.exp(x) / (math.exp(x) + V - 1)


class MarkerPolicy:
    """Next-token logits depend only on which markers the context (up to and including j) holds."""

    def __call__(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        real = attention_mask.bool()
        star = ((input_ids == STAR) & real).long().cumsum(1) > 0  # [n, L]
        minus = ((input_ids == MINUS) & real).long().cumsum(1) > 0
        logits = torch.zeros(*input_ids.shape, V)
        logits[..., ANS] = -2.0 + 6.0 * star.float() - 8.0 * minus.float()
        return SimpleNamespace(logits=logits, hidden_states=None)


def make_rollout(completions: list[str], rewards: list[float], group_size: int) -> Rollout:
    """Prompt ``Q 3+4=`` (answer 7) for every group; completions end with EOS, right-padded."""
    n_groups = len(completions) // group_size
    prompt = torch.tensor(ids("Q 3+4="))
    prompt_ids, prompt_mask = left_pad([prompt] * len(completions), TOK.pad_token_id)
    comps = [torch.tensor(ids(c) + [TOK.eos_token_id]) for c in completions]
    T = max(len(c) for c in comps)
    comp_ids = torch.full((len(comps), T), TOK.pad_token_id)
    for i, c in enumerate(comps):
        comp_ids[i, : len(c)] = c
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=comp_ids,
        completion_mask=completion_mask_from_ids(comp_ids, TOK.eos_token_id),
        group=torch.arange(n_groups).repeat_interleave(group_size),
        problems=[Problem(prompt="Q 3+4=", answer="7") for _ in range(n_groups)],
        completions=completions,
        pad_id=TOK.pad_token_id,
        eos_id=TOK.eos_token_id,
        rewards=torch.tensor(rewards),
    )


def counting_scorer(rollout: Rollout) -> tuple[Scorer, list[int]]:
    """A real Scorer over the marker policy that records how many sequences each value call scores."""
    scorer = Scorer(MarkerPolicy(), rollout, TOK, micro_batch_size=64)
    calls: list[int] = []
    inner = scorer.sequence_logprobs

    def wrapped(sequences, n_targets):
        calls.append(len(sequences))
        return inner(sequences, n_targets)

    scorer.sequence_logprobs = wrapped
    return scorer, calls


def assigner(**kw) -> RREDCoTCredit:
    return RREDCoTCredit(**{"boundary_texts": [";"], "keywords": [], "answer_cue": " answer:", **kw})


# ---------------------------------------------------------------------- values and redistribution
def test_values_are_the_models_answer_probability_and_rewards_telescope():
    # row 0 correct: "*" in segment 2; row 1 wrong: "*" in segment 1, "-" in segment 2
    rollout = make_rollout(["1;2;*;3", "1;*;-;2"], [1.0, 0.0], group_size=2)
    scorer, calls = counting_scorer(rollout)
    red = assigner(num_segments=4).redistribute(rollout, scorer)

    assert calls == [8]  # ONE batched call: 4 boundaries (0, 2, 4, 6) x 2 rows
    assert red.num_segments.tolist() == [4, 4]
    assert torch.nonzero(red.boundaries[0]).flatten().tolist() == [2, 4, 6]  # after each ";"
    lo, hi, ruined = p_answer(-2), p_answer(4), p_answer(-4)
    expected = torch.tensor([[lo, lo, lo, hi, 1.0], [lo, lo, hi, ruined, 0.0]])
    torch.testing.assert_close(red.values, expected, rtol=1e-4, atol=1e-6)
    # r_k = V_k - V_{k-1} sums to V_last - V_first (the final reward minus the prior value)
    torch.testing.assert_close(red.segment_rewards.sum(-1), red.values[:, -1] - red.values[:, 0])
    torch.testing.assert_close(red.segment_rewards[0], torch.tensor([0.0, 0.0, hi - lo, 1 - hi]))


def test_decisive_segment_gets_the_largest_weight_and_weights_average_one():
    rollout = make_rollout(["1;2;*;3", "1;*;-;2"], [1.0, 0.0], group_size=2)
    scorer, _ = counting_scorer(rollout)
    cr = assigner(num_segments=4)
    red = cr.redistribute(rollout, scorer)
    assert (red.sigma > 0).all()
    torch.testing.assert_close(red.sigma.mean(-1), torch.ones(2))
    # correct rollout: the segment "*;" after which the answer becomes likely
    assert red.sigma[0].argmax().item() == 2
    # wrong rollout (A < 0): the segment "-;" where the value drops most, not the rise "*;"
    assert red.sigma[1].argmax().item() == 2
    assert red.sigma[1, 1] < red.sigma[1, 0] + 1e-6  # the rising segment gets only delta

    credit = cr.assign(rollout, scorer)
    adv = cr.group_advantages(rollout)  # [+a, -a]
    assert adv[0] > 0 > adv[1]
    seg = red.segment_ids  # row 0 tokens: 1 ; | 2 ; | * ; | 3 <eos>
    assert seg[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    expected = adv[:, None] * red.sigma.gather(1, seg) * rollout.completion_mask
    torch.testing.assert_close(credit.advantages, expected)
    decisive = credit.advantages[0, 4:6]
    assert (decisive > credit.advantages[0, :4].max()).all()
    for key in ("segments_mean", "weight_mean", "value_first", "value_last"):
        assert math.isfinite(credit.metrics[key])
    assert credit.metrics["segments_mean"] == 4.0
    assert credit.metrics["multi_segment_frac"] == 1.0 and credit.metrics["segments_max"] == 4.0


def test_segment_counts_report_rows_with_one_segment_and_rows_with_several():
    # row 0 has three boundaries (four segments), row 1 none: one segment, weighted like GRPO
    rollout = make_rollout(["1;2;*;3", "1*-2"], [1.0, 0.0], group_size=2)
    scorer, _ = counting_scorer(rollout)
    metrics = assigner(num_segments=4).assign(rollout, scorer).metrics
    assert metrics["segments_mean"] == 2.5
    assert metrics["multi_segment_frac"] == 0.5
    assert metrics["segments_max"] == 4.0


def test_weight_formula_by_hand_and_zero_rewards_give_uniform_weights():
    values = torch.tensor([[0.2, 0.5, 0.4, 1.0], [0.3, 0.3, 0.3, 0.3]])
    seg_mask = torch.ones(2, 3, dtype=torch.bool)
    rewards, sigma = redistribute(values, seg_mask, torch.tensor([1.0, -1.0]), 0.01)
    r = [0.3, -0.1, 0.6]
    delta = 0.01 * (0.3 + 0.1 + 0.6) / 3
    m = [max(delta, x) for x in r]
    torch.testing.assert_close(rewards[0], torch.tensor(r))
    torch.testing.assert_close(sigma[0], torch.tensor([3 * x / sum(m) for x in m]))
    torch.testing.assert_close(sigma[1], torch.ones(3))  # all r_k exactly 0: weight 1 each
    # padded segments get weight 0 and the real ones still average 1
    _, sig = redistribute(values[:1], torch.tensor([[True, True, False]]), torch.tensor([1.0]), 0.01)
    assert sig[0, 2] == 0 and torch.isclose(sig[0, :2].sum(), torch.tensor(2.0))


def test_rows_with_zero_advantage_are_not_scored_and_keep_weight_one():
    # group 0 all correct (A = 0), group 1 mixed
    rollout = make_rollout(["1;*;2", "2;*;3", "1;*;2", "1;2;3"], [1.0, 1.0, 1.0, 0.0], group_size=2)
    scorer, calls = counting_scorer(rollout)
    red = assigner(num_segments=3).redistribute(rollout, scorer)
    assert red.active.tolist() == [False, False, True, True]
    assert calls == [6]  # 3 boundaries for each of the 2 rows of group 1 only
    mask = rollout.completion_mask.bool()
    assert (red.weights[:2][mask[:2]] == 1).all()
    assert (red.advantages[:2] == 0).all()


def test_model_value_of_the_whole_chain_when_the_reward_does_not_replace_it():
    rollout = make_rollout(["1;*;2", "1;2;3"], [1.0, 0.0], group_size=2)
    scorer, calls = counting_scorer(rollout)
    red = assigner(num_segments=3, last_value_is_reward=False).redistribute(rollout, scorer)
    assert calls == [8]  # 3 boundaries + the whole chain (EOS excluded), 2 rows
    torch.testing.assert_close(
        red.values[:, -1], torch.tensor([p_answer(4), p_answer(-2)]), rtol=1e-4, atol=0
    )


# ---------------------------------------------------------------------- segmentation
def test_candidates_after_boundary_text_and_before_keywords():
    comp = torch.tensor([ids(" 1;2 answer:3;") + [TOK.eos_token_id]])  # " 1 ; 2 _ answer : 3 ; <eos>"
    content = torch.tensor([comp.shape[1] - 1])
    after = [torch.tensor(ids(";"))]
    before = [[torch.tensor(ids(" answer")), torch.tensor(ids("answer"))]]
    cand = candidate_boundaries(comp, content, after, before)
    # after the ";" at 2 -> 3; before " answer" -> 4 (once, not again before "answer" at 5);
    # the ";" at 8 would start a segment holding only EOS, so it is not a candidate
    assert torch.nonzero(cand[0]).flatten().tolist() == [3, 4]


def test_keyword_defaults_and_unspellable_patterns_are_ignored():
    # patterns the tiny vocabulary cannot spell ("\n\n", English keywords: <unk>) must match nothing
    # (the tiny tokenizer's own defaults are ";" steps, so the unspellable ones are given here)
    comp = torch.tensor([ids("1;2") + [TOK.unk_token_id, 7, TOK.eos_token_id]])
    rollout = SimpleNamespace(
        completion_ids=comp, lengths=torch.tensor([comp.shape[1]]), eos_id=TOK.eos_token_id
    )
    stub = SimpleNamespace(
        encode=lambda t: torch.tensor(ids(t), dtype=torch.long), tokenizer=TOK, policy=None
    )
    credit = RREDCoTCredit(boundary_texts=["\n\n"], keywords=list(DEFAULT_KEYWORDS), answer_cue=" answer:")
    assert not credit.segment(rollout, stub).any()


def test_merging_to_the_target_count_keeps_the_highest_entropy_boundaries():
    comp = torch.tensor([ids("1;2;3;4;5") + [TOK.eos_token_id]])  # ";" at 1, 3, 5, 7 -> candidates 2, 4, 6, 8
    entropy = torch.zeros(1, comp.shape[1])
    entropy[0, [2, 4, 6, 8]] = torch.tensor([0.1, 0.9, 0.5, 0.7])
    entropy[0, 3] = 5.0  # high entropy off a candidate must not create a boundary
    cand = candidate_boundaries(comp, torch.tensor([9]), [torch.tensor(ids(";"))], [])
    assert torch.nonzero(cand[0]).flatten().tolist() == [2, 4, 6, 8]
    assert torch.nonzero(select_boundaries(cand, entropy, 3)[0]).flatten().tolist() == [4, 8]
    assert torch.nonzero(select_boundaries(cand, entropy, 2)[0]).flatten().tolist() == [4]
    assert select_boundaries(cand, entropy, 9).equal(cand)  # fewer candidates than K - 1: keep all
    assert not select_boundaries(cand, entropy, 1).any()

    # through the assigner: the entropies come from scorer.policy().entropy, indexed at the boundary
    rollout = SimpleNamespace(completion_ids=comp, lengths=torch.tensor([10]), eos_id=TOK.eos_token_id)
    stub = SimpleNamespace(
        encode=lambda t: torch.tensor(ids(t), dtype=torch.long),
        tokenizer=TOK,
        policy=lambda hidden=False: SimpleNamespace(entropy=entropy),
    )
    kept = assigner(num_segments=3).segment(rollout, stub)
    assert torch.nonzero(kept[0]).flatten().tolist() == [4, 8]


SCALES = [1.0, 1e-1, 1e-3, 1e-6, 1e-8, 1e-10, 1e-12]


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("scale", SCALES)
def test_weights_do_not_depend_on_the_magnitude_of_the_values(scale, sign):
    """A failed rollout whose answer probabilities are tiny is weighted like one at a normal scale."""
    base = torch.tensor([[0.5, 0.2, 0.3, 0.9, 0.4], [0.1, 0.6, 0.6, 0.2, 0.7]], dtype=torch.float64)
    seg_mask = torch.ones(2, 4, dtype=torch.bool)
    signs = torch.full((2,), sign)
    _, ref = redistribute(base, seg_mask, signs, 0.01)
    rewards, sigma = redistribute((base * scale).float(), seg_mask, signs, 0.01)
    torch.testing.assert_close(sigma, ref.float(), rtol=1e-4, atol=1e-5)
    # the hand formula at this scale: delta = 0.01 * mean |r|, sigma = K max(delta, s r) / sum
    for row in range(2):
        r = [(base[row, k + 1] - base[row, k]).item() for k in range(4)]
        delta = 0.01 * sum(abs(x) for x in r) / 4
        m = [max(delta, sign * x) for x in r]
        expected = torch.tensor([4 * x / sum(m) for x in m])
        torch.testing.assert_close(sigma[row], expected, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(sigma[row], torch.ones(4), atol=0.05)  # never flattened to uniform
    torch.testing.assert_close(rewards.double() / scale, (base[:, 1:] - base[:, :-1]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("scale", SCALES)
def test_failed_rollout_with_tiny_answer_probabilities_keeps_its_decisive_segment(scale):
    # a wrong rollout: the value drops most in segment 2, the final reward is 0
    values = torch.tensor([[3.0, 3.2, 0.4, 0.3, 0.0]]) * scale
    values[0, -1] = 0.0
    _, sigma = redistribute(values, torch.ones(1, 4, dtype=torch.bool), torch.tensor([-1.0]), 0.01)
    assert sigma[0].argmax().item() == 1  # r = [+0.2, -2.8, -0.1, -0.3] * scale: the big drop
    assert sigma[0, 1] > 2.5 and torch.isclose(sigma[0].sum(), torch.tensor(4.0))


@pytest.mark.parametrize("K", [1, 2, 5])
def test_all_zero_rows_get_exactly_weight_one_at_any_length(K):
    for v in (0.0, 1e-12, 0.3, 1.0):
        values = torch.full((1, K + 1), v)
        mask = torch.ones(1, K, dtype=torch.bool)
        for sign in (1.0, -1.0):
            rewards, sigma = redistribute(values, mask, torch.tensor([sign]), 0.01)
            assert torch.equal(rewards, torch.zeros(1, K)) and torch.equal(sigma, torch.ones(1, K))
