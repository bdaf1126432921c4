"""Truncated completions (the budget ran out before EOS) are their own metric in training and evaluation."""

from __future__ import annotations

import torch

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import completion_mask_from_ids

PAD, EOS = 0, 1


def _rollout(rows: list[list[int]]) -> Rollout:
    ids = torch.tensor(rows)
    return Rollout(
        prompt_ids=torch.ones(len(rows), 1, dtype=torch.long),
        prompt_mask=torch.ones(len(rows), 1, dtype=torch.long),
        completion_ids=ids,
        completion_mask=completion_mask_from_ids(ids, EOS),
        group=torch.zeros(len(rows), dtype=torch.long),
        problems=[Problem("q", "a")],
        completions=[""] * len(rows),
        pad_id=PAD,
        eos_id=EOS,
    )


def test_a_row_is_truncated_when_it_fills_the_budget_without_eos():
    rollout = _rollout([[5, 6, 7], [5, 6, EOS], [5, EOS, PAD], [EOS, PAD, PAD]])
    assert rollout.truncated(3).tolist() == [True, False, False, False]
    assert rollout.truncated(4).tolist() == [False] * 4  # the engine stopped early: nothing was cut
    short = _rollout([[5, 6], [5, EOS]])
    assert short.truncated(2).tolist() == [True, False]


def test_training_validation_and_test_log_the_truncated_share(run_cli):
    """At a budget of 2 tokens an untrained tiny model almost never writes EOS in time."""
    cli = run_cli("fit", "--model.warm_start", "null", "--model.max_new_tokens", "2")
    fit = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)
    test = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    for value in [fit["train/truncated_frac"], fit["val/truncated_frac"], test["test/truncated_frac"]]:
        assert 0.5 < value <= 1.0
