"""Shared test fixtures: an isolated warm-start cache, an in-process CLI runner and a small sweep file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
TINY = str(REPO / "tests" / "configs" / "tiny.yaml")
TINY_TEXTWORLD = str(REPO / "tests" / "configs" / "tiny_textworld.yaml")
# configs that shrink a method's own extra models to test scale, by method file stem (composed after it)
METHOD_TEST_SCALE = {"opd": (str(REPO / "tests" / "configs" / "tiny_opd.yaml"),)}
# configs that shrink a base config to test scale, by its stem (composed right after it); the agent
# quickstart's TextWorld pool becomes tests/test_textworld_env.py's (one train and one val game)
BASE_TEST_SCALE = {
    "quickstart": (TINY,),
    "quickstart_agent": (TINY, TINY_TEXTWORLD),
}
# TextWorld's test pool on the arithmetic quickstart (no agent settings: the engine comes from the overlay)
TEXTWORLD_AFTER_QUICKSTART = (QUICKSTART, TINY, TINY_TEXTWORLD)
# a method's settings for episodes (a word vocabulary), by method file stem (composed after the method file)
AGENT_CONFIGS = REPO / "configs" / "agent"

torch.set_num_threads(1)  # tiny models: threads cost more than they give on 2 cores


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Warm starts are cached per test session, never in the user's home."""
    os.environ["LIGHTNING_RLVR_CACHE"] = str(tmp_path_factory.mktemp("rlvr_cache"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def run_cli(tmp_path):
    """Run ``lightning-rlvr`` in this process at test scale; returns the CLI object."""
    from lightning_rlvr.cli import run as cli_run

    def run(subcommand: str, *extra: str, configs: tuple[str, ...] = (QUICKSTART, TINY), root=None):
        root = Path(root or tmp_path)
        args = [subcommand]
        for c in configs:
            args += ["--config", c]
        args += [
            "--trainer.logger.init_args.save_dir",
            str(root / "runs"),
            "--trainer.default_root_dir",
            str(root),
        ]
        return cli_run(args + list(extra))

    return run


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def grid_sweep(tmp_path, monkeypatch):
    """A sweep in tmp_path over two method files x two learning rates x three seeds."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "base.yaml", "model:\n  group_size: 4\n")
    write(tmp_path / "method" / "alpha.yaml", "model:\n  loss:\n    init_args: {loss_agg: seq_mean}\n")
    write(tmp_path / "method" / "beta.yaml", "model:\n  loss:\n    init_args: {loss_agg: token_mean}\n")
    return write(
        tmp_path / "grid.yaml",
        "configs: [base.yaml]\n"
        "overrides: {trainer.max_steps: 3}\n"
        "grid:\n"
        '  "config:method": [method/beta.yaml, "method/*.yaml"]\n'
        "  model.lr: [1.0e-4, 5.0e-5]\n"
        "  seed_everything: [0, 1, 2]\n",
    )


def tiny_fit(root: Path, *extra: str) -> Path:
    """The last checkpoint of a 1-step quickstart fit at test scale under ``root`` (``extra``: more args)."""
    from lightning_rlvr.cli import run

    args = ["fit", "--config", QUICKSTART, "--config", TINY, "--trainer.max_steps", "1", *extra]
    args += ["--trainer.logger.init_args.save_dir", str(root / "runs")]
    args += ["--trainer.default_root_dir", str(root)]
    return Path(run(args).trainer.checkpoint_callback.last_model_path)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> Path:
    """A tiny quickstart checkpoint after one RL step, warm-started to ~40% correct (the credit lab):
    groups with correct and failed rollouts, and an oracle that varies."""
    return tiny_fit(tmp_path_factory.mktemp("credit_eval"), "--model.warm_start.init_args.max_steps", "300")
