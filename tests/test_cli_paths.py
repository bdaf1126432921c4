"""Where a run writes (``trainer.default_root_dir``) and what ``--ckpt_path last`` resumes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICKSTART, TINY


def train_steps(version_dir: Path) -> list[int]:
    with open(version_dir / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/reward_mean")]


@pytest.mark.parametrize("fixed_dirpath", [False, True], ids=["version-folders", "fixed-dirpath"])
def test_ckpt_path_last_resumes_this_runs_latest_checkpoint(run_cli, tmp_path, fixed_dirpath):
    extra = ("--checkpoint.dirpath", str(tmp_path / "ckpts")) if fixed_dirpath else ()
    first = run_cli("fit", *extra)
    last = Path(first.trainer.checkpoint_callback.last_model_path)
    assert last.name == "last.ckpt" and (last.parent == tmp_path / "ckpts") == fixed_dirpath
    resumed = run_cli("fit", "--trainer.max_steps", "4", "--ckpt_path", "last", *extra)
    assert Path(resumed.config.fit.ckpt_path) == last
    assert resumed.model.rl_step == 4 and resumed.trainer.global_step == 4
    runs = tmp_path / "runs" / "quickstart"
    assert train_steps(runs / "version_0") == [0, 1]
    assert train_steps(runs / "version_1") == [2, 3]  # started at step 2, not over from 0
    if not fixed_dirpath:  # the newest of several versions: a third run resumes the second's checkpoint
        again = run_cli("fit", "--trainer.max_steps", "5", "--ckpt_path", "last")
        assert Path(again.config.fit.ckpt_path).parent == runs / "version_1" / "checkpoints"
        assert train_steps(runs / "version_2") == [4]


@pytest.mark.parametrize("fixed_dirpath", [False, True], ids=["version-folders", "fixed-dirpath"])
def test_ckpt_path_last_with_nothing_to_resume_is_one_error_line(run_cli, tmp_path, capsys, fixed_dirpath):
    extra = ("--checkpoint.dirpath", str(tmp_path / "ckpts")) if fixed_dirpath else ()
    (tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints").mkdir(
        parents=True
    )  # a run that saved none
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--ckpt_path", "last", *extra)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lightning-rlvr: error: --ckpt_path last: no last.ckpt")
    assert not list(tmp_path.rglob("metrics.csv"))  # nothing trained


def test_runs_with_different_default_root_dirs_write_only_under_their_own(tmp_path, monkeypatch):
    from lightning_rlvr.cli import run

    monkeypatch.chdir(tmp_path)  # anything written relative to the working directory would land here
    quickstart_dirpath = yaml.safe_load(Path(QUICKSTART).read_text())["checkpoint"]["dirpath"]
    a = run(["fit", "--config", QUICKSTART, "--config", TINY, "--trainer.default_root_dir", "a"])
    b = run(
        [
            "fit",
            "--config",
            QUICKSTART,
            "--config",
            TINY,
            "--trainer.default_root_dir",
            str(tmp_path / "b"),
            "--checkpoint.dirpath",
            quickstart_dirpath,
        ]
    )
    assert Path(a.trainer.checkpoint_callback.last_model_path) == Path(
        "a/quickstart/version_0/checkpoints/last.ckpt"
    )
    # the quickstart's own dirpath: the README's runs/quickstart/checkpoints/last.ckpt under the default root
    assert (
        Path(b.trainer.checkpoint_callback.last_model_path) == tmp_path / "b/quickstart/checkpoints/last.ckpt"
    )
    assert (tmp_path / "a/quickstart/version_0/metrics.csv").is_file()
    assert (tmp_path / "b/quickstart/version_0/metrics.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert not list((tmp_path / "b").rglob("version_*/checkpoints"))  # b's checkpoints: one folder


def test_the_quickstart_paths_default_to_runs():
    from lightning_rlvr.cli import RLVRCLI
    from lightning_rlvr.data import RLVRDataModule
    from lightning_rlvr.module import RLVRModule

    cli = RLVRCLI(RLVRModule, RLVRDataModule, args=["--config", QUICKSTART], run=False)
    config = cli.config
    assert config.trainer.default_root_dir == "runs"  # the paths the README quotes:
    assert config.trainer.logger.init_args.save_dir == "runs"
    assert config.checkpoint.dirpath == "runs/quickstart/checkpoints"
