"""Self-conditioned teacher contexts: built on token ids, scored at the student's exact positions.

``FakeLM``'s next-token logits are a known function of the context: a table
row picked by the *previous* token, plus a second table row when the marker
token 9 appears anywhere in the context so far, plus a term growing with the
position id. Any off-by-one in where a completion token is scored, a leak of
left padding into positions, or a teacher context that differs from the
template changes the numbers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import completion_mask_from_ids, left_pad
from lightning_rlvr.credit.self_conditioned import (
    ContextTemplate,
    PeerSampler,
    SelfConditionedCredit,
    first_divergence,
    generalized_jsd,
    kl_divergence,
    reference_ids,
)
from lightning_rlvr.scoring.scorer import Scorer

V = 10
PAD, EOS, MARK = 0, 1, 9
_g = torch.Generator().manual_seed(1234)
TABLE = torch.randn(V, V, generator=_g)  # logits given the previous token
MARK_TABLE = 2.0 * torch.randn(V, V, generator=_g)  # added once the marker has been seen
POS = torch.randn(V, generator=_g)  # times 0.05 * position id


class FakeLM(torch.nn.Module):
    """logits[j] = TABLE[x_j] + [marker in x_{<=j}] * MARK_TABLE[x_j] + 0.05 * pos_j * POS."""

    def forward(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        seen = (((input_ids == MARK) & attention_mask.bool()).cumsum(-1) > 0).float()  # [n, L]
        logits = TABLE[input_ids] + seen[..., None] * MARK_TABLE[input_ids]
        logits = logits + 0.05 * position_ids[..., None].float() * POS
        return SimpleNamespace(logits=logits, hidden_states=None)


def rule_logp(seq: list[int]) -> torch.Tensor:
    """FakeLM's next-token log-probs after ``seq``, computed by hand for one sequence: [V]."""
    logits = TABLE[seq[-1]] + float(MARK in seq) * MARK_TABLE[seq[-1]] + 0.05 * (len(seq) - 1) * POS
    return F.log_softmax(logits, -1)


