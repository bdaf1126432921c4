"""HP-RLVR: bounded JSD weights, hindsight contexts without the scored token, a checkpointed baseline.

The fake policies here make the next-token distribution a known function of
the context: ``MarkerLM`` puts all its mass on token A once a hindsight marker
(the verdict token) has been seen and on token B before, so the causal and
hindsight views disagree completely (w_t = 1) exactly when the hindsight
context holds the marker; ``RecordingLM`` records every sequence it is run on.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import completion_mask_from_ids
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit, normalized_jsd, prompt_key, split_steps
from lightning_rlvr.data import RLVRDataModule
from lightning_rlvr.models import TinyPolicy
from lightning_rlvr.module import RLVRModule
from lightning_rlvr.scoring.scorer import Scorer
from lightning_rlvr.tasks.addition import AdditionTask
from tests.rollouts import rollout_from_ids

# A vocabulary where every content token is unique and several distinct tokens contain the delimiter ";".
VOCAB = ["<pad>", "<eos>", " ", ",", "=", "P", "F", "A", "B", ";"]
VOCAB += [f"w{i}" for i in range(40)] + [f";{i}" for i in range(10)]
ID = {t: i for i, t in enumerate(VOCAB)}
PAD, EOS, MARKERS, A, B = ID["<pad>"], ID["<eos>"], (ID["P"], ID["F"]), ID["A"], ID["B"]
V = len(VOCAB)


class CharTok:
    """Encodes text one character per token; decodes ids to their strings."""

    all_special_ids = [PAD, EOS]

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ID[c] for c in text]}

    def __len__(self) -> int:
        return V

    def batch_decode(self, seqs: list[list[int]]) -> list[str]:
        return ["".join(VOCAB[i] for i in s) for s in seqs]


class MarkerLM:
    """Predicts A (logit 50) at every position at or after a P/F token in the context, else B."""

    def __call__(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        seen = torch.isin(input_ids, torch.tensor(MARKERS)).long().cumsum(-1) > 0  # [n, L]
        target = torch.where(seen, A, B)
        return SimpleNamespace(logits=50.0 * F.one_hot(target, V).float())


class RecordingLM:
    """Uniform predictions; keeps every (input_ids, attention_mask) batch it is called on."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        self.calls.append((input_ids.clone(), attention_mask.clone()))
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, V))


def w(*names: str) -> list[int]:
    return [ID[n] for n in names]


def make_rollout(
    prompts: list[str],
    prompt_ids: list[list[int]],
    completions: list[list[int]],
    rewards: list[float],
    G: int = 1,
) -> Rollout:
    return rollout_from_ids(
        prompt_ids, completions, pad=PAD, eos=EOS, group_size=G, prompts=prompts, rewards=rewards, extra_pad=1
    )


def marker_credit(**kw) -> HPRLVRCredit:
    args = dict(step_delimiter=";", max_steps=3, hindsight_template="{verdict}", separator="")
    args.update(pass_text="P", fail_text="F")
    args.update(kw)
    return HPRLVRCredit(**args)


# ---------------------------------------------------------------------------------------------- JSD
def test_jsd_is_bounded_zero_for_identical_one_for_disjoint_and_matches_hand_value():
    g = torch.Generator().manual_seed(0)
    lp = F.log_softmax(3 * torch.randn(200, 7, generator=g), -1)
    lq = F.log_softmax(3 * torch.randn(200, 7, generator=g), -1)
    w_rand = normalized_jsd(lq, lp)
    assert w_rand.shape == (200,)
    assert (w_rand >= 0).all() and (w_rand <= 1).all() and w_rand.max() > 0.3
    torch.testing.assert_close(w_rand, normalized_jsd(lp, lq))  # symmetric
    assert normalized_jsd(lp, lp).abs().max() < 1e-6
    disjoint_p = torch.log(torch.tensor([0.5, 0.5, 0.0, 0.0]))  # exact zeros: log 0 = -inf
    disjoint_q = torch.log(torch.tensor([0.0, 0.0, 0.25, 0.75]))
    assert normalized_jsd(disjoint_q, disjoint_p).item() == 1.0
    # p = (1, 0), q = (1/2, 1/2), m = (3/4, 1/4): JSD = 1/2 ln(4/3) + 1/2 (1/2 ln(2/3) + 1/2 ln 2)
    hand = 0.5 * math.log(4 / 3) + 0.5 * (0.5 * math.log(2 / 3) + 0.5 * math.log(2))
    got = normalized_jsd(torch.log(torch.tensor([0.5, 0.5])), torch.log(torch.tensor([1.0, 0.0])))
    assert got.item() == pytest.approx(hand / math.log(2), abs=1e-6)


