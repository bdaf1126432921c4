"""core.files: a write either lands whole or leaves the previous version, with the usual file mode."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from lightning_rlvr.core import files


def test_write_text_replaces_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "a" / "results.md"
    files.write_text(p, "one")
    files.write_text(p, "two")
    assert p.read_text() == "two"
    assert sorted(x.name for x in p.parent.iterdir()) == ["results.md"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask


def test_failed_write_keeps_the_old_version(tmp_path):
    p = tmp_path / "x.bin"
    files.write_bytes(p, b"old")
    with pytest.raises(OSError), files.atomic_file(p, "wb") as f:
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert p.read_bytes() == b"old"
    assert [x.name for x in tmp_path.iterdir()] == ["x.bin"]


def test_atomic_file_refuses_append(tmp_path):
    with pytest.raises(ValueError, match="must contain 'w'"), files.atomic_file(tmp_path / "f", "a"):
        pass


def test_atomic_dir_replaces_a_directory_whole(tmp_path):
    d = tmp_path / "export"
    with files.atomic_dir(d) as tmp:
        (tmp / "config.json").write_text("{1}")
    with pytest.raises(RuntimeError), files.atomic_dir(d) as tmp:
        (tmp / "config.json").write_text("{2 torn")
        raise RuntimeError("killed")
    assert (d / "config.json").read_text() == "{1}"
    with files.atomic_dir(d) as tmp:
        (tmp / "model.bin").write_text("2")
    assert sorted(x.name for x in d.iterdir()) == ["model.bin"]
    assert [x.name for x in tmp_path.iterdir()] == ["export"]


def test_atomic_dir_cleans_a_killed_writers_leftovers(tmp_path):
    (tmp_path / ".export.abc.tmp").mkdir()
    with files.atomic_dir(tmp_path / "export") as tmp:
        (tmp / "f").write_text("x")
    assert [x.name for x in tmp_path.iterdir()] == ["export"]


def test_atomic_dir_leaves_a_live_writers_temporary_alone(tmp_path):
    import subprocess
    import sys

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = tmp_path / f".export.{live.pid}.abc.tmp"  # another writer, still running
        theirs.mkdir()
        gone = tmp_path / ".export.999999999.abc.tmp"  # a pid no process has
        gone.mkdir()
        with files.atomic_dir(tmp_path / "export") as tmp:
            (tmp / "f").write_text("x")
        assert theirs.is_dir() and not gone.exists()
    finally:
        live.kill()
        live.wait()