class DigitTokenizer:
    """Each character '0'..'9' is the token with that id."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [int(ch) for ch in text]}


def make_rollout(
    prompts: list[list[int]],
    completions: list[list[int]],
    group: list[int],
    rewards: list[float],
    answers: list[str] | None = None,
) -> Rollout:
    p_ids, p_mask = left_pad([torch.tensor(p) for p in prompts], PAD)
    T = max(map(len, completions))
    c_ids = torch.full((len(completions), T), PAD)
    for i, c in enumerate(completions):
        c_ids[i, : len(c)] = torch.tensor(c)
    n_groups = max(group) + 1
    answers = answers or ["7"] * n_groups
    return Rollout(
        prompt_ids=p_ids,
        prompt_mask=p_mask,
        completion_ids=c_ids,
        completion_mask=completion_mask_from_ids(c_ids, EOS) * (c_ids != PAD).long(),
        group=torch.tensor(group),
        problems=[Problem(prompt="", answer=answers[g]) for g in range(n_groups)],
        completions=[""] * len(completions),
        pad_id=PAD,
        eos_id=EOS,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        correct=torch.tensor(rewards) > 0.5,
    )


def make_scorer(rollout: Rollout, micro_batch_size: int = 2) -> Scorer:
    return Scorer(FakeLM(), rollout, DigitTokenizer(), micro_batch_size=micro_batch_size)


PROMPTS = [[3, 4, 5], [3, 4, 5], [6, 2], [6, 2]]
COMPLETIONS = [[2, 7, 3, EOS], [5, 5, EOS], [8, 2, 2, 4, EOS], [4, 6]]  # last one truncated (no EOS)


def test_context_ids_follow_the_template_on_token_ids():
    rollout = make_rollout(PROMPTS, COMPLETIONS, [0, 0, 1, 1], [1, 0, 0, 1], answers=["12", "35"])
    scorer = make_scorer(rollout)
    tpl = ContextTemplate("{prompt}9{reference}3{answer}{x}")  # "{x}" is not a placeholder: literal text
    assert tpl.fields == {"prompt", "reference", "answer"}
    assert tpl.parts[-1] == (False, "{x}")
    tpl = ContextTemplate("{prompt}9{reference}3{answer}")
    # row 1 with peer 0: prompt ids, marker, peer completion without its EOS, literal 3, answer "12"
    assert tpl.build(scorer, rollout, 1, reference=0).tolist() == [3, 4, 5, 9, 2, 7, 3, 3, 1, 2]
    # row 2 with the truncated peer 3 (nothing to strip), answer of group 1; prompt without left padding
    assert tpl.build(scorer, rollout, 2, reference=3).tolist() == [6, 2, 9, 4, 6, 3, 3, 5]
    assert reference_ids(rollout, 2).tolist() == [8, 2, 2, 4]
    with pytest.raises(ValueError):
        tpl.build(scorer, rollout, 1, reference=None)


def test_teacher_scores_the_student_tokens_at_the_same_positions():
    rollout = make_rollout(PROMPTS, COMPLETIONS, [0, 0, 1, 1], [1, 0, 0, 1])
    scorer = make_scorer(rollout, micro_batch_size=2)  # 4 views -> 2 micro-batches, left padding inside
    tpl = ContextTemplate("{prompt}9{reference}")
    rows, refs = [1, 0, 2, 3], [0, 1, 3, 2]
    D = SelfConditionedCredit.teacher_scores(scorer, rollout, rows, [tpl] * 4, refs, kl_divergence)
    assert D.shape == rollout.completion_ids.shape
    for i, ref in zip(rows, refs):
        comp = COMPLETIONS[i]
        context = PROMPTS[i] + [MARK] + [x for x in COMPLETIONS[ref] if x != EOS]
        for t in range(len(comp)):
            teacher = rule_logp(context + comp[:t])
            student = rule_logp(PROMPTS[i] + comp[:t])
            expected = (teacher.exp() * (teacher - student)).sum()
            torch.testing.assert_close(D[i, t], expected, rtol=1e-4, atol=1e-5)
        assert (D[i, len(comp) :] == 0).all()
    assert (D[rollout.completion_mask.bool()] > 1e-3).all()  # the marker changes every prediction


def test_identical_teacher_and_student_context_gives_zero_divergence():
    rollout = make_rollout(PROMPTS, COMPLETIONS, [0, 0, 1, 1], [1, 0, 0, 1])
    scorer = make_scorer(rollout)
    same = ContextTemplate("{prompt}")
    D = SelfConditionedCredit.teacher_scores(
        scorer, rollout, [0, 1, 2, 3], [same] * 4, [None] * 4, kl_divergence
    )
    assert D.abs().max() < 1e-5
    J = SelfConditionedCredit.teacher_scores(
        scorer, rollout, [0, 1, 2, 3], [same] * 4, [None] * 4, generalized_jsd
    )
    assert J.abs().max() < 1e-5


def test_divergences_are_nonnegative_and_zero_on_equal_inputs():
    logits = torch.randn(3, 5, V, generator=torch.Generator().manual_seed(0))
    p, q = F.log_softmax(logits, -1), F.log_softmax(logits.flip(0), -1)
    assert (kl_divergence(p, q) >= 0).all() and (kl_divergence(p, p).abs() < 1e-6).all()
    assert (generalized_jsd(p, q) >= 0).all() and (generalized_jsd(p, p).abs() < 1e-6).all()


def test_first_divergence_positions():
    completions = [[2, 3, 4, EOS], [2, 3, 5, EOS], [2, 3, 4, EOS], [2, 3], [7, 3]]
    rollout = make_rollout([[3]] * 5, completions, [0, 0, 0, 0, 0], [0] * 5)
    div = first_divergence(rollout, [0, 0, 0, 3, 4], [1, 2, 3, 0, 0])
    # differs at 2; identical -> its length 4; peer ends after 2 -> 2; shorter row -> 2; first token -> 0
    assert div.tolist() == [2, 4, 2, 2, 0]


def test_peer_sampler_is_seeded_uniform_and_its_state_round_trips(tmp_path):
    a, b = PeerSampler(seed=3), PeerSampler(seed=3)
    draws_a = [a.choice([4, 5, 6]) for _ in range(30)]
    assert draws_a == [b.choice([4, 5, 6]) for _ in range(30)]
    counts = torch.bincount(torch.tensor([a.choice([0, 1, 2]) for _ in range(3000)]), minlength=3)
    assert ((counts / 3000 - 1 / 3).abs() < 0.04).all()
    assert {a.choice([8]) for _ in range(5)} == {8}

    credit = SelfConditionedCredit(seed=11)
    credit.peers.choice(range(10))
    path = tmp_path / "state.pt"
    torch.save(credit.state_dict(), path)
    expected = [credit.peers.choice(range(10)) for _ in range(20)]
    restored = SelfConditionedCredit(seed=0)  # a different seed: only the loaded state matters
    restored.load_state_dict(torch.load(path, weights_only=True))
    assert [restored.peers.choice(range(10)) for _ in range(20)] == expected
    assert expected != [SelfConditionedCredit(seed=0).peers.choice(range(10)) for _ in range(20)]


@pytest.mark.parametrize("role", ["peer_context", "peer_answer_context", "answer_context"])
def test_the_tiny_vocabularys_templates_are_encodable_by_it(role):
    from lightning_rlvr.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    tpl = ContextTemplate(tok.role_texts[role])
    assert "prompt" in tpl.fields
    for is_field, text in tpl.parts:
        if not is_field:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.unk_token_id not in ids, (role, text)
