"""Who sandboxed code runs as: a uid of its own per concurrent run (as root) and a python it can execute.

Layer: rewards (imports nothing of the package). ``sandbox.py`` takes a uid from ``UIDS`` for each run
when the trainer is root (as an ordinary user the run uses a user namespace and needs none) and starts
its harness with ``interpreter``'s choice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time


class UidPool:
    """Hands each concurrent run its own uid (root only), across threads and processes.

    A uid is held by an ``flock`` on a lock file in the temp dir, so two trainings on one machine
    never share one (a shared uid would share the ``RLIMIT_NPROC`` budget).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # uid -> lock file descriptor

    def acquire(self, uid_base: int, max_parallel: int) -> int:
        """A free uid of ``uid_base .. uid_base + max_parallel - 1``, waiting up to a minute for one."""
        import fcntl

        deadline = time.monotonic() + 60
        while True:
            with self._lock:
                for uid in range(uid_base, uid_base + max_parallel):
                    if uid in self._held:
                        continue
                    path = os.path.join(tempfile.gettempdir(), f"lightning_rlvr-sandbox-{uid}.lock")
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        os.close(fd)
                        continue
                    self._held[uid] = fd
                    return uid
            if time.monotonic() > deadline:
                raise RuntimeError("no free sandbox uid")
            time.sleep(0.01)

    def release(self, uid: int) -> None:
        with self._lock:
            os.close(self._held.pop(uid))  # closing the descriptor drops the flock


UIDS = UidPool()
_PYTHON_CACHE: dict[tuple, str] = {}


def interpreter(python: str | None, uid: int | None) -> str:
    """An interpreter ``uid`` can run (probed once per candidate list and uid): ``python`` when given,
    else the first of this process's interpreter and ``python3`` on PATH that it can execute."""
    candidates = (
        [python]
        if python
        else [
            sys.executable,
            os.path.realpath(sys.executable),
            getattr(sys, "_base_executable", ""),
            shutil.which("python3") or "",
            "/usr/bin/python3",
        ]
    )
    candidates = [c for c in dict.fromkeys(candidates) if c]
    if uid is None:
        return candidates[0]
    key = (tuple(candidates), uid)
    if key not in _PYTHON_CACHE:
        for cand in candidates:
            try:
                probe = subprocess.run(
                    [cand, "-I", "-c", "pass"],
                    user=uid,
                    group=uid,
                    extra_groups=[],
                    env={},
                    cwd="/",
                    capture_output=True,
                    timeout=30,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            if probe.returncode == 0:
                _PYTHON_CACHE[key] = cand
                break
        else:
            raise RuntimeError(f"no interpreter among {candidates} is executable by uid {uid}")
    return _PYTHON_CACHE[key]
