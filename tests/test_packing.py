"""Padding-free passes: the same log-probs, gradients and SHEAR credit as the padded layout,
with each group's prompt run once (shared prompts) or once per row.

Rollouts are built by hand with ragged prompts and completions, including empty and
one-token completions and rows of the full width, so trimming and sorting have work to do.
The padded reference is written out here (one forward over the whole [N, P + T] layout),
independent of ``lightning_rlvr/scoring/packing.py``.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything

from lightning_rlvr import AdditionTask, RLVRDataModule, RLVRModule, TinyPolicy
from lightning_rlvr.collect import CollectedRollout
from lightning_rlvr.core.objectives import loss_weights
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.credit import Credit
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.credit.hsd import HSDCredit
from lightning_rlvr.credit.sc_grpo import SCGRPOCredit
from lightning_rlvr.credit.shear import SHEARCredit
from lightning_rlvr.credit.top_entropy import TopEntropyCredit
from lightning_rlvr.losses import CISPO, GSPO, PPOClip
from lightning_rlvr.models import apply_lora
from lightning_rlvr.scoring import packing
from lightning_rlvr.scoring.logprobs import entropy_from_logits, token_logprobs
from lightning_rlvr.scoring.mode import train_mode_matches_eval
from lightning_rlvr.scoring.packing import MicroBatch, causal_lm_forward, micro_batches, shares_prompts
from lightning_rlvr.scoring.packing import forward as packed_forward
from lightning_rlvr.scoring.scorer import Scorer
from tests.rollouts import rollout_from_ids

SHAPE = dict(layers=2, hidden=32, heads=2, intermediate=64, max_positions=64)
T_MAX = 10


def ragged_rollout(seed: int, n: int = 12, tokenizer=None, group_size: int = 4) -> Rollout:
    """n rows: prompts of 1-7 tokens, completions of 0, 1, T_MAX and random lengths (EOS-ended or cut)."""
    tok = tokenizer or TinyPolicy(**SHAPE).load()[1]
    pad, eos = tok.pad_token_id, tok.eos_token_id
    gen = torch.Generator().manual_seed(seed)
    vocab = [i for i in range(len(tok)) if i not in (pad, eos)]
    draw = lambda k: [vocab[int(j)] for j in torch.randint(len(vocab), (k,), generator=gen)]
    prompts = [draw(int(torch.randint(1, 8, (1,), generator=gen))) for _ in range(n // group_size)]
    lengths = [0, 1, T_MAX] + torch.randint(0, T_MAX + 1, (n - 3,), generator=gen).tolist()
    lengths = [lengths[int(i)] for i in torch.randperm(n, generator=gen)]
    completions = [draw(k - 1) + [eos] if k and j % 3 else draw(k) for j, k in enumerate(lengths)]  # some cut
    rewards = [float(j % 2) for j in range(n)]  # every group mixed
    r = rollout_from_ids(prompts, completions, pad=pad, eos=eos, group_size=group_size, rewards=rewards)
    if r.completion_ids.shape[1] < T_MAX:  # keep the layout T_MAX wide
        extra = T_MAX - r.completion_ids.shape[1]
        r.completion_ids = torch.nn.functional.pad(r.completion_ids, (0, extra), value=pad)
        r.completion_mask = torch.nn.functional.pad(r.completion_mask, (0, extra))
    return r


def padded_logits(model, r: Rollout) -> torch.Tensor:
    """The padded layout's logits of the completion tokens: [N, T, V]."""
    P = r.prompt_ids.shape[1]
    return causal_lm_forward(model, r.input_ids, r.attention_mask).logits[:, P - 1 : -1]


def prompt_of(r: Rollout, row: int) -> tuple:
    return tuple(r.prompt_tokens(row).tolist())