def test_split_steps_ends_a_step_at_its_delimiter_and_merges_contiguously():
    # a b ; c d ; e  ->  [a b ;] [c d ;] [e]
    is_delim = torch.tensor([0, 0, 1, 0, 0, 1, 0]).bool()
    assert split_steps(is_delim, 8).tolist() == [0, 0, 0, 1, 1, 1, 2]
    # 5 raw steps into at most 2: raw step j -> floor(2 j / 5) = 0 0 0 1 1
    five = torch.tensor([1, 1, 1, 1, 0]).bool()
    assert split_steps(five, 2).tolist() == [0, 0, 0, 1, 1]
    assert split_steps(five, 1).tolist() == [0] * 5


# ---------------------------------------------------------------------------------------------- contexts
ROW0 = w("w10", "w11", ";0", "w12", "w13", ";1", "w14") + [EOS]  # steps [w10 w11 ;0] [w12 w13 ;1] [w14 EOS]
ROW1 = w("w20", ";2", "w21", ";3", "w22", ";4", "w23", ";5", "w24") + [EOS]  # 5 raw steps -> 3


def test_hindsight_context_holds_future_and_verdict_never_the_scored_step():
    rollout = make_rollout(["x", "y"], [w("w0", "w1"), w("w2")], [ROW0, ROW1], rewards=[1.0, 0.0])
    credit = HPRLVRCredit(
        step_delimiter=";",
        max_steps=3,
        hindsight_template=" {future},{verdict}",
        separator="=",
        pass_text="P",
        fail_text="F",
    )
    model = RecordingLM()
    scorer = Scorer(model, rollout, CharTok(), micro_batch_size=64)
    contexts, rows, spans = credit.views(rollout, scorer)
    assert rows == [0, 0, 0, 1, 1, 1]
    assert spans == [(0, 3), (3, 6), (6, 8), (0, 4), (4, 8), (8, 10)]  # row 1: raw steps merged 2 + 2 + 1
    # row 0, step 0, by hand: prompt, " ", the later steps without EOS, ",", verdict P, separator "="
    assert contexts[0].tolist() == w("w0", "w1", " ", "w12", "w13", ";1", "w14", ",", "P", "=")
    assert contexts[5].tolist() == w("w2", " ", ",", "F", "=")  # the last step has no future
    for ctx, row, (start, end) in zip(contexts, rows, spans):
        comp = rollout.completion_tokens(row).tolist()
        ctx = ctx.tolist()
        assert not set(ctx) & set(comp[start:end]), "a token of the scored step is in its hindsight context"
        future = [t for t in comp[end:] if t != EOS]
        n = len(rollout.prompt_tokens(row)) + 1
        assert ctx[n : n + len(future)] == future  # steps k+1..K, in order, right after the prompt

    credit.assign(rollout, scorer)
    assert [c[0].shape[0] for c in model.calls] == [2, len(rows)]  # the rollout's own pass, then the views
    ids, mask = model.calls[1]  # the hindsight views
    for j, (ctx, row, (start, end)) in enumerate(zip(contexts, rows, spans)):
        seq = ids[j][mask[j].bool()].tolist()
        comp = rollout.completion_tokens(row).tolist()
        assert seq == ctx.tolist() + comp[:end]  # the appended causal prefix stops at the step's end
        for t in range(start, end):
            seen = seq[: len(ctx) + t]  # what the logit predicting completion token t is computed from
            assert comp[t] not in seen


