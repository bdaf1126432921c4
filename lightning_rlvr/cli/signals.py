"""How a ``lightning-rlvr`` run ends on SIGINT, SIGTERM, SIGUSR1 or SIGUSR2: within seconds, in one line.

Layer: ``cli`` (above ``checkpoint_files``). ``main`` runs the command inside ``stop_on_signals``: the signals
only raise a flag (``core/stop.py``), the run stops at its next safe point (the next generated token,
update or scoring micro-batch, verifier or warm-start step), and the process exits with one line and
128 + the signal's number (130 for SIGINT, 143 for SIGTERM)::

    lightning-rlvr: stopped by SIGTERM while generating tokens during validation at step 12; the last
    checkpoint, runs/quickstart/checkpoints/last.ckpt, is at step 12 (0 steps behind): run the same
    command with --ckpt_path last to resume from it

No checkpoint is written on the way out: a state taken inside a step is not a point a resume can
continue exactly from, while the last checkpoint is (``tests/test_signals.py``). ``PhaseNames`` keeps
the phase the line names up to date from the trainer's hooks. Lightning's own SIGTERM notice ("Received
SIGTERM") is silenced; its SLURM requeue on SIGUSR1 is not installed, since this handler is there first.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from tqdm import tqdm

from ..checkpoint_files import checkpoint_problem, find_last_checkpoint
from ..core import stop
from ..core.errors import RLVRError

PROGRAM = "lightning-rlvr"
_run: dict[str, Any] = {}  # the command being run: subcommand, its config, the trainer (``attach``)


class PhaseNames(Callback):
    """Names what the trainer is doing for the stop line ("training step 13", "validation at step 12")."""

    @staticmethod
    def _step(trainer: Any, module: Any) -> int:
        return int(getattr(module, "rl_step", trainer.global_step))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        stop.set_phase("the setup")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        stop.set_phase("the start of training (validation before RL)")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        stop.set_phase(f"training step {self._step(trainer, pl_module) + 1}")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        stop.set_phase(f"the end of training step {self._step(trainer, pl_module)}")

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        fitting = trainer.state.fn == "fit"
        stop.set_phase(f"validation at step {self._step(trainer, pl_module)}" if fitting else "validation")

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        stop.set_phase(f"the end of validation at step {self._step(trainer, pl_module)}")

    def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        stop.set_phase("the test")


def attach(subcommand: str | None, config: Any, trainer: Any) -> None:
    """Remember the command's config and trainer (inside ``stop_on_signals`` only): the stop line reads
    its step and last checkpoint."""
    if _run.get("watching"):
        _run.update(subcommand=subcommand, config=config, trainer=trainer)


def _checkpoint_step(path: str) -> int:
    ckpt = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    return int((ckpt.get("rlvr") or {}).get("rl_step", ckpt.get("global_step", 0)))


def _last_checkpoint(config: Any) -> str | None:
    """What ``--ckpt_path last`` would resume from now: this run's newest intact checkpoint, else the one
    it resumed from (a run stopped before its first save)."""
    with contextlib.redirect_stderr(io.StringIO()):  # a damaged newer file's warning is not the stop's line
        try:
            return find_last_checkpoint(config)
        except RLVRError:
            pass
    resumed = config.get("ckpt_path")
    if resumed and Path(str(resumed)).is_file() and checkpoint_problem(Path(str(resumed))) is None:
        return str(resumed)
    return None


def stop_line(signum: int, place: str, forced: str | None = None) -> str:
    """The one line a stopped run ends with: the signal, where the run was, and what is saved."""
    head = f"stopped by {stop.signal_name(signum)} {place}" + (
        f" ({forced}: ended at once)" if forced else ""
    )
    subcommand, config, trainer = _run.get("subcommand"), _run.get("config"), _run.get("trainer")
    if trainer is None:
        return f"{head}; the run had not started: run the command again"
    if subcommand != "fit":
        return f"{head}; a stopped evaluation has no result: run the command again"
    now = int(getattr(trainer.lightning_module, "rl_step", trainer.global_step))
    try:
        path = _last_checkpoint(config)
        step = _checkpoint_step(path) if path else None
    except Exception:  # noqa: BLE001 - the line must come out even when the folder cannot be read
        path, step = None, None
    if path is None or step is None:
        done = f"{now} step{'s' * (now != 1)} done"
        return f"{head}; no checkpoint was written yet ({done}): run the same command to start again"
    behind = f"{now - step} step{'s' * (now - step != 1)} behind"
    return (
        f"{head}; the last checkpoint, {path}, is at step {step} ({behind}): "
        "run the same command with --ckpt_path last to resume from it"
    )


def _say(line: str) -> None:
    if int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0) == 0:  # one line, not one a rank
        bar = bool(getattr(tqdm, "_instances", None))  # a progress bar holds the line: start a new one
        sys.stderr.write(("\n" if bar else "") + f"{PROGRAM}: {' '.join(line.split())}\n")
        sys.stderr.flush()


def _say_forced(signum: int, why: str) -> None:
    _say(stop_line(signum, stop.place(), forced=why))


@contextlib.contextmanager
def stop_on_signals(grace_s: float = 10.0) -> Iterator[None]:
    """Run the body with the stop signals handled: a stop ends the process (``exit_now``) with one line and
    128 + the signal's number.

    ``grace_s``: seconds a stopped run may take to reach a safe point before it is ended at once.
    """
    logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector").setLevel(logging.WARNING)
    restore = stop.install(grace_s=grace_s, on_overdue=_say_forced)
    _run.clear()
    _run["watching"] = True
    try:
        yield
    except BaseException as err:  # StopRequested, or what the stop became on its way out (SIGTERMException)
        signum = stop.requested()
        if signum is None:
            raise
        _finish(signum, err.place if isinstance(err, stop.StopRequested) else stop.place())
    else:
        signum = stop.requested()
        if signum is not None:  # the signal came after the last safe point: the run ended, say so
            _finish(signum, stop.place())
    finally:
        restore()
        _run.clear()


def _finish(signum: int, place: str) -> None:
    if stop.claim_report():
        _say(stop_line(signum, place))
    else:  # the watchdog is reporting and ending the process
        time.sleep(5)
    exit_now(stop.exit_code(signum))


EXIT_GRACE_S = 3.0  # seconds a stopped run's atexit handlers may take before the process ends anyway


def exit_now(code: int) -> None:
    """Exit with ``code`` once the atexit handlers have run and the streams are flushed, skipping the
    interpreter's teardown: freeing a loaded model object by object takes seconds on a busy CPU (the
    kernel frees it at once), and a stop must not wait for that.

    The handlers get ``EXIT_GRACE_S`` seconds, then the process ends without the rest: torch's own (finalizers
    that unregister its operator libraries one kernel at a time, a compile-time report that imports its
    table printer) took about 20 s on a loaded 2-core machine, and a stopped run has nothing left to save
    (its last checkpoint is on disk and its line is said and flushed). The timer does not flush: a stream
    held by a handler stuck mid-write would hold the exit too."""
    timer = threading.Timer(EXIT_GRACE_S, os._exit, args=(code,))
    timer.daemon = True
    timer.start()
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