@pytest.mark.parametrize("share", [False, True], ids=["per-row", "shared"])
@pytest.mark.parametrize("max_rows, max_tokens", [(3, None), (128, 40), (5, 64), (1, None)])
def test_micro_batches_cover_every_row_once_within_budget_and_drop_only_padding(max_rows, max_tokens, share):
    for seed in range(5):
        r = ragged_rollout(seed, n=16)
        rows = torch.randperm(16, generator=torch.Generator().manual_seed(seed))[:13]
        batches = micro_batches(r, rows, max_rows, max_tokens, share=share)
        index = torch.cat([mb.index for mb in batches])
        assert sorted(index.tolist()) == list(range(len(rows)))
        p_len, c_len = r.prompt_mask.sum(-1), r.completion_mask.sum(-1)
        padded = real = 0
        for mb in batches:
            assert torch.equal(mb.rows, rows[mb.index])
            assert 1 <= len(mb.rows) <= max_rows
            assert mb.prompt == max(1, int(p_len[mb.rows].max())) and mb.width == int(c_len[mb.rows].max())
            prompts = {prompt_of(r, i) for i in mb.rows.tolist()}
            d = len(prompts) if share else len(mb.rows)  # prompts run: each distinct one once when shared
            if max_tokens is not None and len(mb.rows) > 1:
                assert d * mb.prompt + len(mb.rows) * mb.width <= max_tokens
            padded += d * mb.prompt + len(mb.rows) * mb.width
            real += sum(map(len, prompts)) if share else int(p_len[mb.rows].sum())
            real += int(c_len[mb.rows].sum())
            if mb.owner is None:  # per row: sharing off, or no prompt with two rows here, or nothing to run
                assert not share or len(prompts) == len(mb.rows) or mb.width == 0
            else:
                assert share and len(mb.heads) == len(prompts) < len(mb.rows)
                for j, i in enumerate(mb.rows.tolist()):
                    assert prompt_of(r, int(mb.heads[mb.owner[j]])) == prompt_of(r, i)
        assert padded >= real
        if share:  # the rows of one prompt sit in consecutive micro-batches
            held = [{prompt_of(r, i) for i in mb.rows.tolist()} for mb in batches]
            for prompt in {prompt_of(r, i) for i in rows.tolist()}:
                at = [k for k, prompts in enumerate(held) if prompt in prompts]
                assert at == list(range(at[0], at[-1] + 1))


@pytest.mark.parametrize("max_rows, max_tokens", [(3, None), (128, 40)])
def test_policy_pass_equals_the_padded_layout_and_is_zero_on_padding(max_rows, max_tokens):
    model, tok = TinyPolicy(**SHAPE).load()
    model.eval()
    for seed in range(3):
        r = ragged_rollout(seed, tokenizer=tok)
        scorer = Scorer(model, r, tok, micro_batch_size=max_rows, micro_batch_tokens=max_tokens)
        got = scorer.policy(hidden=True)
        with torch.no_grad():
            P = r.prompt_ids.shape[1]
            out = causal_lm_forward(model, r.input_ids, r.attention_mask, hidden=True)
            logits = out.logits[:, P - 1 : -1]
            mask = r.completion_mask.bool()
            want = {
                "logp": token_logprobs(logits, r.completion_ids),
                "entropy": entropy_from_logits(logits),
                "hidden": out.hidden_states[-1][:, P - 1 : -1].float(),
            }
        for name, value in want.items():
            have = getattr(got, name)
            assert have.shape == value.shape
            torch.testing.assert_close(have[mask], value[mask], rtol=1e-5, atol=1e-5, msg=name)
            assert not have[~mask].any(), f"{name} must be 0 on completion padding"
        assert scorer.forward_tokens == int(r.attention_mask.sum())  # only real tokens count


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _stub_optimiser(module: RLVRModule, record: dict) -> None:
    """One update without a Trainer; gradients recorded before the (zero-lr) step."""
    opt = torch.optim.SGD(module.model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: sched)
    module.manual_backward = lambda loss: loss.backward()

    def clip() -> float:
        record.update(_grads(module.model))
        return 0.0

    module._clip_gradients = clip


LOSSES = [PPOClip(loss_agg=a) for a in ("seq_mean", "token_mean", "constant")] + [
    GSPO(loss_agg="seq_mean"),
    CISPO(loss_agg="token_mean"),
]


