"""Prompt batches for training and evaluation, read from the module's task.

The task lives in the module (so ``test --ckpt_path`` rebuilds it from the
checkpoint's hyperparameters alone); this data module only decides how many
prompts a step or an evaluation batch holds. The training stream is a pure
function of the step: batch ``s`` holds problems ``s*B .. s*B+B-1`` of the
train split, so resuming at step ``s`` continues the same stream exactly.

Every loader draws from its own ``torch.Generator``, never from the global RNG: a
``DataLoader`` takes a worker base seed from its generator each time it is iterated,
i.e. at every validation. From the global stream that draw would fall between the
checkpoint (saved at the end of a step, RNG captured) and the next step's rollout in
an uninterrupted run but not in a resumed one, and the resumed fit would sample
differently from its first step on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, IterableDataset

from .core.errors import RLVRError
from .core.per_prompt import placed
from .core.problem import Problem
from .tasks.base import Task


def _as_list(batch: list[Problem]) -> list[Problem]:
    return batch


def _private_generator() -> torch.Generator:
    """A loader's own RNG (module docstring): iterating the loader leaves the training stream alone."""
    return torch.Generator().manual_seed(0)


def train_batch_index(step: int, rank: int, world: int) -> int:
    """Which batch of the training stream ``rank`` trains on at RL step ``step`` (the one formula).

    Batch ``b`` holds train problems ``b*B .. b*B+B-1``; dynamic sampling draws its extra prompts
    from a separate range keyed by the same batch index (``collect.dynamic_sampling.extra_prompt_position``).
    """
    return step * world + rank


class TrainStream(IterableDataset):
    """An endless stream of prompt batches starting at the step ``start()`` returns.

    With W ranks, step ``s`` covers problems ``s*B*W .. (s+1)*B*W - 1`` of the train
    split and rank ``r`` takes the ``r``-th block of B: W ranks with B prompts each see
    exactly the prompts one rank with B*W prompts would.
    """

    def __init__(
        self, task: Task, batch_size: int, start: Callable[[], int], rank: int = 0, world: int = 1
    ) -> None:
        self.task, self.batch_size, self.start = task, batch_size, start
        self.rank, self.world = rank, world

    def __iter__(self) -> Iterator[list[Problem]]:
        step, B = self.start(), self.batch_size
        while True:
            first = train_batch_index(step, self.rank, self.world) * B
            yield [self.task.train_problem(first + i) for i in range(B)]
            step += 1


class SplitDataset(Dataset):
    """The first ``n`` problems of a split."""

    def __init__(self, task: Task, split: str, n: int) -> None:
        total = task.size(split)
        self.task, self.split, self.n = task, split, n if total is None else min(n, total)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Problem:
        return placed(self.task.problem(self.split, i), self.split, i)  # its per-prompt id names its place


class RLVRDataModule(LightningDataModule):
    """Prompts per step and evaluation sizes.

    Args:
        batch_size: prompts per RL step and rank (B); each gets ``model.group_size`` completions.
        val_size: held-out prompts per validation (0 = none).
        test_size: held-out prompts for ``test``.
        eval_batch_size: prompts per evaluation batch.
    """

    def __init__(
        self, batch_size: int = 16, val_size: int = 256, test_size: int = 256, eval_batch_size: int = 64
    ):
        super().__init__()
        for name, value, least in [
            ("batch_size", batch_size, 1),
            ("eval_batch_size", eval_batch_size, 1),
            ("val_size", val_size, 0),
            ("test_size", test_size, 1),
        ]:
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise RLVRError(f"data.{name} must be a whole number >= {least}, got {value!r}")
        self.batch_size = batch_size
        self.val_size = val_size
        self.test_size = test_size
        self.eval_batch_size = eval_batch_size

    @property
    def task(self) -> Task:
        return self.trainer.lightning_module.task

    def train_dataloader(self) -> DataLoader:
        module = self.trainer.lightning_module
        stream = TrainStream(
            self.task,
            self.batch_size,
            start=lambda: module.rl_step,
            rank=self.trainer.global_rank,
            world=self.trainer.world_size,
        )
        return DataLoader(stream, batch_size=None, collate_fn=_as_list, generator=_private_generator())

    def _eval_loader(self, split: str, n: int) -> DataLoader:
        return DataLoader(
            SplitDataset(self.task, split, n),
            batch_size=self.eval_batch_size,
            collate_fn=_as_list,
            generator=_private_generator(),
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val", self.val_size)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test", self.test_size)
