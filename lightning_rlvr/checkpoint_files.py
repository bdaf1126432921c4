"""Checkpoints on disk: written atomically, one run per folder, resolved to the run a path names.

Layer: above ``core`` and ``errors`` (imports nothing else of the package; ``cli``, ``export`` and the
credit lab import it).

- ``AtomicCheckpointIO`` writes every checkpoint through ``core.files.atomic_file``: a fit killed at
  any moment leaves the previous file or the new one, never a torn one; a full disk is one
  ``RLVRError`` line and the previous checkpoint stays loadable.
- ``claim_checkpoint_dir``: the fit holds a lock in its checkpoint folder for as long as it lives,
  and refuses a folder another fit is writing or one that holds another run's checkpoints (a run
  that resumes from a checkpoint of that folder is the same run). Versioned names (``last-v1.ckpt``)
  are never written (``enable_version_counter`` is off), so ``last.ckpt`` is the run's newest state.
- ``claim_log_version``: a logger version folder is taken with an atomic ``mkdir``, so two fits
  started at once on one root get ``version_N`` and ``version_N+1``, never the same folder.
- ``read_checkpoint`` and ``find_last_checkpoint`` resolve ``--ckpt_path`` (a file, a folder with one
  run's checkpoints, or ``last``); a damaged newest file is skipped with one warning line.
"""

from __future__ import annotations

import io
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from .core.errors import FULL_DISK, RLVRError
from .core.files import atomic_file
from .core.process import LOCK_NAME, holder, try_lock

LOCK = LOCK_NAME  # in a checkpoint folder: held by the fit writing it
_LAST = re.compile(r"^last(-v?\d+)?\.ckpt$")
_VERSION = re.compile(r"^version_(\d+)$")
_held: list[Any] = []  # lock files this process holds until it exits


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local writes are atomic and whose full-disk error is one line."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if storage_options is not None or "://" in str(path):  # remote storage: Lightning's own writer
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()  # serialised first (as Lightning does): a failed write is a plain OSError
        torch.save(checkpoint, buffer)
        try:
            with atomic_file(path, "wb") as f:
                f.write(buffer.getbuffer())
        except OSError as err:
            if err.errno not in FULL_DISK:
                raise
            raise RLVRError(
                f"cannot write checkpoint {path}: {os.strerror(err.errno)}; the previous checkpoints "
                "are untouched: free space, then resume with --ckpt_path last"
            ) from None


def warn(message: str) -> None:
    sys.stderr.write(f"lightning-rlvr: warning: {' '.join(message.split())}\n")