@pytest.mark.parametrize("loss", LOSSES, ids=lambda x: f"{type(x).__name__}-{x.loss_agg}")
def test_padding_free_update_gradients_equal_the_padded_layout(loss):
    module = RLVRModule(
        task=AdditionTask(digits=1),
        policy=TinyPolicy(**SHAPE),
        loss=loss,
        max_new_tokens=T_MAX,
        micro_batch_size=4,
        micro_batch_tokens=48,
        validate_at_start=False,
    )
    for seed, with_old in ((0, False), (1, True)):
        r = ragged_rollout(seed, tokenizer=module.tokenizer)
        keep = torch.rand(r.completion_mask.shape, generator=torch.Generator().manual_seed(seed)) > 0.2
        r.policy_mask = keep.long()  # multi-turn: observation tokens get no loss
        mask = r.loss_mask.float()  # [N, T]
        adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed)) * mask
        module.model.zero_grad(set_to_none=True)
        logp = token_logprobs(padded_logits(module.model, r), r.completion_ids)  # [N, T] padded reference
        old = (
            (logp.detach() + 0.3 * torch.randn(mask.shape, generator=torch.Generator())) if with_old else None
        )
        tok, _ = loss(logp, logp.detach() if old is None else old, adv, mask)
        (tok * loss.weights(mask, T_MAX, lambda x: x)).sum().backward()
        want = _grads(module.model)
        module.model.zero_grad(set_to_none=True)
        got: dict = {}
        _stub_optimiser(module, got)
        module.update(r, Credit(advantages=adv), old, None)
        assert set(got) == set(want)
        for name, g in want.items():
            torch.testing.assert_close(got[name], g, rtol=1e-4, atol=1e-6, msg=name)
        assert any(g.abs().max() > 0 for g in want.values())


def test_a_token_loss_sees_full_width_logits_and_gets_the_same_gradients():
    module = RLVRModule(
        task=AdditionTask(digits=1),
        policy=TinyPolicy(**SHAPE),
        max_new_tokens=T_MAX,
        micro_batch_size=3,
        micro_batch_tokens=40,
        validate_at_start=False,
    )
    r = ragged_rollout(2, tokenizer=module.tokenizer)
    target = torch.randn(r.num_rows, T_MAX, len(module.tokenizer), generator=torch.Generator().manual_seed(0))

    def token_loss(logits, rows):  # [m, T, V] -> [m, T]
        assert logits.shape[1] == T_MAX
        return ((logits.float() - target[rows]) ** 2).mean(-1)

    zero = torch.zeros(r.num_rows, T_MAX)
    credit = Credit(advantages=zero, token_loss=token_loss, token_loss_agg="token_mean")
    mask = r.loss_mask.float()
    loss = token_loss(padded_logits(module.model, r), torch.arange(r.num_rows))
    (loss * loss_weights(mask, "token_mean", T_MAX, lambda x: x)).sum().backward()
    want = _grads(module.model)
    module.model.zero_grad(set_to_none=True)
    got: dict = {}
    _stub_optimiser(module, got)
    module.update(r, credit, None, None)
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=1e-4, atol=1e-6, msg=name)


# ---------------------------------------------------------------------------- SHEAR's hidden states, fused
class FixedRollout(RLVRModule):
    """Trains on one hand-built rollout; records the credit and the gradients of the update."""

    def __init__(self, rollout: Rollout, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fixed = rollout
        self.grads: dict = {}
        self.extra_tokens = None

    def collect(self, problems):
        return CollectedRollout(self.fixed, 0, 0.0, 0.0), {}

    def _clip_gradients(self) -> float:
        self.grads = _grads(self.model)
        return super()._clip_gradients()

    def update(self, rollout, credit, old_logp, ref_logp, forwards=None):
        self.credit_out, self.fused = credit, forwards is not None
        return super().update(rollout, credit, old_logp, ref_logp, forwards)


def _shear_step(tmp_path, fuse: bool, dropout: float = 0.0, credit=None) -> FixedRollout:
    policy = TinyPolicy(**SHAPE)
    tok = policy.load()[1]
    module = FixedRollout(
        ragged_rollout(3, n=16, tokenizer=tok),
        task=AdditionTask(digits=1),
        policy=policy,
        credit=credit or SHEARCredit(window=3, stride=1),
        max_new_tokens=T_MAX,
        micro_batch_size=5,
        micro_batch_tokens=64,
        fuse_policy_pass=fuse,
        validate_at_start=False,
        lr=1e-2,
    )
    module.model.config.attention_dropout = dropout
    Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    ).fit(module, RLVRDataModule(batch_size=2, val_size=2))
    module.extra_tokens = float(module.trainer.callback_metrics["perf/extra_forward_tokens"])
    assert float(module.trainer.callback_metrics["perf/fused_policy_pass"]) == float(module.fused)  # logged
    return module


