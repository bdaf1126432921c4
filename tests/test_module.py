"""The module under bad input: a verifier that raises, a loss that turns NaN."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer

from lightning_rlvr import AdditionTask, RLVRDataModule, RLVRModule, TinyPolicy
from lightning_rlvr.credit import Credit, GRPOCredit
from lightning_rlvr.errors import RLVRError


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
