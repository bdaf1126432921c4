"""A full disk is one error line from every writer, not a traceback: the writes are atomic, so nothing
already written changed (checkpoints have their own message, tests/test_faults.py)."""

from __future__ import annotations

import errno

import pytest

from lightning_rlvr.core.errors import user_error


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_a_full_disk_anywhere_in_the_chain_is_a_user_error(code):
    disk = OSError(code, "no room", "/cache/warmstart/abc")
    try:
        try:
            raise disk
        except OSError as inner:
            raise RuntimeError("while saving") from inner
    except RuntimeError as outer:
        message = str(user_error(outer))
    assert message.startswith("cannot write /cache/warmstart/abc: ") and "unchanged" in message
    assert "\n" not in message


@pytest.mark.parametrize("err", [OSError(errno.EACCES, "denied", "/x"), ValueError("bug"), OSError("plain")])
def test_other_errors_stay_bugs(err):
    assert user_error(err) is None


def test_the_warm_start_cache_on_a_full_disk_is_one_line(run_cli, monkeypatch, capsys, tmp_path):
    import lightning_rlvr.warmstart as warmstart

    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path / "empty_cache"))  # the warm start is written

    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(warmstart, "atomic_dir", full)
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--trainer.max_steps", "1")
    assert stop.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and err[0].startswith("lightning-rlvr: error: cannot write ")