@pytest.mark.parametrize(
    "make, teacher",
    [
        (lambda: SHEARCredit(window=3, stride=1), False),
        (lambda: TopEntropyCredit(0.3), False),
        (lambda: SCGRPOCredit(template="{reference};{prompt}"), True),
        (lambda: HSDCredit(peer_template="{reference};{prompt}", apply_to="all"), True),  # a token loss
        (lambda: HPRLVRCredit(step_delimiter="1", separator=";"), True),  # a view per step
    ],
    ids=["shear", "top_entropy", "sc_grpo", "hsd", "hp_rlvr"],
)
def test_credit_from_the_updates_own_forward_equals_a_separate_policy_pass(tmp_path, make, teacher):
    """SHEAR's hidden states, top-entropy's entropies and the self-conditioned teachers' student side
    (any credit that reads the policy pass) come from the update's own forwards: the same advantages and
    gradients as a separate pass, and the separate pass's tokens are gone (a teacher keeps its own)."""
    fused = _shear_step(tmp_path, fuse=True, credit=make())
    separate = _shear_step(tmp_path, fuse=False, credit=make())
    assert fused.fused and not separate.fused
    assert fused.extra_tokens < separate.extra_tokens  # the student / policy pass is gone
    assert (fused.extra_tokens > 0) == teacher  # what remains is the teacher's contexts, if any
    adv = separate.credit_out.advantages
    mask = separate.fixed.completion_mask.bool()  # token-level credit, not plain GRPO: a row's tokens differ
    token_level = (
        separate.credit_out.token_loss is None
    )  # HSD's credit is its token loss (its JSD as metrics)
    assert adv.abs().max() > 0 and any(len(a[m].unique()) > 1 for a, m in zip(adv, mask)) == token_level
    if not token_level:
        assert fused.credit_out.metrics["jsd_mean"] == pytest.approx(
            separate.credit_out.metrics["jsd_mean"], rel=1e-3
        )
    # A teacher's weight is a function of KL(teacher || student) between near-equal distributions, which
    # turns the two passes' float rounding (~1e-7 in a log-prob) into ~1e-4 of a weight; an off-by-one
    # student position would move the weights by their own size (~0.1-1).
    tol = {"rtol": 1e-3, "atol": 1e-3} if teacher else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(fused.credit_out.advantages, adv, **tol)
    assert set(fused.grads) == set(separate.grads)
    for name, g in separate.grads.items():
        torch.testing.assert_close(fused.grads[name], g, rtol=tol["rtol"], atol=tol["atol"] / 10, msg=name)


def test_dropout_keeps_the_separate_eval_mode_pass(tmp_path):
    module, _ = TinyPolicy(**SHAPE).load()
    assert train_mode_matches_eval(module)
    module.config.attention_dropout = 0.1
    assert not train_mode_matches_eval(module)
    assert not train_mode_matches_eval(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)))
    assert train_mode_matches_eval(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))
    step = _shear_step(tmp_path, fuse=True, dropout=0.1)
    assert not step.fused and step.extra_tokens > 0


# ---------------------------------------------------------------------------- shared prompts
def _unshared(mb: MicroBatch) -> MicroBatch:
    """The same rows and columns, run one prompt per row."""
    return MicroBatch(mb.index, mb.rows, mb.prompt, mb.width)


