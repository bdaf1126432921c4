"""Process lifetime: children that die with their parent, and locks a writer holds while it lives.

Layer: ``core`` (imports nothing from the package).

A child the project starts must not outlive its parent, whatever signal ends the parent (SIGKILL
included: no handler runs then). Linux offers exactly this: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
in the child makes the kernel kill it when its parent dies. It must be set *in the child*, and a
parent that died before it was set is not noticed, so :func:`die_with_parent` also compares
``getppid()`` with the parent the child was started by. A ``python`` child learns that pid from
``PARENT_ENV`` (set by :func:`child_env`) and calls :func:`adopt_parent_from_env` first thing.

Locks are ``flock`` locks on a file: the kernel releases them when the last process holding the
open file dies (SIGKILL too), so a lock never outlives its writers and is never stale. A lock
file descriptor passed to a child (``pass_fds``) is the *same* lock: the child holds it as well,
so a run stays locked while any process that writes it is alive.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

PARENT_ENV = "LIGHTNING_RLVR_PARENT_PID"
FIT_REPORT_ENV = "LIGHTNING_RLVR_FIT_REPORT"  # a fit writes {"ckpt_path": its last checkpoint} to this file
LOCK_NAME = ".lock"  # in a folder a process writes (a checkpoint folder): held by that writer
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> bool:
    """Make the kernel SIGKILL this process when its parent dies; True where that is supported (Linux).

    ``parent``: the pid this process was started by; if it is already gone (the parent died before
    this call), this process kills itself now."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def child_env() -> dict[str, str]:
    """Variables for a ``python`` child that should die with this process (see ``adopt_parent_from_env``)."""
    return {PARENT_ENV: str(os.getpid())}


def adopt_parent_from_env() -> None:
    """In a child started with ``child_env()``: die with that parent. The variable is removed so this
    process's own children (started without ``child_env``) do not compare against the wrong pid."""
    value = os.environ.pop(PARENT_ENV, None)
    if value and value.isdigit():
        die_with_parent(int(value))


def try_lock(file: IO) -> bool:
    """Take an exclusive ``flock`` on an open file without waiting; False if another process holds it."""
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): no locks
        return True
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def wait_lock(file: IO, timeout_s: float) -> bool:
    """``try_lock`` again for up to ``timeout_s`` (a killed holder's children take a moment to die)."""
    deadline = time.monotonic() + timeout_s
    while not try_lock(file):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def holder(path: str | os.PathLike) -> str:
    """The pid a lock file names (written by its holder), or ``?``."""
    with contextlib.suppress(OSError):
        text = Path(path).read_text().strip()
        if text.isdigit():
            return text
    return "?"


def is_locked(path: str | os.PathLike) -> bool:
    """Whether some live process holds the ``flock`` of lock file ``path`` (a missing file: no)."""
    try:
        with open(path, "a+") as f:
            if not try_lock(f):
                return True
    except FileNotFoundError:
        return False
    return False


@contextlib.contextmanager
def locked(path: str | os.PathLike, timeout_s: float = 0.0) -> Iterator[IO | None]:
    """Hold the lock file ``path`` (yields the open file, or None if another process holds it).

    The holder's pid is written in the file. Closing the file (leaving the block, or the process
    dying by any signal) releases the lock; the file itself stays (removing it would race)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        if not wait_lock(f, timeout_s):
            yield None
            return
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield f
