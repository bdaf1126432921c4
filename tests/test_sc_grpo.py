"""SC-GRPO on hand-built groups with a policy whose predictions are a known function of the context.

Five groups of G = 4 with n_c = 0, 1, 2, 3, 4 correct rollouts. Every
completion is distinct, so the reference rollout placed in each teacher
context can be read back from the context ids; the expected D, c, f and
advantages are then recomputed by hand with ``rule_logp`` (one sequence at a
time, no ``Scorer``).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lightning_rlvr.core.objectives import group_advantages
from lightning_rlvr.credit.sc_grpo import SCGRPOCredit
from tests.test_teacher_context import EOS, MARK, TABLE, make_rollout, make_scorer, rule_logp

G = 4
REWARDS = [0, 0, 0, 0] + [1, 0, 0, 0] + [1, 0, 1, 0] + [1, 1, 0, 1] + [1, 1, 1, 1]
GROUP = [i // G for i in range(len(REWARDS))]
PROMPTS = [[3 + g % 3, 4, 2][: 2 + g % 2] for g in GROUP]  # prompt lengths 2 and 3 (left padding)
_gen = torch.Generator().manual_seed(7)
COMPLETIONS = []
while len(COMPLETIONS) < len(REWARDS):  # distinct completions of 2..5 tokens, most ending in EOS
    n = int(torch.randint(2, 6, (1,), generator=_gen))
    c = torch.randint(2, 9, (n,), generator=_gen).tolist() + ([EOS] if len(COMPLETIONS) % 5 else [])
    if c not in COMPLETIONS:
        COMPLETIONS.append(c)
TEMPLATE = "{prompt}9{reference}"  # the marker token 9 changes the fake policy's predictions


def rollout_and_spy(micro_batch_size: int = 3):
    rollout = make_rollout(PROMPTS, COMPLETIONS, GROUP, REWARDS)
    scorer = make_scorer(rollout, micro_batch_size)
    calls = []
    compare = scorer.compare

    def spy(contexts, rows, fn, spans=None):
        calls.append((contexts, rows, spans))
        return compare(contexts, rows, fn, spans)

    scorer.compare = spy
    return rollout, scorer, calls


def reference_of(context: list[int], row: int) -> int:
    """The row whose completion (without EOS) follows ``prompt + marker`` in ``context``."""
    ref = context[len(PROMPTS[row]) + 1 :]
    assert context[: len(PROMPTS[row]) + 1] == PROMPTS[row] + [MARK]
    matches = [j for j, c in enumerate(COMPLETIONS) if [x for x in c if x != EOS] == ref]
    assert len(matches) == 1
    return matches[0]


def test_routing_by_number_of_correct_rollouts():
    rollout, scorer, calls = rollout_and_spy()
    credit = SCGRPOCredit(template=TEMPLATE, seed=0).assign(rollout, scorer)
    m = credit.metrics
    assert (m["groups_weighted"], m["groups_all_wrong"], m["groups_plain"]) == (2 / 5, 1 / 5, 2 / 5)
    assert len(calls) == 1  # every view of the step in one batched compare call
    contexts, rows, spans = calls[0]
    refs = {i: reference_of(ctx.tolist(), i) for ctx, i in zip(contexts, rows)}
    # n_c = 2, 3: every row scored; tau correct and never the row itself
    for g in (2, 3):
        for i in range(g * G, (g + 1) * G):
            assert REWARDS[refs[i]] == 1 and refs[i] != i and GROUP[refs[i]] == g
    # n_c = 0: the G - 1 rows other than o_r, each against o_r over min(|o_i|, |o_r|) tokens
    wrong_rows = [i for i in rows if GROUP[i] == 0]
    assert len(wrong_rows) == G - 1
    (r,) = set(range(G)) - set(wrong_rows)
    assert all(refs[i] == r for i in wrong_rows)
    lengths = rollout.lengths.tolist()
    assert all(span == (0, min(lengths[i], lengths[r])) for i, span in zip(rows, spans) if GROUP[i] == 0)
    # n_c = 1 and n_c = G: not scored, plain GRPO advantages
    assert not any(GROUP[i] in (1, 4) for i in rows)
    grpo = group_advantages(rollout.rewards, rollout.group)[:, None] * rollout.completion_mask
    for g in (1, 4):
        torch.testing.assert_close(credit.advantages[g * G : (g + 1) * G], grpo[g * G : (g + 1) * G])
    assert credit.advantages[r].abs().sum() == 0  # o_r gets 0


def test_weights_and_diversity_advantages_match_a_hand_computation():
    rollout, scorer, calls = rollout_and_spy()
    alpha = 0.1
    credit = SCGRPOCredit(template=TEMPLATE, alpha=alpha, seed=1).assign(rollout, scorer)
    contexts, rows, spans = calls[0]
    D = torch.zeros(rollout.completion_ids.shape)
    for ctx, i, (_, end) in zip(contexts, rows, spans):
        for t in range(end):
            teacher = rule_logp(ctx.tolist() + COMPLETIONS[i][:t])
            student = rule_logp(PROMPTS[i] + COMPLETIONS[i][:t])
            D[i, t] = (teacher.exp() * (teacher - student)).sum()
    scored = torch.zeros_like(D, dtype=torch.bool)
    for i, (_, end) in zip(rows, spans):
        scored[i, :end] = True
    c = max(float(torch.quantile(D[scored], 0.75)), 1e-4)
    assert credit.metrics["kl_c"] == pytest.approx(c, rel=1e-4)
    f = D / (D + c)
    adv = group_advantages(rollout.rewards, rollout.group)
    mask = rollout.completion_mask.float()
    for i in range(2 * G, 4 * G):  # weighted groups: A_i * f(D_{i,t})
        torch.testing.assert_close(credit.advantages[i], adv[i] * f[i] * mask[i], rtol=1e-4, atol=1e-6)
    others = [i for i in rows if GROUP[i] == 0]
    s = torch.stack([f[i][scored[i]].mean() for i in others])
    a_div = (s - s.mean()) / (s.std() + 1e-6)
    for k, i in enumerate(others):
        torch.testing.assert_close(credit.advantages[i], alpha * a_div[k] * mask[i], rtol=1e-4, atol=1e-6)
    assert abs(float(credit.advantages[others, 0].sum())) < 1e-6  # centred over the group without o_r
    # the logged summaries agree with the same hand computation
    fw = f[2 * G : 4 * G][mask[2 * G : 4 * G].bool()]
    assert credit.metrics["weight_mean"] == pytest.approx(float(fw.mean()), rel=1e-4)
    assert credit.metrics["frac_over_half"] == pytest.approx(float((fw > 0.5).float().mean()))
    assert credit.metrics["kl_mean"] == pytest.approx(float(D[scored].mean()), rel=1e-4)


def test_weights_lie_in_unit_interval_and_keep_the_advantage_sign():
    rollout, scorer, _ = rollout_and_spy()
    credit = SCGRPOCredit(template=TEMPLATE).assign(rollout, scorer)
    adv = group_advantages(rollout.rewards, rollout.group)
    rows = torch.arange(2 * G, 4 * G)
    mask = rollout.completion_mask[rows].bool()
    f = credit.advantages[rows] / adv[rows, None]  # [8, T]
    assert (f[mask] >= 0).all() and (f[mask] < 1).all()
    assert 0 < credit.metrics["frac_over_half"] < 1  # c = q75 of D: some tokens above f = 0.5, most below
    assert (
        0 <= credit.metrics["weight_p10"] <= credit.metrics["weight_p50"] <= credit.metrics["weight_p90"] < 1
    )


class PreviousTokenLM(torch.nn.Module):
    """Predicts from the previous token only: a teacher context can change only the first prediction."""

    def forward(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        return SimpleNamespace(logits=TABLE[input_ids], hidden_states=None)


def test_divergence_only_where_the_context_is_visible_and_c_falls_to_its_floor():
    rollout, scorer, calls = rollout_and_spy()
    scorer.model = PreviousTokenLM()
    credit = SCGRPOCredit(template=TEMPLATE).assign(rollout, scorer)
    assert credit.metrics["kl_c"] == 1e-4  # over 75% of the scored tokens have D = 0 exactly
    contexts, rows, _ = calls[0]
    last_ctx = {i: int(ctx[-1]) for ctx, i in zip(contexts, rows)}
    for i in range(2 * G, 4 * G):  # weighted rows: f = 0 after the first token
        assert (credit.advantages[i, 1:] == 0).all()
        # the first token is predicted from the context's last token: D > 0 iff it differs from the prompt's
        assert bool(credit.advantages[i, 0] != 0) == (last_ctx[i] != PROMPTS[i][-1])
    assert credit.advantages[G : 2 * G].abs().sum() > 0  # plain GRPO group untouched


def test_peer_rng_state_dict_round_trip_reproduces_the_credit():
    a = SCGRPOCredit(template=TEMPLATE, seed=5)
    rollout, scorer, _ = rollout_and_spy()
    a.assign(rollout, scorer)  # advance the generator
    state = a.state_dict()
    assert isinstance(state["peer_rng"]["generator"], torch.Tensor)
    expected = a.assign(*rollout_and_spy()[:2]).advantages
    b = SCGRPOCredit(template=TEMPLATE, seed=123)
    b.load_state_dict(state)
    torch.testing.assert_close(b.assign(*rollout_and_spy()[:2]).advantages, expected)
    fresh = SCGRPOCredit(template=TEMPLATE, seed=123).assign(*rollout_and_spy()[:2]).advantages
    assert not torch.equal(fresh, expected)  # the peers (hence weights) depend on the generator state


def test_template_must_hold_the_reference():
    with pytest.raises(ValueError):
        SCGRPOCredit(template="{prompt}")
    assert math.isclose(SCGRPOCredit().alpha, 0.1)
    assert "{reference}" in SCGRPOCredit.text_defaults["template"]


@pytest.mark.parametrize("d_value", [0.0, 1e-5, 0.013, 0.7, 3.0])
@pytest.mark.parametrize("lengths", [[3, 3, 3, 3, 3, 3, 3], [2, 5, 3, 4, 5, 2, 3]])
def test_all_wrong_group_with_equal_s_gets_exactly_zero_diversity_advantage(monkeypatch, d_value, lengths):
    """Every s_i equal (same f on every scored token, any lengths): A_div is 0, not (ulp noise) / eps."""
    completions = [[2 + (k + j) % 7 for j in range(n - 1)] + [EOS] for k, n in enumerate(lengths)]
    G7 = len(lengths)
    rollout = make_rollout([[3, 4]] * G7, completions, [0] * G7, [0.0] * G7)
    scorer = make_scorer(rollout, 3)
    monkeypatch.setattr(
        SCGRPOCredit,
        "teacher_scores",
        staticmethod(
            lambda scorer, rollout, rows, *a, **k: torch.full(rollout.completion_ids.shape, d_value)
        ),
    )
    credit = SCGRPOCredit(template=TEMPLATE, seed=2).assign(rollout, scorer)
    assert credit.metrics["groups_all_wrong"] == 1.0
    assert torch.equal(credit.advantages, torch.zeros_like(credit.advantages))


def test_collapsed_all_wrong_group_of_identical_rollouts_gets_zero():
    same = COMPLETIONS[0]
    for G_ in (3, 4, 8):
        rollout = make_rollout([PROMPTS[0]] * G_, [same] * G_, [0] * G_, [0.0] * G_)
        credit = SCGRPOCredit(template=TEMPLATE, seed=0).assign(rollout, make_scorer(rollout, 2))
        assert torch.equal(credit.advantages, torch.zeros_like(credit.advantages))
