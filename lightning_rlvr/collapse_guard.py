"""``CollapseGuard``: a run whose updates carry no learning signal says so, loudly, and can stop.

Layer: beside ``module`` (a Lightning ``Callback``; imports only ``core``). ``RLVRModule`` installs
one for every task (``configure_callbacks``). After each training step it reads what the step
logged and counts a step as *dead* when

- no update had any gradient: ``train/zero_grad_frac`` is 1 (every group's rewards were equal, so
  GRPO-style advantages are all zero, and nothing else in the loss moved the weights), or
- nothing was rewarded: ``train/accuracy`` (or, without it, ``train/reward_mean``) is 0.

``train/frac_zero_std`` = 1 alone is not a collapse: a method with groups of one (HP-RLVR) has it at
every step and learns from its own per-token signal.

After ``patience`` dead steps in a row it writes one warning line to stderr (so it reaches a log file
when output is redirected), shows ``collapsed=<dead steps>`` in the progress bar from then on, logs
``guard/dead_steps`` every step and, with ``stop``, ends the fit (the checkpoints so far are kept).
At the end of the fit one line sums it up, and ``guard/collapsed`` / ``guard/collapse_step`` go to
the logger. A run whose steps come back to life is reported as having recovered.
"""

from __future__ import annotations

from lightning.pytorch import Callback

from .core.errors import RLVRError
from .core.progress import say


class CollapseGuard(Callback):
    """Warn (and optionally stop) when training steps carry no signal for ``patience`` steps in a row.

    Args:
        patience: dead steps in a row before the alarm; 0 turns the guard off.
        stop: end the fit at the alarm instead of training on.
    """

    def __init__(self, patience: int = 10, stop: bool = False) -> None:
        if patience < 0:
            raise RLVRError(f"CollapseGuard patience must be >= 0 (0 turns it off), got {patience}")
        self.patience = patience
        self.stop = stop
        self.streak = 0  # dead steps in a row so far
        self.dead_total = 0
        self.steps = 0
        self.collapse_step: int | None = None  # the step at which the alarm first went off
        self.reason = ""
        self.recovered_at: int | None = None
        self.stopped = False

    # -- what a step logged -> dead or alive
    @staticmethod
    def _value(metrics: dict, key: str) -> float | None:
        value = metrics.get(key)
        return None if value is None else float(value)

    def dead_reason(self, metrics: dict) -> str:
        """Why a step with these logged ``metrics`` is dead ("" when it is alive)."""
        reasons = []
        if (self._value(metrics, "train/zero_grad_frac") or 0.0) >= 1.0:
            reasons.append("no update had any gradient (train/zero_grad_frac = 1)")
        solved = self._value(metrics, "train/accuracy")
        if solved is None:
            solved = self._value(metrics, "train/reward_mean")
        if solved is not None and solved <= 0.0:
            reasons.append("no rollout was rewarded (train/accuracy = 0)")
        return " and ".join(reasons)

    def record(self, metrics: dict, step: int) -> str | None:
        """Count one step's logged ``metrics``; the alarm's message at the step where it goes off."""
        self.steps += 1
        reason = self.dead_reason(metrics)
        if not reason:
            if self.collapse_step is not None and self.streak >= self.patience:
                self.recovered_at = step
            self.streak = 0
            return None
        self.streak += 1
        self.dead_total += 1
        if self.streak != self.patience:
            return None
        self.collapse_step = step if self.collapse_step is None else self.collapse_step
        self.recovered_at, self.reason, self.stopped = None, reason, self.stop
        action = "stopping (stop: true)" if self.stop else "training on (stop: true would end the fit)"
        return (
            f"WARNING: training has collapsed: {self.streak} steps in a row (up to step {step}) where "
            f"{reason}; the policy is not learning. Lower model.lr or check the warm start; {action}."
        )

    # -- Lightning hooks
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.patience == 0:
            return
        was_recovered = self.recovered_at
        alarm = self.record(trainer.callback_metrics, trainer.global_step)
        if trainer.global_rank == 0:
            if alarm:
                say(alarm)
            elif self.recovered_at is not None and self.recovered_at != was_recovered:
                say(f"collapse guard: training came back to life at step {self.recovered_at}")
        if alarm and self.stop:
            trainer.should_stop = True
        pl_module.log("guard/dead_steps", float(self.streak), on_step=True, on_epoch=False, batch_size=1)
        if self.collapse_step is not None:  # from the alarm on, the bar shows the dead steps in a row
            pl_module.log("collapsed", float(self.streak), prog_bar=True, logger=False, batch_size=1)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.patience == 0 or trainer.global_rank != 0 or self.steps == 0:
            return  # (a 0-step fit, e.g. a sweep's warm-start job, has nothing to sum up)
        say(self.summary())
        if trainer.logger is not None:
            trainer.logger.log_metrics(
                {
                    "guard/collapsed": float(self.collapse_step is not None and self.recovered_at is None),
                    "guard/collapse_step": float(-1 if self.collapse_step is None else self.collapse_step),
                    "guard/dead_frac": self.dead_total / max(self.steps, 1),
                },
                step=trainer.global_step,
            )

    def summary(self) -> str:
        """The end-of-fit line."""
        dead = f"{self.dead_total} of {self.steps} steps dead"
        if self.collapse_step is None:
            return f"collapse guard: no collapse ({dead}; alarm after {self.patience} in a row)"
        if self.recovered_at is not None:
            at = f"collapsed at step {self.collapse_step}, recovered at {self.recovered_at} ({dead})"
            return "collapse guard: " + at
        end = "training stopped there" if self.stopped else "never recovered"
        return f"collapse guard: COLLAPSED at step {self.collapse_step}: {self.reason}; {end} ({dead})"

    # -- resume: the streak continues across a checkpoint
    def state_dict(self) -> dict:
        keys = ("streak", "dead_total", "steps", "collapse_step", "reason", "recovered_at")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state_dict: dict) -> None:
        for key, value in state_dict.items():
            setattr(self, key, value)