def _padded_hidden(model, r: Rollout) -> torch.Tensor:
    P = r.prompt_ids.shape[1]
    out = causal_lm_forward(model, r.input_ids, r.attention_mask, hidden=True)
    return out.hidden_states[-1][:, P - 1 : -1]


def _random_weights(r: Rollout, seed: int) -> torch.Tensor:
    """Per-token loss weights [N, T], 0 on completion padding."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(r.completion_mask.shape, generator=gen) * r.completion_mask


def test_shared_prompt_forward_equals_the_per_row_forward_and_the_padded_layout():
    model, tok = TinyPolicy(**SHAPE).load()
    cases = {"shared": 0, "split": 0, "one-token": 0, "empty": 0}
    sizes = [(128, None), (128, 40), (3, None), (5, 64)]  # (rows, tokens) per micro-batch
    for seed, (max_rows, max_tokens) in itertools.product(range(3), sizes):
        r = ragged_rollout(seed, tokenizer=tok)  # 3 groups of 4 rows, prompts of 1-7 tokens left-padded
        with torch.no_grad():
            ref, ref_h = padded_logits(model, r), _padded_hidden(model, r)  # [N, T, V], [N, T, H]
        batches = micro_batches(r, torch.arange(r.num_rows), max_rows, max_tokens, share=True)
        holders = [{prompt_of(r, i) for i in mb.rows.tolist()} for mb in batches]
        cases["split"] += sum(len(a & b) for a, b in zip(holders, holders[1:]))  # a group across batches
        for mb in batches:
            logits, hidden = packed_forward(model, r, mb, hidden=True)  # [m, T_m, V], [m, T_m, H]
            want, want_h = packed_forward(model, r, _unshared(mb), hidden=True)
            assert logits.shape == want.shape and hidden.shape == want_h.shape
            torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)  # every position, padding too
            torch.testing.assert_close(hidden, want_h, rtol=1e-5, atol=1e-5)
            mask = r.completion_mask[mb.rows, : mb.width].bool()
            torch.testing.assert_close(logits[mask], ref[mb.rows, : mb.width][mask], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(hidden[mask], ref_h[mb.rows, : mb.width][mask], rtol=1e-5, atol=1e-5)
            if mb.owner is not None:
                lengths = r.completion_mask[mb.rows].sum(-1).tolist()
                cases["shared"] += 1
                cases["one-token"] += lengths.count(1)
                cases["empty"] += lengths.count(0)
    assert all(cases.values()), cases  # every class of input met the shared path


def _weighted_logp_grads(model, r: Rollout, batches, weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of sum(weights * log-probs of the completion tokens), one backward per micro-batch."""
    model.zero_grad(set_to_none=True)
    for mb in batches:
        logits, _ = packed_forward(model, r, mb)
        logp = token_logprobs(logits, r.completion_ids[mb.rows, : mb.width])  # [m, T_m]
        (logp * weights[mb.rows, : mb.width]).sum().backward()
    return _grads(model)


def _assert_same_grads(got: dict, want: dict, rtol: float = 1e-5) -> None:
    """Equal up to float rounding: ``rtol`` of each element, and of the tensor's largest one near 0."""
    assert set(got) == set(want) and any(g.abs().max() > 0 for g in want.values())
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=rtol, atol=rtol * float(g.abs().max()), msg=name)


@pytest.mark.parametrize("max_tokens", [None, 40])
def test_shared_prompt_gradients_equal_the_padded_layout(max_tokens):
    model, tok = TinyPolicy(**SHAPE).load()
    for seed in range(2):
        r = ragged_rollout(seed, tokenizer=tok)
        weights = _random_weights(r, seed)  # [N, T]
        model.zero_grad(set_to_none=True)
        (token_logprobs(padded_logits(model, r), r.completion_ids) * weights).sum().backward()
        want = _grads(model)
        batches = micro_batches(r, torch.arange(r.num_rows), 128, max_tokens, share=True)
        assert any(mb.owner is not None for mb in batches)
        _assert_same_grads(_weighted_logp_grads(model, r, batches, weights), want)


