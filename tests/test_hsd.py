"""HSD on hand-built groups with a policy whose predictions are a known function of the context.

Groups of G = 4: n_c = 2 (failed rows get a successful peer), n_c = 0 (answer-only
teacher), n_c = 1 (the sole success has no peer: answer-only under ``apply_to="all"``).
The teacher log-probs HSD stores are checked against ``rule_logp`` computed by
hand from the context ids it built, through ``token_loss`` on arbitrary student logits.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_rlvr.core.objectives import group_advantages
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.credit.hsd import HSDCredit
from lightning_rlvr.credit.self_conditioned import generalized_jsd
from tests.test_teacher_context import EOS, MARK, FakeLM, V, make_rollout, make_scorer, rule_logp

G = 4
REWARDS = [1, 0, 1, 0] + [0, 0, 0, 0] + [1, 0, 0, 0]
GROUP = [i // G for i in range(len(REWARDS))]
ANSWERS = ["25", "3", "47"]
PROMPTS = [[3, 4], [5, 2, 6], [7, 4]]
COMPLETIONS = [
    [2, 5, EOS],
    [2, 7, 3, EOS],
    [2, 5, 4, 6, EOS],
    [8, 8],
    [3, EOS],
    [4, 4, 4, EOS],
    [6, 2, 5, EOS],
    [7, 7, 2],
    [4, 7, EOS],
    [4, 6, 3, 2, EOS],
    [5, 5, EOS],
    [4, 8, EOS],
]
PEER = "{prompt}9{reference}3{answer}"  # marker 9 changes the fake policy's predictions
ANSWER_ONLY = "{prompt}9{answer}"


def setup(micro_batch_size: int = 2, **kwargs) -> tuple[HSDCredit, Rollout, object, list]:
    prompts = [PROMPTS[g] for g in GROUP]
    rollout = make_rollout(prompts, COMPLETIONS, GROUP, REWARDS, answers=ANSWERS)
    scorer = make_scorer(rollout, micro_batch_size)
    calls = []
    compare = scorer.compare

    def spy(contexts, rows, fn, spans=None, **kwargs):
        calls.append((contexts, rows))
        return compare(contexts, rows, fn, spans, **kwargs)

    scorer.compare = spy
    credit = HSDCredit(peer_template=PEER, answer_template=ANSWER_ONLY, **kwargs)
    return credit, rollout, scorer, calls


def parse(context: list[int], row: int) -> int | None:
    """The peer row whose completion sits in ``context`` (None for an answer-only context)."""
    g = GROUP[row]
    prompt, answer = PROMPTS[g], [int(ch) for ch in ANSWERS[g]]
    assert context[: len(prompt) + 1] == prompt + [MARK]
    body = context[len(prompt) + 1 :]
    if body == answer:
        return None
    assert body[-len(answer) - 1 :] == [3] + answer
    ref = body[: -len(answer) - 1]
    matches = [j for j, c in enumerate(COMPLETIONS) if [x for x in c if x != EOS] == ref]
    assert len(matches) == 1
    return matches[0]


def test_jsd_lies_between_zero_and_ln2():
    gen = torch.Generator().manual_seed(0)
    for scale in (0.1, 1.0, 10.0, 100.0):
        p = F.log_softmax(scale * torch.randn(6, 5, V, generator=gen), -1)
        q = F.log_softmax(scale * torch.randn(6, 5, V, generator=gen), -1)
        d = generalized_jsd(p, q, 0.5)
        assert (d >= 0).all() and (d <= math.log(2) + 1e-6).all()
        torch.testing.assert_close(d, generalized_jsd(q, p, 0.5))  # symmetric at beta = 0.5
    disjoint_p = F.log_softmax(torch.tensor([50.0, 0, 0, 0]), -1)
    disjoint_q = F.log_softmax(torch.tensor([0, 50.0, 0, 0]), -1)
    assert float(generalized_jsd(disjoint_p, disjoint_q)) == pytest.approx(math.log(2), abs=1e-4)


def test_failed_rows_get_a_successful_peer_or_the_answer_only_teacher():
    credit, rollout, scorer, calls = setup()
    out = credit.assign(rollout, scorer)
    assert len(calls) == 1  # every teacher view of the step in one batched compare call
    contexts, rows = calls[0]
    assert sorted(rows) == [i for i in range(12) if REWARDS[i] == 0]
    peers = {i: parse(ctx.tolist(), i) for ctx, i in zip(contexts, rows)}
    for i in rows:
        if GROUP[i] == 1:  # no success in the group
            assert peers[i] is None
        else:
            assert peers[i] is not None and REWARDS[peers[i]] == 1 and GROUP[peers[i]] == GROUP[i]
    assert out.metrics["frac_distilled_rows"] == pytest.approx(9 / 12)
    assert out.metrics["frac_answer_only"] == pytest.approx(4 / 9)
    grpo = group_advantages(rollout.rewards, rollout.group)[:, None] * rollout.completion_mask
    torch.testing.assert_close(out.advantages, grpo)  # the PG part is plain GRPO


def test_apply_to_all_distils_successes_against_another_success():
    credit, rollout, scorer, calls = setup(apply_to="all")
    out = credit.assign(rollout, scorer)
    contexts, rows = calls[0]
    assert sorted(rows) == list(range(12))
    peers = {i: parse(ctx.tolist(), i) for ctx, i in zip(contexts, rows)}
    assert peers[0] == 2 and peers[2] == 0  # a success is taught by the other success
    assert peers[8] is None  # the sole success of its group: answer-only fallback
    assert out.metrics["frac_distilled_rows"] == 1.0
    with pytest.raises(ValueError):
        HSDCredit(apply_to="some")


def test_token_loss_is_clipped_jsd_to_the_stored_teacher_and_its_gradient_reaches_the_student_only():
    coef, clip = 0.7, 0.15
    credit, rollout, scorer, calls = setup(micro_batch_size=2, distill_coef=coef, clip=clip)
    token_loss = credit.assign(rollout, scorer).token_loss  # 9 views in 5 micro-batches
    contexts, rows = calls[0]
    teacher_ctx = {i: ctx.tolist() for ctx, i in zip(contexts, rows)}
    T = rollout.completion_ids.shape[1]
    batch = torch.tensor(
        [5, 0, 11, 2, 9]
    )  # an update micro-batch, in shuffled order; rows 0, 2 not distilled
    logits = torch.randn(len(batch), T, V, generator=torch.Generator().manual_seed(3), requires_grad=True)
    loss = token_loss(logits, batch)  # [m, T]
    assert loss.shape == (len(batch), T)
    student = F.log_softmax(logits.detach(), -1)
    n_clipped = 0
    for k, i in enumerate(batch.tolist()):
        n = int(rollout.lengths[i])
        if i not in teacher_ctx:
            assert (loss[k] == 0).all()
            continue
        for t in range(T):
            if t >= n:
                assert loss[k, t] == 0
                continue
            teacher = rule_logp(teacher_ctx[i] + COMPLETIONS[i][:t])
            jsd = float(generalized_jsd(teacher, student[k, t]))
            assert 0 <= jsd <= math.log(2)
            n_clipped += jsd > clip
            assert float(loss[k, t].detach()) == pytest.approx(coef * min(jsd, clip), rel=1e-4, abs=1e-7)
    assert 0 < n_clipped < int(rollout.lengths[[5, 11, 9]].sum())  # both clipped and unclipped tokens

    assert not vars(credit).get("_teacher")  # nothing stashed on the assigner between calls
    loss.sum().backward()
    grad = logits.grad.abs().sum(-1)  # [m, T]
    assert (grad[[1, 3]] == 0).all()  # rows without the term
    for k in (0, 2, 4):
        i = int(batch[k])
        n = int(rollout.lengths[i])
        assert (grad[k, n:] == 0).all()
        clipped = loss[k, :n].detach() >= coef * clip - 1e-7
        assert (grad[k, :n][~clipped] > 0).all()  # the student gets the gradient ...
        assert (grad[k, :n][clipped] == 0).all()  # ... except where the JSD is clipped


def test_token_loss_under_the_rollout_policy_reproduces_the_assign_time_jsd():
    credit, rollout, scorer, _ = setup(micro_batch_size=3, clip=10.0)  # clip above ln 2: no clipping
    out = credit.assign(rollout, scorer)
    P = rollout.prompt_ids.shape[1]
    model_out = FakeLM()(
        rollout.input_ids, rollout.attention_mask, (rollout.attention_mask.cumsum(-1) - 1).clamp(min=0)
    )
    logits = model_out.logits[
        :, P - 1 : -1
    ]  # the module's slice: the student predicting each completion token
    loss = out.token_loss(logits, torch.arange(12))
    distilled = [i for i in range(12) if REWARDS[i] == 0]
    mask = rollout.completion_mask[distilled].bool()
    assert float(loss[distilled][mask].mean()) == pytest.approx(out.metrics["jsd_mean"], rel=1e-4)
    assert out.metrics["frac_clipped"] == 0.0
    assert 0 < out.metrics["jsd_mean"] < math.log(2)


def test_peer_state_is_checkpointed():
    credit, rollout, scorer, calls = setup(seed=4)
    state = credit.state_dict()
    credit.assign(rollout, scorer)
    again, rollout2, scorer2, calls2 = setup(seed=99)
    again.load_state_dict(state)
    again.assign(rollout2, scorer2)
    assert [c.tolist() for c in calls2[0][0]] == [c.tolist() for c in calls[0][0]]  # the same peers
    with pytest.raises(ValueError):
        HSDCredit(answer_template="{prompt}{reference}")


@pytest.mark.parametrize("apply_to", ["failed", "all"])
def test_top_k_equal_to_the_vocabulary_gives_the_dense_token_loss_and_gradient(apply_to):
    T = max(map(len, COMPLETIONS))
    batch = torch.tensor([3, 0, 7, 11, 5, 1])
    losses, grads = [], []
    for top_k in (None, V):
        credit, rollout, scorer, _ = setup(
            micro_batch_size=3, apply_to=apply_to, clip=10.0, teacher_top_k=top_k
        )
        out = credit.assign(rollout, scorer)
        logits = torch.randn(len(batch), T, V, generator=torch.Generator().manual_seed(5), requires_grad=True)
        loss = out.token_loss(logits, batch)
        loss.sum().backward()
        losses.append(loss.detach())
        grads.append(logits.grad)
        assert out.metrics["jsd_mean"] > 0
    assert losses[0].abs().sum() > 0
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_top_k_jsd_never_exceeds_the_dense_one_and_keeps_the_full_metric(k):
    T = max(map(len, COMPLETIONS))
    batch = torch.arange(12)
    logits = torch.randn(12, T, V, generator=torch.Generator().manual_seed(k))
    dense_credit, rollout, scorer, _ = setup(clip=10.0)
    dense = dense_credit.assign(rollout, scorer)
    sparse_credit, rollout, scorer, _ = setup(clip=10.0, teacher_top_k=k)
    sparse = sparse_credit.assign(rollout, scorer)
    assert sparse.metrics["jsd_mean"] == pytest.approx(dense.metrics["jsd_mean"], rel=1e-5)  # full-vocabulary
    a, b = sparse.token_loss(logits, batch), dense.token_loss(logits, batch)
    assert (a <= b + 1e-6).all() and (a >= 0).all()
    assert (a < b - 1e-6).any()  # merging tokens into the tail loses some divergence


def test_compare_top_k_keeps_the_most_likely_teacher_tokens_and_the_rest_as_tail():
    _, rollout, scorer, _ = setup()
    contexts = [torch.tensor([3, 4, MARK, 2]), torch.tensor([5, MARK])]
    full = scorer.compare(contexts, [1, 6], lambda t, s: t)  # [N, T, V] the dense teacher
    for k in (1, 4, V):
        jsd, top = scorer.compare(contexts, [1, 6], lambda t, s: t.exp().sum(-1), teacher_top_k=k)
        assert top.ids.shape == (12, full.shape[1], k)
        for row in (1, 6):
            n = int(rollout.lengths[row])
            ref_logp, ref_ids = full[row, :n].topk(k, dim=-1)
            torch.testing.assert_close(top.logp[row, :n], ref_logp)
            assert torch.equal(top.ids[row, :n], ref_ids)
            mass = top.logp[row, :n].exp().sum(-1) + top.tail[row, :n].exp()
            torch.testing.assert_close(mass, torch.ones(n))  # the k + 1 buckets are a distribution
            if k == V:
                assert torch.isinf(top.tail[row, :n]).all()
        torch.testing.assert_close(jsd, scorer.compare(contexts, [1, 6], lambda t, s: t.exp().sum(-1)))


def test_distill_aggregation_is_a_constructor_argument():
    credit, rollout, scorer, _ = setup(distill_agg="token_mean")
    assert credit.assign(rollout, scorer).token_loss_agg == "token_mean"
    credit, rollout, scorer, _ = setup()
    assert credit.assign(rollout, scorer).token_loss_agg is None  # the policy loss's loss_agg
    with pytest.raises(ValueError):
        HSDCredit(distill_agg="mean")
    with pytest.raises(ValueError):
        HSDCredit(teacher_top_k=0)


# ---------------------------------------------------------------------------- the update, end to end
COEF = 30.0  # large enough that the distillation term dominates the gradient being compared


def _hsd_update(**hsd_kwargs) -> tuple[dict, dict]:
    """One ``RLVRModule.update`` with HSD on a fixed rollout of the tiny policy.

    Returns the gradients the update produced and what the old formula needs to redo it.
    """
    from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
    from lightning_rlvr.scoring.scorer import Scorer
    from tests.rollouts import sample

    credit = HSDCredit(
        peer_template="{prompt}{reference};answer:{answer};{prompt}",
        answer_template="{prompt} answer:{answer};{prompt}",
        distill_coef=COEF,
        clip=0.3,
        **hsd_kwargs,
    )
    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    module = RLVRModule(
        task=AdditionTask(digits=1),
        policy=policy,
        credit=credit,
        group_size=4,
        max_new_tokens=8,
        micro_batch_size=3,
        validate_at_start=False,
    )
    module.model.eval()
    torch.manual_seed(0)
    rollout = sample(
        module.model, module.tokenizer, [module.task.problem("train", i) for i in range(2)], 4, 8
    )
    rollout.correct = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0]).bool()  # a mixed group and an all-failed one
    rollout.rewards = rollout.correct.float()
    scorer = Scorer(module.model, rollout, module.tokenizer, 3)
    calls = []
    compare = scorer.compare
    scorer.compare = lambda contexts, rows, fn, spans=None, **kw: (
        calls.append((contexts, rows)) or compare(contexts, rows, fn, spans, **kw)
    )
    out = module.credit.assign(rollout, scorer)
    grads: dict[str, Tensor] = {}
    opt = torch.optim.SGD(module.model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def record() -> float:
        grads.update({n: p.grad.clone() for n, p in module.model.named_parameters() if p.grad is not None})
        return 0.0

    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: sched)
    module.manual_backward = lambda loss: loss.backward()
    module._clip_gradients = record
    module.update(rollout, out, None, None)
    contexts, rows = calls[0]
    teacher = compare(contexts, rows, lambda t, s: t)  # [N, T, V] the dense teacher, as stored before
    return grads, {"module": module, "rollout": rollout, "credit": out, "teacher": teacher, "rows": rows}


def _old_formula_grads(ctx: dict, distill_weights: str = "seq_mean") -> dict:
    """The update before ``Credit.token_loss``, written out: seq-mean PG (ratio 1) + lambda * clipped JSD."""
    from lightning_rlvr.core.objectives import loss_weights
    from lightning_rlvr.scoring.logprobs import token_logprobs
    from lightning_rlvr.scoring.packing import causal_lm_forward

    module, rollout, credit = ctx["module"], ctx["rollout"], ctx["credit"]
    module.model.zero_grad(set_to_none=True)
    P = rollout.prompt_ids.shape[1]
    logits = causal_lm_forward(module.model, rollout.input_ids, rollout.attention_mask).logits[:, P - 1 : -1]
    logp = token_logprobs(logits, rollout.completion_ids)  # [N, T]
    mask = rollout.completion_mask.float()
    pg = -credit.advantages * torch.exp(logp - logp.detach())
    distilled = torch.zeros_like(mask)
    distilled[ctx["rows"]] = 1.0
    jsd = generalized_jsd(ctx["teacher"], F.log_softmax(logits.float(), -1), 0.5).clamp(max=0.3)
    distill = COEF * jsd * mask * distilled
    loss = (pg * loss_weights(mask, "seq_mean", 8)).sum() + (
        distill * loss_weights(mask, distill_weights, 8)
    ).sum()
    loss.backward()
    return {n: p.grad.clone() for n, p in module.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("top_k", [None, "V"])
def test_update_with_the_token_loss_matches_the_old_formula(top_k):
    V_tiny = None
    if top_k == "V":
        from lightning_rlvr import TinyPolicy

        V_tiny = len(TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64).load()[1])
    grads, ctx = _hsd_update(teacher_top_k=V_tiny)
    assert len(ctx["rows"]) == 6  # the failed rows
    old = _old_formula_grads(ctx)
    assert grads.keys() == old.keys() and any(g.abs().sum() > 0 for g in old.values())
    for name, g in old.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-7, msg=name)


def test_distill_token_mean_weights_the_term_by_the_minibatch_tokens():
    grads, ctx = _hsd_update(distill_agg="token_mean")
    old = _old_formula_grads(ctx, distill_weights="token_mean")
    for name, g in old.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-7, msg=name)
    seq = _old_formula_grads(ctx, distill_weights="seq_mean")
    assert any(not torch.allclose(grads[n], seq[n]) for n in seq)  # the choice changes the update
