"""Every kind of bad input to the CLI is ONE stderr line ``lightning-rlvr: error: ...`` and exit status 2.

Settings out of range are caught when the module / data module is built (before any model
load or warm start); configs and checkpoints are checked before anything is instantiated.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
import torch

from lightning_rlvr.cli.app import MOVED_MODULES, moved_to
from tests.conftest import QUICKSTART, REPO, TINY


def one_error_line(capsys, exit_info) -> str:
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("lightning-rlvr: error: ")
    return lines[0]


BAD_SETTINGS = [  # through the CLI, one per setting; the Python tests below cover more variants
    ("--model.group_size", "0", "model.group_size must be a whole number >= 1, got 0"),
    ("--model.max_new_tokens", "-1", "model.max_new_tokens must be a whole number >= 1, got -1"),
    ("--model.micro_batch_size", "0", "model.micro_batch_size must be a whole number >= 1"),
    ("--model.eval_samples", "-2", "model.eval_samples must be a whole number >= 1"),
    ("--model.temperature", "0", "model.temperature must be a number > 0"),
    ("--data.batch_size", "-16", "data.batch_size must be a whole number >= 1"),
    ("--model.group_size", "2.5", "model.group_size: Expected a int"),  # the parser's own type check
]


@pytest.mark.parametrize("flag,value,message", BAD_SETTINGS, ids=lambda v: str(v)[:24])
def test_a_bad_setting_is_one_line_before_any_work(run_cli, tmp_path, capsys, flag, value, message):
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", flag, value)
    line = one_error_line(capsys, exit_info)
    assert message in line
    assert not any(tmp_path.rglob("*.csv"))  # nothing ran


def test_a_bad_setting_from_the_shell_prints_exactly_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "lightning_rlvr.cli",
        "fit",
        "--config",
        QUICKSTART,
        "--config",
        TINY,
        "--trainer.default_root_dir",
        str(tmp_path),
        "--model.temperature",
        "0",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "lightning-rlvr: error: model.temperature must be a number > 0, got 0.0 "
        "(greedy decoding is not supported: use e.g. 0.1)"
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"group_size": 0},
        {"group_size": -3},
        {"group_size": 1.5},
        {"group_size": True},
        {"max_new_tokens": 0},
        {"max_new_tokens": -16},
        {"max_new_tokens": "16"},
        {"micro_batch_size": 0},
        {"micro_batch_size": -1},
        {"micro_batch_size": 8.0},
        {"eval_samples": 0},
        {"eval_samples": -4},
        {"eval_samples": None},
        {"temperature": 0},
        {"temperature": -1.0},
        {"temperature": "hot"},
        {"temperature": float("nan")},
        {"top_p": 0.0},
        {"top_p": 1.5},
    ],
    ids=str,
)
def test_the_module_rejects_wrong_types_and_ranges_from_python(kwargs):
    from lightning_rlvr import RLVRModule
    from lightning_rlvr.core.errors import RLVRError

    name = next(iter(kwargs))
    with pytest.raises(RLVRError, match=f"model.{name} must be"):
        RLVRModule(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"batch_size": 2.0}, {"batch_size": False}, {"val_size": -1}, {"eval_batch_size": "4"}],
    ids=str,
)
def test_the_data_module_rejects_wrong_types_and_ranges_from_python(kwargs):
    from lightning_rlvr import RLVRDataModule
    from lightning_rlvr.core.errors import RLVRError

    name = next(iter(kwargs))
    with pytest.raises(RLVRError, match=f"data.{name} must be"):
        RLVRDataModule(**kwargs)


BAD_CONFIGS = {
    "yaml-syntax": ("model:\n  group_size: [unclosed\n", "not valid YAML (line 3, column 1)"),
    "yaml-tab": ("model:\n\tgroup_size: 4\n", "not valid YAML (line 2"),
    "a-list": ("- model\n- data\n", "a config must be a mapping of sections"),
    "a-string": ("just some words\n", "a config must be a mapping of sections"),
    "unknown-class-path": (
        "model:\n  credit:\n    class_path: lightning_rlvr.credit.NoSuchCredit\n",
        "class_path 'lightning_rlvr.credit.NoSuchCredit'",
    ),
    "unknown-module": ("model:\n  task:\n    class_path: no_such_package.Task\n", "no_such_package"),
    "moved-module": (
        "model:\n  collapse_guard:\n    class_path: lightning_rlvr.guard.CollapseGuard\n",
        "has moved: use 'lightning_rlvr.collapse_guard.CollapseGuard'",
    ),
    "unknown-key": ("model:\n  group_sise: 4\n", "group_sise"),
    "unknown-section": ("modle:\n  group_size: 4\n", "modle"),
    "unknown-init-arg": (
        "model:\n  task:\n    class_path: lightning_rlvr.tasks.AdditionTask\n"
        "    init_args:\n      digitz: 2\n",
        "digitz",
    ),
}


@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_a_bad_config_file_is_one_line(run_cli, tmp_path, capsys, name):
    text, message = BAD_CONFIGS[name]
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", configs=(QUICKSTART, TINY, str(bad)))
    line = one_error_line(capsys, exit_info)
    assert message in line


@pytest.mark.parametrize(
    "args,message",
    [
        (("--model.credit", "lightning_rlvr.credit.NoSuchCredit"), "NoSuchCredit"),
        (("--model.no_such_key", "3"), "unrecognized arguments: --model.no_such_key 3"),
        (("--config", "/no/such/config.yaml"), "config.yaml"),
        (
            ("--model.collapse_guard", "lightning_rlvr.guard.CollapseGuard"),
            "has moved: use 'lightning_rlvr.collapse_guard.CollapseGuard'",
        ),
    ],
    ids=["class_path", "unknown-flag", "missing-config", "moved-module"],
)
def test_bad_flags_are_one_line(run_cli, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", *args)
    assert message in one_error_line(capsys, exit_info)


@pytest.mark.parametrize("old", list(MOVED_MODULES))
def test_each_moved_module_is_gone_and_its_new_home_imports(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    importlib.import_module(MOVED_MODULES[old])
    assert moved_to(f"{old}.Name") == f"{MOVED_MODULES[old]}.Name"
    assert moved_to(f"{MOVED_MODULES[old]}.Name") is None


def _checkpoint_file(tmp_path, kind: str):
    path = tmp_path / f"{kind}.ckpt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random-bytes":
        path.write_bytes(
            torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
            .numpy()
            .tobytes()
        )
    elif kind in ("truncated", "not-a-checkpoint"):
        obj = {"state_dict": {"w": torch.zeros(256, 256)}, "hyper_parameters": {}}
        torch.save(obj if kind == "truncated" else [1, 2, 3], path)
        if kind == "truncated":
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])  # an interrupted copy
    elif kind == "a-text-file":
        path.write_text("model: {}\n")
    return path


CKPT_CASES = {
    "missing": "no such file",
    "empty": "the file is empty",
    "truncated": "not a checkpoint file (truncated",
    "random-bytes": "not a checkpoint file (truncated",
    "a-text-file": "not a checkpoint file (truncated",
    "not-a-checkpoint": "not a Lightning checkpoint",
}


@pytest.mark.parametrize(
    "kind,subcommand", [(kind, "test") for kind in CKPT_CASES] + [("truncated", "fit"), ("missing", "fit")]
)
def test_a_bad_checkpoint_is_one_line(run_cli, tmp_path, capsys, kind, subcommand):
    path = _checkpoint_file(tmp_path, kind)
    configs = (QUICKSTART, TINY) if subcommand == "fit" else ()
    with pytest.raises(SystemExit) as exit_info:
        run_cli(subcommand, "--ckpt_path", str(path), configs=configs)
    line = one_error_line(capsys, exit_info)
    assert f"--ckpt_path {path}: {CKPT_CASES[kind]}" in line


def test_help_and_print_config_still_work(run_cli, capsys):
    for flag in ("--help", "--print_config"):
        with pytest.raises(SystemExit) as exit_info:
            run_cli("fit", flag)
        assert exit_info.value.code in (0, None)
        out = capsys.readouterr().out
        assert ("usage:" in out) if flag == "--help" else ("model:" in out and "trainer:" in out)
