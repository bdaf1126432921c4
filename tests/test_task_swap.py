"""A task swap at test time (``test --ckpt_path C`` with another task class) replaces the checkpoint's task.

The checkpoint's task init_args (an addition task's ``digits``) are not merged into the new class, whether
the swap comes as dotted flags or as a ``--config`` task file; a ``--config`` naming the checkpoint's own
task class is still replaced by the checkpoint's settings (one warning line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, tiny_fit

from lightning_rlvr.cli import run as cli_run
from lightning_rlvr.tasks import AdditionTask, JsonlTask

JSONL_CONFIG = str(REPO / "configs" / "task" / "jsonl.yaml")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return tiny_fit(tmp_path_factory.mktemp("swap"), "--model.warm_start", "null")


def _rows(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(6))
    )
    return path


@pytest.mark.parametrize("how", ["flags", "config"])
def test_a_task_swap_replaces_the_checkpoints_task(ckpt, how, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # configs/task/jsonl.yaml names data/train.jsonl and data/test.jsonl
    rows = _rows(tmp_path / "data" / "test.jsonl")
    _rows(tmp_path / "data" / "train.jsonl")
    swap = {
        "flags": ["--model.task.class_path", "lightning_rlvr.tasks.JsonlTask"],
        "config": ["--config", JSONL_CONFIG],
    }[how]
    files = ["--model.task.init_args.test_file", str(rows), "--model.task.init_args.train_file", str(rows)]
    capsys.readouterr()
    cli = cli_run(["test", "--ckpt_path", str(ckpt), *swap, *files, "--data.test_size", "4"])
    assert isinstance(cli.model.task, JsonlTask) and not isinstance(cli.model.task, AdditionTask)
    task_args = cli.config.test.model.task.init_args
    assert task_args.test_file == str(rows) and "digits" not in task_args  # nothing of the old task merged
    assert cli.trainer.callback_metrics["test/samples"] > 0
    assert (
        "lightning-rlvr: warning" not in capsys.readouterr().err
    )  # a swap is not a setting the checkpoint replaced


def test_a_config_with_the_checkpoints_own_task_class_is_still_replaced_by_the_checkpoint(
    ckpt, tmp_path, capsys
):
    config = tmp_path / "mine.yaml"
    task = "class_path: lightning_rlvr.tasks.AdditionTask\n    init_args:\n      digits: 2\n"
    config.write_text(f"model:\n  task:\n    {task}")
    capsys.readouterr()
    cli = cli_run(["test", "--ckpt_path", str(ckpt), "--config", str(config), "--data.test_size", "2"])
    assert isinstance(cli.model.task, AdditionTask) and cli.model.task.digits == 1
    assert "model.task.init_args.digits (2 -> 1)" in capsys.readouterr().err
