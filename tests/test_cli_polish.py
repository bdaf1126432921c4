"""What a user sees around a run: the progress bar, the help, where ``test`` logs, no tips, file modes."""

from __future__ import annotations

import contextlib
import csv
import importlib
import inspect
import logging
import os
import pkgutil
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, REPO, TINY


def test_the_progress_bar_counts_steps_and_shows_an_integer_version(run_cli, capsys):
    run_cli("fit", "--trainer.enable_progress_bar", "true")
    out = capsys.readouterr().out
    assert re.search(r"step\s+2/2\b", out), out[-2000:]
    assert "Epoch" not in out and "/-2" not in out  # not Lightning's "Epoch 0/-2" with max_epochs -1
    assert "v_num=0" in out
    assert not re.search(r"v_num\W+\d+\.\d", out)  # not Rich's "v_num: 0.000"


def test_test_from_a_checkpoint_logs_beside_its_run_without_warnings_or_tips(
    run_cli, tmp_path, monkeypatch, recwarn
):
    from lightning_rlvr.cli import run

    fit = run_cli("fit", root=tmp_path / "train")  # tiny: a checkpoint every step, no checkpoint.dirpath
    ckpt = Path(fit.trainer.checkpoint_callback.last_model_path)
    assert ckpt.parent == tmp_path / "train" / "runs" / "quickstart" / "version_0" / "checkpoints"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # every Lightning log line, whatever handlers the session has
    logging.getLogger("lightning.pytorch").addHandler(handler)
    recwarn.clear()
    try:
        run(
            [
                "test",
                "--ckpt_path",
                str(ckpt),
                "--data.test_size",
                "4",
                "--data.eval_batch_size",
                "4",
                "--trainer.enable_progress_bar",
                "false",
            ]
        )
    finally:
        logging.getLogger("lightning.pytorch").removeHandler(handler)
    assert not list(cwd.rglob("*"))  # nothing under ./runs/rlvr
    metrics = ckpt.parents[2] / "version_1" / "metrics.csv"  # beside the run's version_0
    with open(metrics) as f:
        assert any(row.get("test/pass@1") for row in csv.DictReader(f))
    warned = [str(w.message) for w in recwarn]
    assert not [m for m in warned if "callbacks used to create the checkpoint" in m], warned
    assert not [m for m in warned if "dirpath has changed" in m], warned
    lines = [r.getMessage() for r in records]
    assert any("GPU available" in m for m in lines)  # Lightning's own lines still pass
    assert not [m for m in lines if "litlogger" in m or "Tip:" in m], lines


def test_test_logs_where_the_command_line_says(run_cli, tmp_path):
    fit = run_cli("fit", root=tmp_path / "train")
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    run_cli("test", "--ckpt_path", ckpt, "--data.test_size", "4", configs=(), root=tmp_path / "eval")
    assert list((tmp_path / "eval" / "runs").glob("rlvr/version_*/metrics.csv"))
    assert not (tmp_path / "train" / "runs" / "quickstart" / "version_1").exists()


@pytest.mark.parametrize(
    "path, save_dir, name",
    [
        ("runs/rlvr/version_3/checkpoints/last.ckpt", "runs", "rlvr"),  # Lightning's layout
        ("runs/quickstart/checkpoints/last.ckpt", "runs", "quickstart"),  # a dirpath across versions
        ("somewhere/my.ckpt", "somewhere", ""),  # anywhere else: its own folder
    ],
)
def test_a_checkpoints_run_location(path, save_dir, name):
    from lightning_rlvr.cli.options import run_log_location

    assert run_log_location(path) == (Path(save_dir), name)


def _plugin_classes() -> set[type]:
    """Every public subclass in the package of a class one of ``RLVRModule``'s settings takes."""
    import lightning_rlvr
    from lightning_rlvr.module import RLVRModule

    for info in pkgutil.walk_packages(lightning_rlvr.__path__, "lightning_rlvr."):
        if not info.name.endswith("sandbox_harness"):  # a standalone script reading stdin
            with contextlib.suppress(ImportError):
                importlib.import_module(info.name)
    hints = typing.get_type_hints(RLVRModule.__init__, vars(inspect.getmodule(RLVRModule)))
    bases, todo = set(), list(hints.values())
    while todo:
        t = todo.pop()
        todo += typing.get_args(t)
        if isinstance(t, type) and t.__module__.startswith("lightning_rlvr."):
            bases.add(t)
    found, todo = set(), [sub for base in bases for sub in base.__subclasses__()]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("lightning_rlvr.") and not cls.__name__.startswith("_"):
            found.add(cls)
        todo += cls.__subclasses__()
    return found


def test_fit_help_shows_the_projects_options_first_and_lists_every_plugin(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}
    out = subprocess.run(
        [sys.executable, "-m", "lightning_rlvr.cli", "fit", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=True,
    ).stdout
    lines = out.splitlines()
    first = {k: next(i for i, ln in enumerate(lines) if f"--{k}." in ln) for k in ("model", "trainer")}
    assert first["model"] < 20, lines[:20]  # usage and description name them at the top
    options = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("--")]
    first_option = {
        k: next(i for i in options if lines[i].lstrip().startswith(f"--{k}.")) for k in ("model", "trainer")
    }
    assert first_option["model"] < first_option["trainer"]
    assert "--model.credit.help" in "\n".join(lines[:12])
    flat = "".join(out.split())  # class paths wrap
    classes = _plugin_classes()
    assert {c.__name__ for c in classes} >= {"TextPolicy", "TinyPolicy", "GRPOCredit", "PPOClip"}
    missing = sorted(
        c.__name__ for c in classes if f".{c.__name__}," not in flat and f".{c.__name__})" not in flat
    )
    assert not missing, missing


@pytest.fixture(scope="module")
def lora_checkpoint(tmp_path_factory) -> str:
    from lightning_rlvr.cli import run

    root = tmp_path_factory.mktemp("lora_modes")
    lora = str(REPO / "configs" / "peft" / "lora.yaml")
    fit = run(
        [
            "fit",
            "--config",
            QUICKSTART,
            "--config",
            TINY,
            "--config",
            lora,
            "--trainer.default_root_dir",
            str(root),
        ]
    )
    return fit.trainer.checkpoint_callback.last_model_path


@pytest.mark.parametrize("lora", ["merge", "adapter"])
def test_every_exported_file_has_the_usual_mode(lora_checkpoint, tmp_path, lora):
    from lightning_rlvr.export import main as export_main

    old = os.umask(0o022)
    try:
        export_main(["--ckpt_path", lora_checkpoint, "--out", str(tmp_path / "out"), "--lora", lora])
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert any(p.name == "model.safetensors" for p in files)
    assert lora == "merge" or any(p.name == "adapter_model.safetensors" for p in files)
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in files}
    assert set(modes.values()) == {"0o644"}, modes
    folders = [tmp_path / "out", *(p for p in (tmp_path / "out").rglob("*") if p.is_dir())]
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {"0o755"}
