"""Two FSDP2 ranks (torchrun, gloo): a teacher method whose views all sit on one rank does not hang.

HSD distils only failed rollouts. Rank 0's rollouts are all failed (every row a view), rank 1's
all correct (no view): rank 1 must still run every forward rank 0 runs (the policy pass the
student distributions come from, and one teacher forward per micro-batch), or the FSDP
all-gathers fall out of step. Run once with the student distributions cached and once with the
cache disabled (the student forward then runs per micro-batch). A hang trips the process group's
60 s timeout, so the process (and the test) fails instead of waiting.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import ModelParallelStrategy

import lightning_rlvr.module as module_file
from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.core.distributed import rank
from lightning_rlvr.credit.hsd import HSDCredit
from lightning_rlvr.data import RLVRDataModule
from lightning_rlvr.scoring.scorer import Scorer


class UncachedScorer(Scorer):
    """The student's distributions never fit the cache: one student forward per micro-batch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cache_bytes = 0


class SplitVerdicts(RLVRModule):
    """Rank 0: every rollout wrong; rank 1: every rollout right. Records the credit metrics."""

    seen: dict = {}

    def collect(self, problems):
        collected, stats = super().collect(problems)
        r = collected.rollout
        r.correct = torch.full_like(r.correct, rank() == 1)
        r.rewards = r.correct.float()
        return collected, stats

    def update(self, rollout, credit, old_logp, ref_logp, forwards=None):
        self.seen = dict(credit.metrics)
        return super().update(rollout, credit, old_logp, ref_logp, forwards)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uncached", action="store_true")
    args = parser.parse_args()
    if args.uncached:
        module_file.Scorer = UncachedScorer
    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    model = SplitVerdicts(
        task=AdditionTask(digits=1),
        policy=policy,
        credit=HSDCredit(answer_template="{prompt}{answer}"),
        group_size=4,
        max_new_tokens=12,
        micro_batch_size=2,
        validate_at_start=False,
    )
    fsdp = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1, timeout=timedelta(seconds=60))
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy=fsdp,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, RLVRDataModule(batch_size=2, val_size=0, test_size=4))
    distilled = model.seen["frac_distilled_rows"]
    assert distilled == (1.0 if rank() == 0 else 0.0), (rank(), model.seen)
    assert model.rl_step == 2, model.rl_step
    print(f"rank {rank()}: 2 steps, distilled share {distilled}")


if __name__ == "__main__":
    main()
