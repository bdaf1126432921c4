"""The module under bad input: a verifier that raises, a loss that turns NaN."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer

from lightning_rlvr import AdditionTask, RLVRDataModule, RLVRModule, TinyPolicy
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.problem import Verdict
from lightning_rlvr.credit import Credit, GRPOCredit


def tiny_module(**kwargs) -> RLVRModule:
    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    return RLVRModule(policy=policy, group_size=4, max_new_tokens=12, micro_batch_size=8, **kwargs)


def trainer(tmp_path, steps: int) -> Trainer:
    return Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    )


class FlakyTask(AdditionTask):
    """Raises on every other completion; the run must go on with reward 0 for those."""

    def __init__(self):
        super().__init__(digits=1)
        self.calls = 0

    def check(self, completion, problem):
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("verifier crashed")
        return super().check(completion, problem)


def test_a_raising_verifier_is_counted_and_training_goes_on(tmp_path):
    module = tiny_module(task=FlakyTask())
    trainer(tmp_path, 2).fit(module, RLVRDataModule(batch_size=2, val_size=2))
    assert module.rl_step == 2
    assert module.verifier_errors == 8  # half of 2 steps x 2 prompts x 4 completions


class NaNCredit(GRPOCredit):
    def assign(self, rollout, scorer):
        return Credit(advantages=torch.full(rollout.completion_ids.shape, float("nan")))


def test_nan_loss_skips_updates_then_stops_with_a_clear_error(tmp_path):
    module = tiny_module(task=AdditionTask(digits=1), credit=NaNCredit(), max_nonfinite_updates=3)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(RLVRError, match="NaN/inf in 3 consecutive updates"):
        trainer(tmp_path, 10).fit(module, RLVRDataModule(batch_size=2, val_size=2))
    assert module.rl_step == 2  # two steps were skipped, the third raised
    for k, v in module.state_dict().items():
        assert torch.equal(v, before[k]), k  # no NaN reached the weights


def test_prompt_format_shapes_what_the_policy_sees():
    from lightning_rlvr.prompts import PromptFormat

    module = tiny_module(
        task=AdditionTask(digits=1), prompt_format=PromptFormat(template="Q 1+1= 2;{prompt}")
    )
    problem = AdditionTask(digits=1).problem("train", 0)
    rollout = module.rollout([problem], 2)
    assert module.tokenizer.decode(rollout.prompt_tokens(0)) == "Q 1+1= 2;" + problem.prompt


def test_iterating_the_loaders_leaves_the_training_rng_alone():
    """A validation between a checkpoint and the next step must not shift the sampling stream (resume)."""
    from types import SimpleNamespace

    module = tiny_module()
    data = RLVRDataModule(batch_size=2, val_size=4, test_size=4, eval_batch_size=2)
    data.trainer = SimpleNamespace(lightning_module=module, global_rank=0, world_size=1)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    for loader in (data.val_dataloader(), data.test_dataloader(), data.val_dataloader()):
        assert len(list(loader)) == 2
    next(iter(data.train_dataloader()))
    assert torch.equal(torch.get_rng_state(), before)


class ConstantCredit(GRPOCredit):
    """Every token of every rollout pushed by the same advantage."""

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def assign(self, rollout, scorer):
        return Credit(advantages=torch.full(rollout.completion_ids.shape, self.value))


class DownweightCorrect(GRPOCredit):
    """GRPO's advantages, with the correct rollouts' tokens weighted by 0.1 (a net push down)."""

    def assign(self, rollout, scorer):
        credit = super().assign(rollout, scorer)
        credit.advantages = torch.where(credit.advantages > 0, 0.1 * credit.advantages, credit.advantages)
        return credit


class EvenLengthTask(AdditionTask):
    """Correct iff the completion has an even number of characters: mixed outcomes in every group
    of an untrained policy, so group advantages are not all 0."""

    def __init__(self):
        super().__init__(digits=1)

    def check(self, completion, problem):
        return Verdict(float(len(completion) % 2 == 0), "")


CASES = [(ConstantCredit(-0.5), "exact"), (ConstantCredit(2.0), "exact"), (GRPOCredit(), 0)]
CASES += [(DownweightCorrect(), -1)]


IDS = ["constant-neg", "constant-pos", "grpo", "downweighted-correct"]


@pytest.mark.parametrize("credit, sign", CASES, ids=IDS)
def test_the_net_advantage_says_which_way_the_update_pushes(credit, sign, tmp_path):
    """train/advantage is the loss-weighted mean token advantage: a constant for a constant credit, ~0 for
    GRPO's group-standardised advantages under seq_mean, negative when correct rollouts weigh less."""
    torch.manual_seed(0)
    module = tiny_module(task=EvenLengthTask(), credit=credit)
    trainer(tmp_path, 1).fit(module, RLVRDataModule(batch_size=4, val_size=2))
    assert float(module.trainer.callback_metrics["train/frac_zero_std"]) < 1.0  # some group has both outcomes
    net = float(module.trainer.callback_metrics["train/advantage"])
    size = float(module.trainer.callback_metrics["train/advantage_abs"])
    if sign == "exact":
        assert net == pytest.approx(credit.value, rel=1e-5)
        assert size == pytest.approx(abs(credit.value), rel=1e-5)
    elif sign == 0:
        assert size > 0.1 and abs(net) <= 1e-5 * size
    else:
        assert size > 0 and net < -0.1 * size  # the failed rollouts' push dominates


