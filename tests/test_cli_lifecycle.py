"""A run's checkpoints through the real CLI: a full disk, a damaged last.ckpt, a folder another run owns,
``--ckpt_path`` given a folder, and a ``--config`` model setting the checkpoint replaces."""

from __future__ import annotations

import contextlib
import errno
import json
from pathlib import Path

import pytest
import torch

from lightning_rlvr import checkpoint_files
from lightning_rlvr.core.process import locked

ALERTS = ("lightning-rlvr: error:", "lightning-rlvr: warning:")  # progress lines share the program's prefix


def _one_line(capsys, prefix: str) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(ALERTS)]
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    return lines[0]


def _step(path: Path) -> int:
    return torch.load(path, weights_only=True, mmap=True)["global_step"]


def test_a_full_disk_is_one_line_and_the_run_resumes_from_its_previous_checkpoint(
    run_cli, tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "ckpts"
    real, calls = checkpoint_files.atomic_file, []

    @contextlib.contextmanager
    def fills_up(path, mode="w", **kwargs):  # the 3rd checkpoint write (step 2) finds the disk full halfway
        calls.append(path)
        with real(path, mode, **kwargs) as f:
            if len(calls) != 3:
                yield f
                return

            class Full:
                def write(self, data):
                    f.write(bytes(data)[: len(data) // 2])
                    raise OSError(errno.ENOSPC, "No space left on device")

            yield Full()

    monkeypatch.setattr(checkpoint_files, "atomic_file", fills_up)
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--checkpoint.dirpath", str(folder))
    assert exit_info.value.code == 2
    line = _one_line(capsys, "lightning-rlvr: error: cannot write checkpoint")
    assert "No space left on device" in line and "--ckpt_path last" in line
    assert _step(folder / "last.ckpt") == 1  # the previous checkpoint, whole
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "epoch=0-step=1.ckpt", "last.ckpt"]
    monkeypatch.undo()

    (folder / "last.ckpt").write_bytes((folder / "last.ckpt").read_bytes()[:1000])  # and then damaged
    monkeypatch.setenv("LIGHTNING_RLVR_FIT_REPORT", str(tmp_path / "fit.json"))
    resumed = run_cli("fit", "--checkpoint.dirpath", str(folder), "--ckpt_path", "last")
    assert Path(resumed.config.fit.ckpt_path).name == "epoch=0-step=1.ckpt"
    line = _one_line(capsys, "lightning-rlvr: warning: --ckpt_path last: skipping")
    assert "last.ckpt" in line and "newest intact checkpoint" in line
    assert resumed.trainer.global_step == 2 and _step(folder / "last.ckpt") == 2
    report = json.loads((tmp_path / "fit.json").read_text())  # what the sweep tests: this run's own file
    assert report == {"ckpt_path": str(folder / "last.ckpt"), "global_step": 2}
    assert not list(folder.glob("last-*.ckpt"))  # no versioned names


def test_a_second_run_into_a_folder_holding_a_run_stops_with_one_line(run_cli, tmp_path, capsys):
    folder = tmp_path / "ckpts"
    checkpoint_files.AtomicCheckpointIO().save_checkpoint(
        {"state_dict": {}, "global_step": 5}, folder / "last.ckpt"
    )
    before = (folder / "last.ckpt").read_bytes()
    for extra in ((), ("--ckpt_path", str(tmp_path / "other.ckpt"))):  # fresh, or from another run's file
        if extra:
            checkpoint_files.AtomicCheckpointIO().save_checkpoint({"state_dict": {}}, tmp_path / "other.ckpt")
        with pytest.raises(SystemExit) as exit_info:
            run_cli("fit", "--checkpoint.dirpath", str(folder), "--model.lr", "1e-4", *extra)
        assert exit_info.value.code == 2
        line = _one_line(capsys, f"lightning-rlvr: error: {folder} already holds another run's checkpoints")
        assert "--ckpt_path last" in line and "--checkpoint.dirpath DIR" in line
    assert (folder / "last.ckpt").read_bytes() == before and not list(tmp_path.rglob("metrics.csv"))


def test_a_folder_another_live_fit_writes_is_refused_with_one_line(run_cli, tmp_path, capsys):
    folder = tmp_path / "ckpts"
    with locked(folder / checkpoint_files.LOCK) as held:  # as a fit running in another process holds it
        assert held is not None
        with pytest.raises(SystemExit):
            run_cli("fit", "--checkpoint.dirpath", str(folder))
    _one_line(capsys, f"lightning-rlvr: error: {folder} is being written by another fit")


def test_ckpt_path_takes_a_runs_folder_and_reports_config_settings_the_checkpoint_replaces(
    run_cli, tmp_path, capsys
):
    fit = run_cli("fit", "--trainer.max_steps", "1")
    folder = Path(fit.trainer.checkpoint_callback.last_model_path).parent
    capsys.readouterr()
    (tmp_path / "mine.yaml").write_text("model:\n  eval_samples: 3\n  group_size: 4\n")  # 4 as trained
    with pytest.raises(SystemExit):
        run_cli("test", "--ckpt_path", str(tmp_path), configs=())
    line = _one_line(capsys, f"lightning-rlvr: error: --ckpt_path {tmp_path}: a folder with no .ckpt file")
    assert "expected a checkpoint file, or a folder holding one run's checkpoints" in line
    test = run_cli("test", "--ckpt_path", str(folder), "--config", str(tmp_path / "mine.yaml"), configs=())
    assert Path(test.config.test.ckpt_path) == folder / "last.ckpt"
    line = _one_line(capsys, "lightning-rlvr: warning: --ckpt_path: the checkpoint's model settings replace")
    assert "model.eval_samples (3 -> 2)" in line and "group_size" not in line
    assert test.model.eval_samples == 2
    flagged = run_cli(
        "test",
        "--ckpt_path",
        str(folder),
        "--config",
        str(tmp_path / "mine.yaml"),
        "--model.eval_samples",
        "3",
        configs=(),
    )
    assert flagged.model.eval_samples == 3  # a flag wins, and nothing is reported
    assert not [x for x in capsys.readouterr().err.splitlines() if x.startswith(ALERTS)]