# ---------------------------------------------------------------------------- reading
def checkpoint_problem(file: Path) -> str | None:
    """Why ``file`` is not a loadable Lightning checkpoint, or None when it is one."""
    if not file.is_file():
        return "no such file"
    if file.stat().st_size == 0:
        return "the file is empty (an interrupted save?)"
    if not zipfile.is_zipfile(file):  # torch.save writes a zip archive; a cut-off one has no end record
        return "not a checkpoint file (truncated, or another kind of file)"
    try:
        ckpt = torch.load(file, weights_only=True, map_location="cpu", mmap=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        return f"not a readable checkpoint (truncated or another kind of file: {reason})"
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        return "not a Lightning checkpoint (no state_dict)"
    return None


def _candidates(directory: Path) -> list[Path]:
    """A folder's checkpoints, newest first; an error if it holds several runs' ``last`` files."""
    files = [p for p in directory.iterdir() if p.suffix == ".ckpt" and not p.name.startswith(".")]
    lasts = sorted(p.name for p in files if _LAST.match(p.name))
    if len(lasts) > 1:
        raise RLVRError(
            f"{directory} holds the checkpoints of more than one run ({', '.join(lasts)}); "
            "pass --ckpt_path the file of the run you mean"
        )
    return sorted(files, key=lambda p: (p.stat().st_mtime, _LAST.match(p.name) is not None), reverse=True)


def newest_intact(candidates: list[Path], what: str) -> Path | None:
    """The first loadable checkpoint of ``candidates`` (newest first), with one warning line per
    damaged newer one it skips; None if none loads."""
    for i, path in enumerate(candidates):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        if i + 1 < len(candidates):
            warn(f"{what}: skipping {path}: {problem}; falling back to the newest intact checkpoint")
    return None


def resolve_ckpt_path(path: str) -> str:
    """A checkpoint file as given, or for a folder holding one run's checkpoints, its newest intact one."""
    directory = Path(path)
    if not directory.is_dir():
        return path
    files = _candidates(directory)
    if not files:
        raise RLVRError(
            f"--ckpt_path {path}: a folder with no .ckpt file; expected a checkpoint file, "
            "or a folder holding one run's checkpoints (such as <dirpath>/ with last.ckpt)"
        )
    found = newest_intact(files, f"--ckpt_path {path}")
    if found is None:
        raise RLVRError(f"--ckpt_path {path}: none of its {len(files)} .ckpt files is a readable checkpoint")
    return str(found)


def read_checkpoint(path: str) -> dict:
    """Load a checkpoint's dict (memory-mapped, CPU), or raise an ``RLVRError`` that says what is wrong.
    ``path`` may be a folder of one run's checkpoints (see ``resolve_ckpt_path``)."""
    path = resolve_ckpt_path(path)
    problem = checkpoint_problem(Path(path))
    if problem == "no such file":
        raise RLVRError(f"--ckpt_path {path}: no such file")
    if problem is not None:
        raise RLVRError(f"--ckpt_path {path}: {problem}; pick a .ckpt written by lightning-rlvr fit")
    return torch.load(path, weights_only=True, map_location="cpu", mmap=True)


# ---------------------------------------------------------------------------- where a run's are
def loggers(trainer_config: Any) -> list[Any]:
    """The logger configs (``class_path`` + ``init_args``) of a trainer config."""
    logger = trainer_config.get("logger")
    items = logger if isinstance(logger, list) else [logger]
    return [item for item in items if hasattr(item, "get") and item.get("init_args") is not None]


def _version_index(directory: Path) -> int:
    m = _VERSION.match(directory.parent.name)
    return int(m.group(1)) if m else -1


def checkpoint_dirs(config: Any) -> list[Path]:
    """Where this run's checkpoints are: ``checkpoint.dirpath``, else the logger's version folders
    (newest version first), else ``<default_root_dir>/checkpoints``."""
    dirpath = config.get("checkpoint.dirpath")
    if dirpath:
        return [Path(dirpath)]
    found = loggers(config["trainer"])
    if not found or config.get("trainer.logger") is False:
        return [Path(str(config.get("trainer.default_root_dir") or ".")) / "checkpoints"]
    args = found[0]["init_args"]
    run_dir = Path(str(args.get("save_dir") or ".")) / str(args.get("name") or "")
    version = args.get("version")
    if version is not None:
        name = version if isinstance(version, str) else f"version_{version}"
        return [run_dir / name / "checkpoints"]
    return sorted(run_dir.glob("version_*/checkpoints"), key=_version_index, reverse=True)


def find_last_checkpoint(config: Any) -> str:
    """The newest intact checkpoint of this run (``last.ckpt`` unless it is damaged), or an ``RLVRError``."""
    dirs = checkpoint_dirs(config)
    files = [p for d in dirs if d.is_dir() for p in _candidates(d)]
    if not files:
        where = ", ".join(str(d) for d in dirs) or _run_dir_hint(config)
        raise RLVRError(
            f"--ckpt_path last: no last.ckpt in {where}; nothing to resume. Give the same "
            "--trainer.default_root_dir / logger name / --checkpoint.dirpath as the run to resume, "
            "a checkpoint file, or no --ckpt_path to start fresh"
        )
    found = newest_intact(files, "--ckpt_path last")
    if found is None:
        raise RLVRError(
            f"--ckpt_path last: none of the {len(files)} checkpoints in {', '.join(map(str, dirs))} is "
            "readable; nothing to resume"
        )
    return str(found)


def _run_dir_hint(config: Any) -> str:
    found = loggers(config["trainer"])
    if not found:
        return "the checkpoint directory"
    args = found[0]["init_args"]
    return str(Path(str(args.get("save_dir") or ".")) / str(args.get("name") or "") / "version_*/checkpoints")


# ---------------------------------------------------------------------------- claiming a run's folders
def claim_log_version(config: Any) -> None:
    """Pin an unset logger ``version`` to a ``version_N`` folder this process created (atomic ``mkdir``)."""
    found = loggers(config["trainer"])
    if not found or config.get("trainer.logger") is False:
        return
    args = found[0]["init_args"]
    if "version" not in args or args.get("version") is not None or not args.get("save_dir"):
        return
    run_dir = Path(str(args["save_dir"])) / str(args.get("name") or "")
    run_dir.mkdir(parents=True, exist_ok=True)
    taken = [int(m.group(1)) for p in run_dir.iterdir() if (m := _VERSION.match(p.name))]
    version = max(taken, default=-1) + 1
    while True:
        try:
            (run_dir / f"version_{version}").mkdir()
        except FileExistsError:
            version += 1
            continue
        args["version"] = version
        return


def claim_checkpoint_dir(directory: Path, ckpt_path: str | None) -> None:
    """Hold ``directory``'s lock for the rest of this process; refuse a folder that another live fit
    writes, or that holds another run's checkpoints (resuming from one of its own files is allowed)."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = open(directory / LOCK, "a+")  # noqa: SIM115 - held until the process exits
    if not try_lock(lock):
        pid = holder(directory / LOCK)
        lock.close()
        raise RLVRError(
            f"{directory} is being written by another fit (pid {pid}); give this run its own folder "
            "(--checkpoint.dirpath DIR or --trainer.default_root_dir DIR), or wait for that one to end"
        )
    existing = sorted(p.name for p in directory.glob("*.ckpt"))
    resuming = ckpt_path is not None and Path(ckpt_path).resolve().parent == directory.resolve()
    if existing and not resuming:
        lock.close()
        shown = ", ".join(existing[:3]) + (", ..." if len(existing) > 3 else "")
        raise RLVRError(
            f"{directory} already holds another run's checkpoints ({shown}); resume that run with "
            "--ckpt_path last, give this run its own folder (--checkpoint.dirpath DIR or "
            f"--trainer.default_root_dir DIR), or delete {directory}"
        )
    for stale in directory.glob(".*.ckpt.*.tmp"):  # a killed writer's temporary: the lock says none is alive
        stale.unlink(missing_ok=True)
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    _held.append(lock)


def release_claims() -> None:
    """Release the folders this process claimed (its run has ended; process exit does the same)."""
    while _held:
        _held.pop().close()
