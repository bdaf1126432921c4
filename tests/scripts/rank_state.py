"""Two FSDP2 ranks (torchrun, gloo): a non-finite loss on one rank skips the update on both, and
per-rank credit-assigner state survives a checkpoint and a resume, each rank getting its own back.

1. One RL step of HP-RLVR (G = 1) where rank 1's advantages are NaN: both ranks must skip the
   optimiser step (no hang on the FSDP collectives, weights unchanged on both).
2. Each rank's HP-RLVR baseline table differs (the ranks saw different prompts); the checkpoint
   written by rank 0 must hold both, and a fresh module resumed from it must restore each rank's own.
Any failed check raises, so the process (and the test) fails.
"""

from __future__ import annotations

import argparse
import os

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import ModelParallelStrategy

from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.core.distributed import rank
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.data import RLVRDataModule


def policy() -> TinyPolicy:
    return TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)


class PoisonedOnRankOne(RLVRModule):
    """Rank 1's token advantages are NaN in the first update; records what the update reports."""

    stats: dict = {}

    def update(self, rollout, credit, old_logp, ref_logp, forwards=None):
        if rank() == 1:
            credit.advantages = credit.advantages * float("nan")
        self.stats = super().update(rollout, credit, old_logp, ref_logp, forwards)
        return self.stats


def module() -> RLVRModule:
    credit = HPRLVRCredit(
        step_delimiter=";",
        hindsight_template=" {future},{verdict}",
        separator="=",
        pass_text="1",
        fail_text="0",
    )
    return PoisonedOnRankOne(
        task=AdditionTask(digits=1),
        policy=policy(),
        credit=credit,
        group_size=1,
        max_new_tokens=12,
        lr=1e-2,
        validate_at_start=False,
    )


def trainer(batches: int) -> Trainer:
    """One epoch of ``batches`` steps (a skipped update does not count as an optimiser step)."""
    fsdp = ModelParallelStrategy(
        data_parallel_size=2, tensor_parallel_size=1, save_distributed_checkpoint=False
    )
    return Trainer(
        accelerator="cpu",
        devices=2,
        strategy=fsdp,
        max_epochs=1,
        limit_train_batches=batches,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def full_state(model) -> dict:
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach()
        for k, v in model.state_dict().items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    args = parser.parse_args()
    r = int(os.environ["RANK"])

    # ---- 1. a NaN on one rank skips the update on every rank
    first = module()
    first_trainer = trainer(1)
    first_trainer.fit(first, RLVRDataModule(batch_size=4))
    assert first.stats["skipped_updates"] == 1.0, (r, first.stats)
    init = policy().load()[0].state_dict()
    for name, value in full_state(first.model).items():
        assert torch.equal(value, init[name]), (r, name)  # no rank stepped

    # ---- 2. per-rank assigner state: saved by all, restored to each
    mine = first.credit.state_dict()
    assert mine["keys"], "the step must have filled the baseline table"
    first_trainer.save_checkpoint(args.ckpt)  # collective; rank 0 writes the file
    if r == 0:
        entry = torch.load(args.ckpt, weights_only=False)["callbacks"][first.credit.state_key]
        both = entry["per_rank"]
        assert len(both) == 2 and both[0] == mine and both[0]["keys"] != both[1]["keys"], entry
    resumed = module()
    trainer(0).fit(resumed, RLVRDataModule(batch_size=4), ckpt_path=args.ckpt)  # restores, trains nothing
    assert resumed.credit.state_dict() == mine, (r, resumed.credit.state_dict(), mine)
    print("ok", r)


if __name__ == "__main__":
    main()
