"""One RL update on fixed rollouts, on 1 process or on W processes under FSDP2 (launched by torchrun).

Every process samples the same B groups with the same seed before sharding;
rank r then trains on its block of B/W groups. The gradients and the
parameters after one update are written (rank 0) to ``--out`` for each loss aggregation, so a test
can compare W ranks with B/W prompts each against one rank with B prompts.
"""

from __future__ import annotations

import argparse
import os

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import ModelParallelStrategy

from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.collect import CollectedRollout
from lightning_rlvr.data import RLVRDataModule
from lightning_rlvr.losses import PPOClip
from tests.rollouts import sample

B, G = 4, 4


class FixedRollouts(RLVRModule):
    """Trains on a rollout sampled once, before sharding; each rank takes its block of groups."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        problems = [self.task.problem("train", i) for i in range(B)]
        torch.manual_seed(0)
        self.fixed = sample(self.model, self.tokenizer, problems, G, self.max_new_tokens)
        self.fixed.rewards = (torch.arange(B * G) % 3 == 0).float()  # every group mixed: a real update
        self.grads: dict[str, torch.Tensor] = {}

    def _clip_gradients(self) -> float:
        for name, p in self.model.named_parameters():  # Adam's first step hides a gradient's scale
            grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            self.grads[name] = grad.detach().clone()
        return super()._clip_gradients()

    def collect(self, problems):
        world, rank = self.trainer.world_size, self.trainer.global_rank
        per = B // world
        rows = torch.arange(rank * per * G, (rank + 1) * per * G)
        return CollectedRollout(self.fixed.index_select(rows), 0, 0.0, 0.0), {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    results = {}
    for agg in ("seq_mean", "token_mean", "constant"):
        module = FixedRollouts(
            task=AdditionTask(digits=1),
            policy=TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64),
            group_size=G,
            max_new_tokens=16,
            lr=1e-2,
            loss=PPOClip(loss_agg=agg),
            validate_at_start=False,
        )
        strategy = (
            ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1) if world > 1 else "auto"
        )
        trainer = Trainer(
            accelerator="cpu",
            devices=world,
            strategy=strategy,
            max_steps=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
        )
        trainer.fit(module, RLVRDataModule(batch_size=B // world))
        state = {
            k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in module.model.state_dict().items()
        }
        results[agg] = {"params": state, "grads": module.grads}
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(results, args.out)


if __name__ == "__main__":
    main()
