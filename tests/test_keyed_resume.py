"""A keyed-sampling fit stopped at a checkpoint and resumed with ``--ckpt_path last`` is the unbroken fit.

``model.sampling_key: keyed`` seeds each rollout row from (the run's sampling seed, step, prompt, answer,
sample). The sampling seed travels in the checkpoint, so a resume samples the same rows whatever the
resumed process's own seed: resumed in this process after other draws, in a fresh process through the CLI
(as the sweep runner resumes an interrupted fit), or with another ``--seed_everything``.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import QUICKSTART, TINY

SEED = 3  # given on the command line, as a sweep gives each run its seed
STEPS, STOP = 4, 2  # the uninterrupted fit's steps; the stopped fit's last checkpoint
PER_STEP = ("train/", "credit/", "val/", "guard/dead_steps")  # logged each step (not wall-clock, not fit-end)
# a length penalty over the whole budget, so rewards vary within groups and every step updates the weights
SHAPED = '[{"class_path": "lightning_rlvr.rewards.OverlongPenalty", "init_args": {"cache": 16}}]'


def _args(root: Path, steps: int, *extra: str) -> list[str]:
    """``fit``'s arguments after the configs: keyed sampling, its checkpoints in ``root/ckpts``."""
    return [
        "--model.sampling_key",
        "keyed",
        "--model.reward_shaping",
        SHAPED,
        "--seed_everything",
        str(SEED),
        "--trainer.max_steps",
        str(steps),
        "--checkpoint.dirpath",
        str(root / "ckpts"),
        *extra,
    ]


def _steps(root: Path) -> dict[int, dict[str, str]]:
    """Each logged step's per-step metrics, from all of the run's version folders."""
    rows: dict[int, dict[str, str]] = {}
    for path in sorted(root.glob("runs/**/metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                kept = {k: v for k, v in row.items() if v and k.startswith(PER_STEP)}
                rows.setdefault(int(row["step"]), {}).update(kept)
    return rows


def _weights(root: Path) -> dict[str, torch.Tensor]:
    return torch.load(root / "ckpts" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def _same_run(straight: Path, resumed: Path) -> None:
    want, got = _steps(straight), _steps(resumed)
    hashes = [want[s]["train/rollout_hash"] for s in range(STEPS)]
    assert len(set(hashes)) == STEPS  # each step sampled another rollout: the comparison can fail
    assert all(float(want[s]["train/grad_norm"]) > 0 for s in range(STEPS))  # and updated the weights
    assert got == want
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=0, msg=key)


def _fresh_process_fit(root: Path, *args: str) -> None:
    """``python -m lightning_rlvr.cli fit ...`` in a new process, as the sweep runner runs a fit."""
    where = [
        "--trainer.logger.init_args.save_dir",
        str(root / "runs"),
        "--trainer.default_root_dir",
        str(root),
    ]
    command = [sys.executable, "-m", "lightning_rlvr.cli", "fit", "--config", QUICKSTART, "--config", TINY]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*command, *where, *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_keyed_fit_resumed_from_a_checkpoint_is_the_uninterrupted_fit(run_cli, tmp_path):
    straight = tmp_path / "straight"
    run_cli("fit", *_args(straight, STEPS), root=straight)
    stopped = [tmp_path / name for name in ("here", "fresh", "reseeded")]
    for root in stopped:
        run_cli("fit", *_args(root, STOP), root=root)

    # resumed in this process after other seeds and draws (the CLI seeds again from --seed_everything)
    torch.manual_seed(12345)
    torch.rand(1000)
    run_cli("fit", *_args(stopped[0], STEPS, "--ckpt_path", "last"), root=stopped[0])
    # resumed in a fresh process through the CLI, with the same command, as the sweep runner resumes
    _fresh_process_fit(stopped[1], *_args(stopped[1], STEPS, "--ckpt_path", "last"))
    for root in stopped[:2]:
        _same_run(straight, root)
    # resumed by a process seeded otherwise: the run's sampling seed is the checkpoint's
    resumed = run_cli(
        "fit", *_args(stopped[2], STEPS, "--ckpt_path", "last", "--seed_everything", "7"), root=stopped[2]
    )
    assert resumed.config.fit.seed_everything == 7 and resumed.model.sampling_seed == SEED
    _same_run(straight, stopped[2])
