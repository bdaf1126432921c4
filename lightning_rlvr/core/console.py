"""What Lightning prints during a run: a progress bar that counts steps, without Lightning's sales tips.

Layer: ``core`` (imports nothing from the package; Lightning only). The CLI installs both.

- ``StepProgressBar``: a run is bounded by ``trainer.max_steps`` (``max_epochs`` is -1), so the
  training bar reads ``step 12/100`` (optimiser steps of the whole run, the unit ``max_steps``
  counts; a resumed run starts at its step) instead of Lightning's ``Epoch 0/-2`` with a per-epoch
  batch count, and the logger version reads ``v_num=3`` instead of Rich's ``v_num: 3.000``.
  A run bounded by epochs keeps Lightning's ``Epoch N`` bar.
- ``quiet_lightning_tips``: drops the "💡 Tip: ... install litlogger / litmodels" lines Lightning
  logs (at INFO, on every command) through its rank-zero logger. Only records whose message starts
  with that tip marker are dropped; warnings and every other line pass.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

TIP_MARKER = "💡 Tip:"
STEP_BAR_FORMAT = "step {n_fmt}/{total_fmt} |{bar}| [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"


def _step_limited(trainer: Any) -> bool:
    return trainer.max_steps is not None and trainer.max_steps > 0


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar counting the run's steps against ``max_steps`` (see the module docstring)."""

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        version = items.pop("v_num", None)
        if isinstance(version, float) and version.is_integer():
            version = int(version)
        if version not in (None, ""):
            items["v_num"] = str(version)  # a string: no bar formats it as a float
        return items

    def init_train_tqdm(self) -> Tqdm:
        if not _step_limited(self.trainer):
            return super().init_train_tqdm()
        return Tqdm(  # Lightning's bar, counting the run's steps from where it starts
            desc="step",
            position=(2 * self.process_position),
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
            bar_format=STEP_BAR_FORMAT,
            total=self.trainer.max_steps,
            initial=self.trainer.global_step,
        )

    def on_train_epoch_start(self, trainer: Any, *args: Any) -> None:
        if not _step_limited(trainer):
            super().on_train_epoch_start(trainer, *args)
        elif self._leave:  # otherwise the one bar of the run goes on across epochs
            self.train_progress_bar = self.init_train_tqdm()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not _step_limited(trainer):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        bar = self.train_progress_bar
        step = trainer.global_step
        if bar is not None and not bar.disable and self._should_update(step, bar.total):
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP_MARKER)


_FILTER = _DropTips()


def quiet_lightning_tips() -> None:
    """Drop Lightning's "💡 Tip:" lines (idempotent); see the module docstring."""
    from lightning_utilities.core import rank_zero as utilities_rank_zero

    names = {"lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"}
    targets = [logging.getLogger(n) for n in names] + [utilities_rank_zero.log]
    for target in targets:
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