@pytest.mark.parametrize("share", [False, True])
def test_one_switch_turns_prompt_sharing_off_in_the_update_and_the_scorer(share, monkeypatch):
    """What each pass runs, not an attribute: the update's micro-batches run a group's prompt once (``heads``)
    exactly when the switch is on, and so does the scorer's policy pass."""
    import lightning_rlvr.scoring.scorer as scorer_module

    real, scorer_batches = scorer_module.micro_batches, []

    def recording(*args, **kwargs):
        scorer_batches.extend(real(*args, **kwargs))
        return scorer_batches[-len(real(*args, **kwargs)) :]

    monkeypatch.setattr(scorer_module, "micro_batches", recording)
    module = tiny_module(task=AdditionTask(digits=1), share_prompts=share)
    torch.manual_seed(0)
    rollout = module.rollout([module.task.problem("train", i) for i in range(2)], 4)  # 2 prompts x 4 rows
    update_batches = module.micro_batches(rollout, torch.arange(rollout.num_rows))
    module.scorer(module.model, rollout).policy()
    assert update_batches and scorer_batches
    assert any(mb.heads is not None for mb in update_batches) is share
    assert any(mb.heads is not None for mb in scorer_batches) is share


def test_how_often_validation_runs_does_not_change_training(tmp_path):
    """Validation samples from a forked RNG and its loaders draw from their own generators, so a run that
    validates every step trains exactly as one that never does (a sweep may validate more often than the
    lr tuning that chose its rates)."""
    weights = []
    for every in (1, None):
        torch.manual_seed(0)
        module = tiny_module(task=EvenLengthTask(), validate_at_start=every is not None)  # mixed groups
        start = {k: v.clone() for k, v in module.state_dict().items()}
        Trainer(
            max_steps=3,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=tmp_path,
            limit_val_batches=1 if every else 0,
            val_check_interval=every or 1,
        ).fit(module, RLVRDataModule(batch_size=2, val_size=2, eval_batch_size=2))
        weights.append({k: v.clone() for k, v in module.state_dict().items()})
        assert module.rl_step == 3 and any(not torch.equal(v, start[k]) for k, v in weights[-1].items())
    assert weights[0].keys() == weights[1].keys()
    for k in weights[0]:
        assert torch.equal(weights[0][k], weights[1][k]), k