def test_identical_contexts_give_zero_weight_and_hindsight_marker_full_weight():
    rollout = make_rollout(["x", "y"], [w("w0", "w1"), w("w2")], [ROW0, ROW1], rewards=[1.0, 0.0])
    mask = rollout.completion_mask.bool()
    same = marker_credit(hindsight_template="", separator="")  # the hindsight view is the causal view
    credit = same.assign(rollout, Scorer(MarkerLM(), rollout, CharTok()))
    assert credit.advantages.abs().max() == 0.0
    assert credit.metrics["weight_mean"] == 0.0 and credit.metrics["frac_zero_grad"] == 1.0
    credit = marker_credit().assign(rollout, Scorer(MarkerLM(), rollout, CharTok()))
    # w = 1 on every completion token; r - b = 1 - 0.5 and 0 - 0.5
    expected = torch.tensor([0.5, -0.5])[:, None] * mask
    torch.testing.assert_close(credit.advantages, expected)
    assert credit.metrics["weight_mean"] == pytest.approx(1.0)
    assert credit.metrics["frac_zero_grad"] == 0.0
    assert credit.metrics["steps_mean"] == 3.0


def test_identical_contexts_give_zero_weight_with_a_real_transformer():
    model, tok = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64).load()
    model.eval()
    with torch.no_grad():  # sharpen the random initialisation so that contexts matter
        for p in model.parameters():
            p.mul_(4.0)
    prompts = ["Q 3+4=", "Q 25+9="]
    texts = [" 3+4+0=07; answer:7", " 5+9+0=14;2+0+1=03; answer:34"]
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    c_ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    rollout = make_rollout(prompts, p_ids, c_ids, rewards=[1.0, 0.0])
    rollout.pad_id, rollout.eos_id = tok.pad_token_id, tok.eos_token_id
    rollout.completion_ids[rollout.completion_mask == 0] = tok.pad_token_id
    rollout.prompt_ids[rollout.prompt_mask == 0] = tok.pad_token_id
    rollout.completion_mask = completion_mask_from_ids(rollout.completion_ids, tok.eos_token_id)
    rollout.completion_mask *= (rollout.completion_ids != tok.pad_token_id).long()
    same = HPRLVRCredit(step_delimiter=";", hindsight_template="", separator="")
    credit = same.assign(rollout, Scorer(model, rollout, tok))
    assert credit.metrics["steps_mean"] == 2.5  # 2 and 3 ";"-delimited steps
    assert 0.0 <= credit.metrics["weight_mean"] < 1e-5
    assert credit.advantages.abs().max() < 1e-5
    other = HPRLVRCredit(
        step_delimiter=";",
        hindsight_template=" {future},{verdict}",
        separator="=",
        pass_text="1",
        fail_text="0",
    )
    assert other.assign(rollout, Scorer(model, rollout, tok)).metrics["weight_mean"] > 1e-3


