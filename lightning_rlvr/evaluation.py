"""Evaluation of ``RLVRModule``: pass@k and maj@k on held-out prompts, under a forked RNG.

Validation and test sample ``eval_samples`` completions per prompt through the module's
rollout engine, verify them, and report pass@k (k = 1, 2, 4, ... up to ``eval_samples``,
the unbiased estimator) and, for tasks with a final answer (``Task.extract_answer``),
maj@n over all n samples. Test also logs ``test/samples`` (prompts x samples): pass@1 x samples
is the number of successes, for a binomial interval. Sampling runs under a forked RNG seeded by
``eval_seed`` and the batch index, so evaluation never shifts the training stream and is the same
at every validation. A fresh fit also logs ``val/pass@1`` at step 0: the baseline RL starts from.
``eval_greedy`` decodes greedily instead; ``log_samples`` writes an evaluation's first rows to
``samples/<stage>.jsonl``. Every evaluation also writes its per-prompt results (prompt id, sample, reward,
verdict; ``core/per_prompt.py``) to ``per_prompt/val_step<k>.csv.gz`` or ``per_prompt/test.csv.gz`` in
the run's log folder, the completions of its first ``log_samples`` rows included. Progress: the baseline
before RL, validation and test show a bar on a terminal and write plain lines (``core/progress.py``) when
output goes to a file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .core.per_prompt import FOLDER, file_name, rollout_rows, write_results
from .core.problem import Problem
from .core.progress import Progress, is_tty
from .pass_at_k import MajorityAtK, PassAtK, SampleCount
from .tasks.base import Task, safe_extract_answer

log = logging.getLogger(__name__)


class Evaluation:
    """The evaluation half of ``RLVRModule`` (a mixin: it uses the module's rollout and verifier)."""

    def init_metrics(self) -> None:
        n = self.eval_samples
        self.eval_ks = sorted({1, n} | {2**i for i in range(1, 8) if 2**i <= n})
        self.val_pass = PassAtK(1)
        self.test_pass = torch.nn.ModuleDict({str(k): PassAtK(k) for k in self.eval_ks})
        self.test_samples = SampleCount()  # test/samples: pass@1 x this = the successes
        # maj@n over all n samples, for tasks with a final answer to vote on (Task.extract_answer)
        has_answers = type(self.task).extract_answer is not Task.extract_answer
        self.test_maj = MajorityAtK(n) if has_answers else None

    def on_train_start(self) -> None:
        self.log_warm_start()
        if not (self.validate_at_start and self.rl_step == 0 and self.trainer.datamodule is not None):
            return
        metric = PassAtK(1).to(self.device)
        loader = self.trainer.datamodule.val_dataloader()
        total = len(loader) if hasattr(loader, "__len__") else None
        self._per_prompt = []
        with Progress(total, "val before RL", unit="batches", enabled=self.global_rank == 0) as progress:
            for i, batch in enumerate(loader):
                self._evaluate(batch, i, {"1": metric}, stage=None)
                progress.update()
            value = float(metric.compute())
            progress.set_postfix(**{"pass@1": f"{value:.3f}"})
        self._write_per_prompt("val_step0")
        log.info("val/pass@1 before RL: %.4f", value)
        if self.logger is not None:
            self.logger.log_metrics({"val/pass@1": value}, step=0)

    def log_warm_start(self) -> None:
        """Name the warm start this run used in its hyperparameters and metrics (key, steps, accuracy)."""
        summary = getattr(self, "warm_start_summary", None)
        if summary is None or self.logger is None or self.rl_step != 0:
            return
        where = summary.get("machine", {})
        params = {"key": summary.get("key"), "cached": summary.get("cached"), "steps": summary["steps"]}
        params |= {"accuracy": summary["accuracy"], **{f"trained_{k}": v for k, v in where.items()}}
        self.logger.log_hyperparams({f"warm_start/{k}": v for k, v in params.items()})
        metrics = {"warm_start/steps": float(summary["steps"]), "warm_start/accuracy": summary["accuracy"]}
        self.logger.log_metrics(metrics, step=0)

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
            rollout = self.rollout(batch, self.eval_samples, greedy=self.eval_greedy)  # verified
        correct = rollout.correct.view(len(batch), self.eval_samples)  # [B, n] bool
        if getattr(self, "_per_prompt", None) is not None:  # per-prompt results, written at the end
            self._per_prompt += rollout_rows(rollout, max(0, self.log_samples - len(self._per_prompt)))
        if stage is not None:
            self._write_eval_samples(stage, batch_idx, rollout)
        if stage is not None:  # completions the budget cut (max_new_tokens without EOS)
            cut = rollout.truncated(self.max_new_tokens).float().mean()
            self.log(f"{stage}/truncated_frac", cut, on_epoch=True, batch_size=rollout.num_rows)
        for k, metric in metrics.items():
            metric.update(correct)
            if stage is not None:
                self.log(f"{stage}/pass@{k}", metric, on_step=False, on_epoch=True, prog_bar=k == "1")
        if stage == "test":
            self.test_samples.update(correct)
            self.log("test/samples", self.test_samples, on_step=False, on_epoch=True)
        if majority is not None:
            n = self.eval_samples
            answers = [safe_extract_answer(self.task, c) for c in rollout.completions]  # [B * n] by prompt
            majority.update([answers[i * n : (i + 1) * n] for i in range(len(batch))], correct)
            self.log(f"{stage}/maj@{majority.k}", majority, on_step=False, on_epoch=True)

    def _write_eval_samples(self, stage: str, batch_idx: int, rollout) -> None:
        """The evaluation's first ``log_samples`` rows to ``samples/<stage>.jsonl``."""
        if batch_idx == 0:
            self._eval_rows = 0  # rows seen on this rank
        self.write_samples(stage, rollout, max(0, min(self.log_samples - self._eval_rows, rollout.num_rows)))
        self._eval_rows += rollout.num_rows

    def validation_step(self, batch: list[Problem], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, {"1": self.val_pass}, "val")

    def test_step(self, batch: list[Problem], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, dict(self.test_pass.items()), "test", self.test_maj)

    def _write_per_prompt(self, name: str) -> None:
        """This rank's per-prompt rows of the evaluation just ended to ``per_prompt/<name>.csv.gz``."""
        rows, self._per_prompt = getattr(self, "_per_prompt", None), None
        if rows is None or self.trainer.sanity_checking:
            return
        folder = Path(self.trainer.log_dir or self.trainer.default_root_dir) / FOLDER
        write_results(folder / file_name(name, self.global_rank), rows, completions=self.log_samples > 0)

    # -- progress of validation and test when output goes to a file (a terminal has Lightning's bar)
    def _progress_start(self, stage: str) -> None:
        self._eval_progress = None
        if is_tty() or self.global_rank != 0 or self.trainer.sanity_checking:
            return
        total = sum(getattr(self.trainer, f"num_{stage}_batches", None) or []) or None
        label = "val" if stage == "val" else "test"
        where = f" at step {self.rl_step}" if stage == "val" else ""
        self._eval_progress = Progress(total, f"{label}{where}", unit="batches")

    def _progress_end(self, metric: PassAtK) -> None:
        progress = getattr(self, "_eval_progress", None)
        if progress is not None:  # this rank's count: compute() would wait for ranks that print nothing
            local = float(metric.total) / max(float(metric.count), 1.0)
            progress.set_postfix(**{"pass@1": f"{local:.3f}"})
            progress.close()
            self._eval_progress = None

    def on_validation_epoch_start(self) -> None:
        self._progress_start("val")
        self._per_prompt = []

    def on_test_epoch_start(self) -> None:
        self._progress_start("test")
        self._per_prompt = []

    def on_validation_batch_end(self, outputs, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        if getattr(self, "_eval_progress", None) is not None:
            self._eval_progress.update()

    on_test_batch_end = on_validation_batch_end

    def on_validation_epoch_end(self) -> None:
        self._progress_end(self.val_pass)
        self._write_per_prompt(f"val_step{self.rl_step}")

    def on_test_epoch_end(self) -> None:
        self._progress_end(self.test_pass["1"])
        self._write_per_prompt("test")
