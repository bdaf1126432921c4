"""Evaluation of ``RLVRModule``: pass@k and maj@k on held-out prompts, under a forked RNG.

Validation and test sample ``eval_samples`` completions per prompt through the module's
rollout engine, verify them, and report pass@k (k = 1, 2, 4, ... up to ``eval_samples``,
the unbiased estimator) and, for tasks with a final answer (``Task.extract_answer``),
maj@n over all n samples. Sampling runs under a forked RNG seeded by ``eval_seed`` and the
batch index, so evaluation never shifts the training stream and is the same at every
validation. A fresh fit also logs ``val/pass@1`` at step 0: the baseline RL starts from.
``eval_greedy`` decodes greedily instead. A long evaluation logs a progress line (batches done,
pass@1 so far on this rank) about every tenth of its batches, so a log file shows it is alive;
``log_samples`` writes its first rows to ``samples/<stage>.jsonl``.
"""

from __future__ import annotations

import logging

import torch
from lightning.pytorch.utilities import rank_zero_info

from lightning_rlvr.metrics import MajorityAtK, PassAtK
from lightning_rlvr.tasks.base import Problem, Task, safe_extract_answer

log = logging.getLogger(__name__)


class Evaluation:
    """The evaluation half of ``RLVRModule`` (a mixin: it uses the module's rollout and verifier)."""

    def init_metrics(self) -> None:
        n = self.eval_samples
        self.eval_ks = sorted({1, n} | {2**i for i in range(1, 8) if 2**i <= n})
        self.val_pass = PassAtK(1)
        self.test_pass = torch.nn.ModuleDict({str(k): PassAtK(k) for k in self.eval_ks})
        # maj@n over all n samples, for tasks with a final answer to vote on (Task.extract_answer)
        has_answers = type(self.task).extract_answer is not Task.extract_answer
        self.test_maj = MajorityAtK(n) if has_answers else None

    def on_train_start(self) -> None:
        if not (self.validate_at_start and self.rl_step == 0 and self.trainer.datamodule is not None):
            return
        metric = PassAtK(1).to(self.device)
        for i, batch in enumerate(self.trainer.datamodule.val_dataloader()):
            self._evaluate(batch, i, {"1": metric}, stage=None)
        value = float(metric.compute())
        log.info("val/pass@1 before RL: %.4f", value)
        if self.logger is not None:
            self.logger.log_metrics({"val/pass@1": value}, step=0)

    def _evaluate(
        self,
        batch: list[Problem],
        batch_idx: int,
        metrics: dict[str, PassAtK],
        stage: str | None,
        majority: MajorityAtK | None = None,
    ) -> None:
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.eval_seed + batch_idx)
            rollout = self.rollout(batch, self.eval_samples, greedy=self.eval_greedy)
        self.verify(rollout)
        correct = rollout.correct.view(len(batch), self.eval_samples)  # [B, n] bool
        if stage is not None:
            self._progress(stage, batch_idx, rollout, correct)
        for k, metric in metrics.items():
            metric.update(correct)
            if stage is not None:
                self.log(f"{stage}/pass@{k}", metric, on_step=False, on_epoch=True, prog_bar=k == "1")
        if majority is not None:
            n = self.eval_samples
            answers = [safe_extract_answer(self.task, c) for c in rollout.completions]  # [B * n] by prompt
            majority.update([answers[i * n : (i + 1) * n] for i in range(len(batch))], correct)
            self.log(f"{stage}/maj@{majority.k}", majority, on_step=False, on_epoch=True)

    def _progress(self, stage: str, batch_idx: int, rollout, correct: torch.Tensor) -> None:
        """Samples of the evaluation's first rows, and a progress line about every tenth of its batches."""
        if batch_idx == 0:
            self._eval_tally = [0, 0]  # correct, samples on this rank
        done = self._eval_tally[1]
        self.write_samples(stage, rollout, max(0, min(self.log_samples - done, rollout.num_rows)))
        self._eval_tally = [self._eval_tally[0] + int(correct.sum()), done + correct.numel()]
        counts = getattr(self.trainer, f"num_{'val' if stage == 'val' else stage}_batches", None) or [0]
        total = int(sum(counts)) if all(c != float("inf") for c in counts) else 0
        if total and ((batch_idx + 1) % max(1, total // 10) == 0 or batch_idx + 1 == total):
            rate = self._eval_tally[0] / max(self._eval_tally[1], 1)
            rank_zero_info(f"{stage}: batch {batch_idx + 1}/{total}, pass@1 so far {rate:.3f}")

    def validation_step(self, batch: list[Problem], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, {"1": self.val_pass}, "val")

    def test_step(self, batch: list[Problem], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, dict(self.test_pass.items()), "test", self.test_maj)