# ---------------------------------------------------------------------------------------------- baseline
def test_baseline_moving_average_global_init_and_state_round_trip(tmp_path):
    credit = marker_credit()
    r1 = make_rollout(["a", "b"], [w("w0"), w("w1")], [ROW0, ROW1], rewards=[1.0, 1.0])
    c1 = credit.assign(r1, Scorer(MarkerLM(), r1, CharTok()))  # w = 1 everywhere: c = r - b
    torch.testing.assert_close(c1.advantages, 0.5 * r1.completion_mask.float())  # b = 0.5 before any reward
    table = dict(zip(credit.state_dict()["keys"], credit.state_dict()["values"]))
    assert table == pytest.approx({prompt_key("a"): 0.55, prompt_key("b"): 0.55})  # 0.9 * 0.5 + 0.1 * 1
    assert (credit.global_mean, credit.global_count) == (1.0, 2)

    r2 = make_rollout(["a", "c"], [w("w0"), w("w2")], [ROW0, ROW1], rewards=[0.0, 1.0])
    c2 = credit.assign(r2, Scorer(MarkerLM(), r2, CharTok()))
    # a: reward 0 against its own b = 0.55; c: new prompt, initialised at the global mean 1.0
    expected = torch.tensor([-0.55, 0.0])[:, None] * r2.completion_mask
    torch.testing.assert_close(c2.advantages, expected)
    assert c2.metrics["baseline_mean"] == pytest.approx((0.55 + 1.0) / 2)
    state = credit.state_dict()
    table = dict(zip(state["keys"], state["values"]))
    assert table == pytest.approx({prompt_key("a"): 0.495, prompt_key("b"): 0.55, prompt_key("c"): 1.0})
    assert state["global_mean"] == pytest.approx(0.75) and state["global_count"] == 4

    torch.save(state, tmp_path / "s.pt")  # a checkpoint loads with weights_only=True
    restored = marker_credit()
    restored.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    assert restored.state_dict() == state
    r3 = make_rollout(["c", "b"], [w("w2"), w("w1")], [ROW0, ROW1], rewards=[0.0, 0.0])
    a = credit.assign(r3, Scorer(MarkerLM(), r3, CharTok())).advantages
    b = restored.assign(r3, Scorer(MarkerLM(), r3, CharTok())).advantages
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, torch.tensor([-1.0, -0.55])[:, None] * r3.completion_mask)


def test_group_rows_share_the_pre_step_baseline_then_update_in_order():
    credit = marker_credit()
    r = make_rollout(["a"], [w("w0")], [ROW0, ROW1], rewards=[1.0, 0.0], G=2)
    adv = credit.assign(r, Scorer(MarkerLM(), r, CharTok())).advantages
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5])[:, None] * r.completion_mask)
    assert credit.state_dict()["values"] == pytest.approx([0.9 * (0.9 * 0.5 + 0.1) + 0.0])


def test_baseline_table_is_a_bounded_lru():
    credit = marker_credit(max_prompts=2)
    for prompts in (["a"], ["b"], ["a"], ["c"]):  # b is now least recently used
        r = make_rollout(prompts, [w("w0")], [ROW0], rewards=[1.0])
        credit.assign(r, Scorer(MarkerLM(), r, CharTok()))
    assert credit.state_dict()["keys"] == [prompt_key("a"), prompt_key("c")]
    smaller = marker_credit(max_prompts=1)
    smaller.load_state_dict(credit.state_dict())
    assert smaller.state_dict()["keys"] == [prompt_key("c")]


def test_baseline_table_survives_a_lightning_checkpoint(tmp_path):
    def module() -> RLVRModule:
        return RLVRModule(
            task=AdditionTask(digits=1),
            policy=TinyPolicy(layers=1, hidden=16, heads=2, intermediate=32, max_positions=64),
            credit=HPRLVRCredit(step_delimiter=";", hindsight_template=" {future},{verdict}", separator="="),
            group_size=1,
            max_new_tokens=8,
            validate_at_start=False,
        )

    trained = module()
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=1)
    trainer = Trainer(
        max_steps=2,
        limit_val_batches=0,
        logger=False,
        callbacks=[ckpt],
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(trained, RLVRDataModule(batch_size=3, val_size=1))
    state = trained.credit.state_dict()
    assert state["global_count"] == 6 and len(state["keys"]) == 6
    fresh = module()
    assert fresh.credit.state_dict()["keys"] == []
    fresh.on_load_checkpoint(torch.load(tmp_path / "last.ckpt", weights_only=True))
    assert fresh.credit.state_dict() == state
