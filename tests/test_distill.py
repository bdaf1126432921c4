"""OPSD and OPD: the divergence by hand, the teacher the update distils towards, and OPD's frozen teacher.

The self-teacher is ``FakeLM`` (its predictions are a known function of the context, see
``test_teacher_context``); OPD's teacher is another table-driven fake, so every stored teacher
distribution can be recomputed by hand from the context ids the method built.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.objectives import group_advantages
from lightning_rlvr.credit.opd import OPDCredit, check_same_vocabulary
from lightning_rlvr.credit.opsd import OPSDCredit, distill_divergence, reverse_kl
from lightning_rlvr.models import PolicySource, TinyPolicy
from tests.conftest import METHOD_TEST_SCALE, QUICKSTART, REPO, TINY
from tests.test_teacher_context import (
    EOS,
    MARK,
    DigitTokenizer,
    FakeLM,
    V,
    make_rollout,
    make_scorer,
    rule_logp,
)

G = 4
REWARDS = [1, 0, 0, 0] + [1, 1, 1, 1]
GROUP = [i // G for i in range(len(REWARDS))]
PROMPTS = [[3, 4], [5, 2, 6]]
ANSWERS = ["25", "3"]
COMPLETIONS = [
    [2, 5, EOS],
    [7],
    [],
    [8, 8, 3],
    [3, EOS],
    [4, 4, 4, EOS],
    [6, 2, 5, EOS],
    [EOS],
]  # an empty, a one-token and an EOS-only completion
TEMPLATE = "{prompt}9{answer}"  # marker 9 switches FakeLM's predictions: the teacher "knows" something


def make(**kwargs):
    rollout = make_rollout([PROMPTS[g] for g in GROUP], COMPLETIONS, GROUP, REWARDS, answers=ANSWERS)
    rollout.correct = rollout.rewards > 0.5
    return rollout, make_scorer(rollout, micro_batch_size=3)


def logp(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log()  # log 0 = -inf


# ---------------------------------------------------------------------------- divergences by hand
def test_reverse_kl_by_hand_including_zero_probabilities():
    q, p = logp([0.5, 0.5, 0.0]), logp([0.25, 0.75, 0.0])
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert float(reverse_kl(q, p)) == pytest.approx(expected, abs=1e-12)
    # the student puts no mass where the teacher does: those entries contribute exactly 0
    assert float(reverse_kl(logp([1.0, 0.0, 0.0]), logp([0.5, 0.25, 0.25]))) == pytest.approx(math.log(2))
    # the teacher gives probability 0 to a token the student samples: floor -100, finite
    assert float(reverse_kl(logp([0.5, 0.5]), logp([1.0, 0.0]))) == pytest.approx(
        0.5 * math.log(0.5) + 0.5 * (math.log(0.5) + 100.0)
    )
    assert float(reverse_kl(logp([0.5, 0.5]), logp([1.0, 0.0]), floor=-10.0)) == pytest.approx(
        math.log(0.5) + 5.0
    )
    same = logp([0.1, 0.2, 0.7])
    assert float(reverse_kl(same, same)) == 0.0
    assert reverse_kl(logp([0.5, 0.5]), logp([0.5, 0.5])).dtype == torch.float64


def test_reverse_kl_is_not_symmetric_and_matches_torch_on_random_distributions():
    gen = torch.Generator().manual_seed(0)
    for scale in (0.1, 1.0, 5.0):
        q = F.log_softmax(scale * torch.randn(4, 6, V, generator=gen, dtype=torch.float64), -1)
        p = F.log_softmax(scale * torch.randn(4, 6, V, generator=gen, dtype=torch.float64), -1)
        ref = F.kl_div(p, q, log_target=True, reduction="none").sum(-1)  # sum q (log q - log p)
        torch.testing.assert_close(reverse_kl(q, p), ref)
        assert not torch.allclose(reverse_kl(q, p), reverse_kl(p, q))


def test_divergences_stay_finite_with_minus_inf_log_probs_and_give_finite_gradients():
    logits = torch.tensor([[0.0, float("-inf"), 1.0]], requires_grad=True)  # the student: one p = 0
    teacher = logp([0.0, 0.5, 0.5])[None].float()  # the teacher: p = 0 where the student has mass
    for kind in ("reverse_kl", "jsd"):
        d = distill_divergence(F.log_softmax(logits, -1), teacher, kind)
        assert torch.isfinite(d).all(), kind
        (grad,) = torch.autograd.grad(d.sum(), logits)
        assert torch.isfinite(grad).all(), kind
    q0, q2 = 1 / (1 + math.e), math.e / (1 + math.e)  # the student; the teacher's p0 = 0 becomes e^-100
    expected = q0 * (math.log(q0) + 100.0) + q2 * (math.log(q2) - math.log(0.5))
    d = distill_divergence(F.log_softmax(logits.detach(), -1), teacher, "reverse_kl")
    assert float(d) == pytest.approx(expected, rel=1e-6)
    # disjoint supports: JSD = ln 2 up to the floor's e^-100
    jsd = distill_divergence(logp([1.0, 0.0]), logp([0.0, 1.0]), "jsd", beta=0.5)
    assert float(jsd) == pytest.approx(math.log(2), abs=1e-9)


# ---------------------------------------------------------------------------- OPSD
def test_opsd_distils_towards_the_policy_shown_the_answer():
    rollout, scorer = make()
    credit = OPSDCredit(teacher_template=TEMPLATE, distill_coef=0.7)
    out = credit.assign(rollout, scorer)
    assert torch.equal(out.advantages, torch.zeros(len(REWARDS), rollout.completion_ids.shape[1]))  # pg 0
    # arbitrary student logits: the term is 0.7 * KL(student || teacher) with the teacher by hand
    gen = torch.Generator().manual_seed(3)
    T = rollout.completion_ids.shape[1]
    rows = torch.arange(len(REWARDS))
    logits = torch.randn(len(REWARDS), T, V, generator=gen, requires_grad=True)
    loss = out.token_loss(logits, rows)  # [N, T]
    for i, comp in enumerate(COMPLETIONS):
        g = GROUP[i]
        context = PROMPTS[g] + [MARK] + [int(ch) for ch in ANSWERS[g]]
        for t in range(T):
            if t >= len(comp):
                assert float(loss[i, t].detach()) == 0.0
                continue
            teacher = rule_logp(context + comp[:t])
            student = F.log_softmax(logits[i, t].detach(), -1)
            expected = 0.7 * float((student.exp() * (student - teacher)).sum())
            assert float(loss[i, t].detach()) == pytest.approx(expected, rel=1e-5, abs=1e-7), (i, t)
    loss.sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[2].abs().sum() == 0  # the empty row


def test_opsd_metric_is_the_divergence_to_the_rollout_time_policy_and_student_equal_teacher_gives_zero():
    rollout, scorer = make()
    out = OPSDCredit(teacher_template=TEMPLATE).assign(rollout, scorer)
    values, teachers = [], {}
    for i, comp in enumerate(COMPLETIONS):
        g = GROUP[i]
        context = PROMPTS[g] + [MARK] + [int(ch) for ch in ANSWERS[g]]
        for t in range(len(comp)):
            teacher, student = rule_logp(context + comp[:t]), rule_logp(PROMPTS[g] + comp[:t])
            values.append(float((student.exp() * (student - teacher)).sum()))
            teachers[(i, t)] = teacher
    assert out.metrics["divergence_mean"] == pytest.approx(sum(values) / len(values), rel=1e-5)
    assert out.metrics["frac_distilled_rows"] == pytest.approx(7 / 8)  # the empty completion is skipped
    # a student that already predicts the teacher has (numerically) zero loss
    T = rollout.completion_ids.shape[1]
    logits = torch.zeros(len(REWARDS), T, V)
    for (i, t), teacher in teachers.items():
        logits[i, t] = teacher
    assert out.token_loss(logits, torch.arange(len(REWARDS))).abs().max() < 1e-5


def test_opsd_pg_coef_scales_grpo_advantages_and_apply_to_failed_uses_rollout_correct():
    rollout, scorer = make()
    out = OPSDCredit(teacher_template=TEMPLATE, pg_coef=0.5, apply_to="failed").assign(rollout, scorer)
    expected = 0.5 * group_advantages(rollout.rewards, rollout.group)[:, None] * rollout.completion_mask
    torch.testing.assert_close(out.advantages, expected)
    assert out.advantages[4:].abs().sum() == 0  # all-equal group: no GRPO signal
    assert out.metrics["frac_distilled_rows"] == pytest.approx(2 / 8)  # rows 1 and 3 (row 2 is empty)
    T = rollout.completion_ids.shape[1]
    loss = out.token_loss(torch.randn(len(REWARDS), T, V), torch.arange(len(REWARDS)))
    assert set(torch.nonzero(loss.abs().sum(-1)).flatten().tolist()) == {1, 3}
    # a minibatch of rows without the term gets an all-zero loss of the right shape
    assert torch.equal(out.token_loss(torch.randn(2, T, V), torch.tensor([0, 4])), torch.zeros(2, T))
    rollout.correct[:] = True
    none = OPSDCredit(teacher_template=TEMPLATE, apply_to="failed").assign(rollout, scorer)
    assert none.token_loss is None and math.isnan(none.metrics["divergence_mean"])


def test_opsd_rejects_bad_choices():
    with pytest.raises(ValueError, match="divergence"):
        OPSDCredit(divergence="forward_kl")
    with pytest.raises(ValueError, match="beta"):
        OPSDCredit(divergence="jsd", beta=1.0)
    with pytest.raises(ValueError, match="reference"):
        OPSDCredit(teacher_template="{prompt}{reference}")
    with pytest.raises(ValueError, match="apply_to"):
        OPSDCredit(apply_to="wrong")


# ---------------------------------------------------------------------------- OPD
_g = torch.Generator().manual_seed(99)
TEACHER_TABLE = torch.randn(V, V, generator=_g)


class TableTeacher(torch.nn.Module):
    """A different fake LM: logits[j] = TEACHER_TABLE[x_j] + 0.1 * pos_j (no marker rule)."""

    config = SimpleNamespace(vocab_size=V)

    def forward(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        logits = TEACHER_TABLE[input_ids] + 0.1 * position_ids[..., None].float()
        return SimpleNamespace(logits=logits, hidden_states=None)


def teacher_logp(seq: list[int]) -> torch.Tensor:
    return F.log_softmax(TEACHER_TABLE[seq[-1]] + 0.1 * (len(seq) - 1), -1)


class VocabTokenizer(DigitTokenizer):
    def __init__(self, size: int = V) -> None:
        self.size = size

    def get_vocab(self) -> dict[str, int]:
        return {str(i): i for i in range(self.size)}


class FakeSource(PolicySource):
    def __init__(self, model=None, tokenizer=None) -> None:
        self.model, self.tokenizer = model or TableTeacher(), tokenizer or VocabTokenizer()

    def load(self):
        return self.model, self.tokenizer


def test_opd_distils_towards_the_external_teacher_on_the_student_prompt():
    rollout, scorer = make()
    student = FakeLM()
    student.config = SimpleNamespace(vocab_size=V)
    credit = OPDCredit(teacher=FakeSource(), pg_coef=1.0)
    credit.load_teacher(student, VocabTokenizer())
    out = credit.assign(rollout, scorer)
    torch.testing.assert_close(
        out.advantages, group_advantages(rollout.rewards, rollout.group)[:, None] * rollout.completion_mask
    )
    T = rollout.completion_ids.shape[1]
    logits = torch.randn(len(REWARDS), T, V, generator=torch.Generator().manual_seed(5))
    loss = out.token_loss(logits, torch.arange(len(REWARDS)))
    values = []
    for i, comp in enumerate(COMPLETIONS):
        prompt = PROMPTS[GROUP[i]]
        for t in range(len(comp)):
            teacher = teacher_logp(prompt + comp[:t])  # same prompt, another model
            s = F.log_softmax(logits[i, t], -1)
            assert float(loss[i, t]) == pytest.approx(float((s.exp() * (s - teacher)).sum()), rel=1e-5)
            rollout_student = rule_logp(prompt + comp[:t])  # the metric compares the rollout-time policy
            values.append(float((rollout_student.exp() * (rollout_student - teacher)).sum()))
    assert out.metrics["divergence_mean"] == pytest.approx(sum(values) / len(values), rel=1e-5)
    # the teacher's tokens count as the step's extra forward cost
    assert scorer.forward_tokens >= sum(
        len(PROMPTS[GROUP[i]]) + len(c) for i, c in enumerate(COMPLETIONS) if c
    )


def test_opd_without_a_loaded_teacher_and_with_another_vocabulary_is_one_clear_error():
    rollout, scorer = make()
    with pytest.raises(RLVRError, match="no teacher loaded"):
        OPDCredit(teacher=FakeSource()).assign(rollout, scorer)
    student, tokenizer = TinyPolicy(layers=1, hidden=16, heads=2, intermediate=32).load()
    other_tokens = TinyPolicy(layers=1, hidden=16, heads=2, intermediate=32).load()[1]
    other_tokens.add_tokens(["extra"])
    with pytest.raises(RLVRError, match="vocabulary differs.*25 vs 24 tokens"):
        OPDCredit(teacher=FakeSource(TinyPolicy().load()[0], other_tokens)).load_teacher(student, tokenizer)
    wider, _ = TinyPolicy(layers=1, hidden=16, heads=2, intermediate=32).load()
    wider.resize_token_embeddings(32)
    with pytest.raises(RLVRError, match="predicts 32 logits per token but the student 24"):
        check_same_vocabulary(student, tokenizer, wider, tokenizer)
    check_same_vocabulary(student, tokenizer, TinyPolicy(layers=2).load()[0], tokenizer)  # same: no error


def test_opd_teacher_is_warm_started_frozen_cached_and_kept_out_of_the_checkpoint(run_cli, tmp_path):
    configs = (
        QUICKSTART,
        str(REPO / "configs/method/opd.yaml"),
        TINY,
        *METHOD_TEST_SCALE["opd"],
    )
    cli = run_cli("fit", configs=configs)
    credit = cli.model.credit
    teacher = credit.teacher_model
    assert credit.teacher_warm_start_summary["steps"] == 20  # its own warm start ran
    assert all(not p.requires_grad for p in teacher.parameters()) and not teacher.training
    # the teacher is exactly its warm-started weights (a fresh warm start from the cache)
    again = OPDCredit(teacher=credit.teacher, teacher_warm_start=credit.teacher_warm_start)
    again.load_teacher(cli.model.model, cli.model.tokenizer, cli.model.task)
    assert again.teacher_warm_start_summary["cached"] is True
    for (name, a), b in zip(teacher.state_dict().items(), again.teacher_model.state_dict().values()):
        assert torch.equal(a, b), name
    ckpt = torch.load(cli.trainer.checkpoint_callback.last_model_path, weights_only=True)
    assert set(ckpt["state_dict"]) == set(cli.model.state_dict())
    policy_keys = {k for k in ckpt["state_dict"] if k.startswith("model.")}
    assert policy_keys == {f"model.{k}" for k in cli.model.model.state_dict()}  # the student's weights only
    assert all(param is not t for param in cli.model.parameters() for t in teacher.parameters())