def test_shared_prompts_fall_back_where_they_cannot_apply():
    model, tok = TinyPolicy(**SHAPE).load()
    assert shares_prompts(model) and not shares_prompts(model, enabled=False)
    no_cache = torch.nn.Linear(2, 2)  # no KV cache to continue from
    assert not shares_prompts(no_cache)
    # no prompt with two rows: the shared batching is the per-row one, and runs per row
    r = ragged_rollout(4, n=16, tokenizer=tok, group_size=1)
    first = {prompt_of(r, i): i for i in reversed(range(r.num_rows))}  # random prompts may repeat
    rows = torch.tensor(sorted(first.values()))  # one row per distinct prompt
    assert len(rows) > 8
    for max_tokens in (None, 40):
        shared, plain = (micro_batches(r, rows, 128, max_tokens, share=s) for s in (True, False))
        assert [mb.rows.tolist() for mb in shared] == [mb.rows.tolist() for mb in plain]
        assert all(mb.owner is None for mb in shared)
    # gradient checkpointing (Hugging Face drops the KV cache under it): per-row, same gradients
    r = ragged_rollout(0, tokenizer=tok)
    weights = _random_weights(r, 0)
    batches = micro_batches(r, torch.arange(r.num_rows), 128, share=True)
    want = _weighted_logp_grads(model, r, batches, weights)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model.train()
    assert not shares_prompts(model)
    batches = micro_batches(r, torch.arange(r.num_rows), 128, share=shares_prompts(model))
    assert all(mb.owner is None for mb in batches)
    _assert_same_grads(_weighted_logp_grads(model, r, batches, weights), want)


def test_shared_prompts_with_lora_train_the_adapters_alike():
    model, tok = TinyPolicy(**SHAPE).load()
    model = apply_lora(model, {"r": 4, "init_lora_weights": False})  # B != 0: every adapter gets a gradient
    assert shares_prompts(model)
    r = ragged_rollout(1, tokenizer=tok)
    weights = _random_weights(r, 1)
    rows = torch.arange(r.num_rows)
    shared = micro_batches(r, rows, 128, 40, share=True)
    assert any(mb.owner is not None for mb in shared)
    got = _weighted_logp_grads(model, r, shared, weights)
    assert got and all("lora_" in name for name in got)
    _assert_same_grads(got, _weighted_logp_grads(model, r, [_unshared(mb) for mb in shared], weights))


def test_a_fit_with_shared_prompts_makes_the_weights_of_a_fit_without(tmp_path, monkeypatch):
    calls = []
    shared_forward = packing._shared_forward
    monkeypatch.setattr(packing, "_shared_forward", lambda *a: calls.append(1) or shared_forward(*a))
    policy = TinyPolicy(**SHAPE)
    start, tok = policy.load()
    rollout = ragged_rollout(3, n=16, tokenizer=tok)  # every group has mixed rewards: the weights move
    weights, lr = {}, 1e-2
    for share in (True, False):
        calls.clear()
        seed_everything(0)
        module = FixedRollout(
            rollout,
            task=AdditionTask(digits=1),
            policy=policy,
            max_new_tokens=T_MAX,
            micro_batch_size=5,
            micro_batch_tokens=48,
            share_prompts=share,
            validate_at_start=False,
            lr=lr,
        )
        Trainer(
            max_steps=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            default_root_dir=tmp_path,
        ).fit(module, RLVRDataModule(batch_size=2, val_size=2))
        weights[share] = module.model.state_dict()
        assert bool(calls) == share
    start = start.state_dict()
    moved = [float((w - start[k]).abs().max()) for k, w in weights[True].items()]
    assert min(moved) > 0.5 * lr  # every weight tensor moved by about a step or more
    for name, w in weights[False].items():
        # Adam moves a weight ~lr whatever its gradient's size, so a gradient near 0 that differs in
        # the last bits moves it by a little more or less: a tolerance of 1/1000 of a step
        torch.testing.assert_close(weights[True][name], w, rtol=0, atol=1e-3 * lr, msg=name)
