"""Atomic writes: a reader finds the previous version of a file or the new one, never a torn one.

Layer: ``core`` (imports nothing from the package). Every file the project writes for a reader to
use later (checkpoints, caches, exports, results) goes through these. A write lands in a temporary
sibling, is flushed and fsynced, then renamed over the target (``os.replace`` is atomic on POSIX);
on any error, a full disk included, the temporary is removed and the previous version is untouched.
Temporary names start with ``.`` and end in ``.tmp`` so that globbing readers never pick them up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", **open_kwargs: Any) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on a clean exit it replaces ``path``."""
    if not any(c in mode for c in "wx"):
        raise ValueError(f"atomic_file writes a whole file; mode {mode!r} must contain 'w'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode.replace("x", "w"), **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual mode
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_file(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_file(path, "wb") as f:
        f.write(data)


def _writer_alive(rest: str) -> bool:
    """Whether the process that named a temporary ``<pid>.<random>.tmp`` still runs (a nameless one: no)."""
    pid = rest.split(".", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory; on a clean exit it becomes ``path``.

    An existing ``path`` is renamed aside first and removed after the new one is in place, so a
    reader sees the old directory, the new one, or (for an instant, or after a kill between the two
    renames) none, never a partly written one. Leftovers of writers that are gone (their pid is in
    the temporary's name) are cleaned on the next call; a live writer's temporary is left alone.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}."
    for stale in path.parent.glob(f"{prefix}*.tmp"):
        if not _writer_alive(stale.name[len(prefix) :]):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f"{prefix}{os.getpid()}.", suffix=".tmp"))
    try:
        yield tmp
        _fsync_tree(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f"{prefix}{os.getpid()}.old.", suffix=".tmp"))
            os.replace(path, old / "x")
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def usual_modes(root: str | os.PathLike) -> None:
    """Give every file under ``root`` the mode a plain ``open`` gives (``0666`` less the umask).

    Some writers (``safetensors``) create their files ``0600``; a cache or export other users and tools
    read must not keep that.
    """
    mode = 0o666 & ~_umask()
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.chmod(os.path.join(dirpath, name), mode)
