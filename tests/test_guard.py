"""The collapse guard: a run with no learning signal says so (stderr, progress bar, summary) and can stop."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest

from lightning_rlvr import AdditionTask, RLVRDataModule, RLVRModule, TinyPolicy
from lightning_rlvr.collapse_guard import CollapseGuard
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.problem import Verdict
from tests.test_module import trainer as quiet_trainer  # the bare test-scale Trainer

RESULTS = Path(__file__).resolve().parents[1] / "sweeps" / "results"


class NeverRight(AdditionTask):
    """Every completion is wrong: every group has one reward, no update has a gradient."""

    def check(self, completion, problem):
        return Verdict(0.0, "wrong", correct=False)


class CoinFlip(AdditionTask):
    """Half the completions are right (by a hash of their text): every step has a signal."""

    def check(self, completion, problem):
        ok = hashlib.sha256(completion.encode()).digest()[0] % 2 == 0
        return Verdict(float(ok), "", correct=ok)


def fit(tmp_path, task, guard, steps):
    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    module = RLVRModule(
        task=task, policy=policy, group_size=4, max_new_tokens=8, micro_batch_size=8, collapse_guard=guard
    )
    fitted = quiet_trainer(tmp_path, steps)
    fitted.fit(module, RLVRDataModule(batch_size=2, val_size=2))
    return fitted


def test_a_run_forced_to_collapse_says_so_in_stderr_the_bar_and_the_summary(tmp_path, capsys):
    trainer = fit(tmp_path, NeverRight(digits=1), CollapseGuard(patience=3), steps=5)
    err = capsys.readouterr().err
    assert trainer.global_step == 5  # trains on by default
    assert err.count("WARNING: training has collapsed: 3 steps in a row (up to step 3)") == 1
    assert "no update had any gradient" in err and "no rollout was rewarded" in err
    assert "collapse guard: COLLAPSED at step 3" in err and "never recovered" in err
    assert float(trainer.progress_bar_metrics["collapsed"]) == 5.0  # dead steps in a row at the end
    assert float(trainer.callback_metrics["guard/dead_steps"]) == 5.0


def test_stop_ends_the_fit_at_the_alarm(tmp_path, capsys):
    trainer = fit(tmp_path, NeverRight(digits=1), CollapseGuard(patience=2, stop=True), steps=6)
    assert trainer.global_step == 2
    err = capsys.readouterr().err
    assert "stopping (stop: true)" in err and "training stopped there" in err


def test_a_run_with_a_signal_raises_no_alarm(tmp_path, capsys):
    guard = CollapseGuard(patience=2)
    trainer = fit(tmp_path, CoinFlip(digits=1), guard, steps=6)
    err = capsys.readouterr().err
    assert trainer.global_step == 6
    assert "WARNING" not in err and "collapsed" not in trainer.progress_bar_metrics
    assert "collapse guard: no collapse" in err
    assert guard.steps == 6 and guard.collapse_step is None


def test_the_module_installs_a_guard_by_default_and_patience_0_turns_it_off(tmp_path, capsys):
    module = RLVRModule(policy=TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64))
    assert any(isinstance(c, CollapseGuard) for c in module.configure_callbacks())
    fit(tmp_path, NeverRight(digits=1), CollapseGuard(patience=0), steps=3)
    assert "collapse" not in capsys.readouterr().err
    with pytest.raises(RLVRError, match="patience"):
        CollapseGuard(patience=-1)


def test_recovery_is_reported_and_the_state_survives_a_checkpoint():
    guard = CollapseGuard(patience=2)
    dead, alive = {"train/zero_grad_frac": 1.0, "train/accuracy": 0.0}, {"train/accuracy": 0.5}
    assert guard.record(dead, 1) is None and guard.record(dead, 2) is not None
    twin = CollapseGuard(patience=2)
    twin.load_state_dict(guard.state_dict())
    assert twin.record(dead, 3) is None and twin.streak == 3  # the streak goes on, one alarm
    twin.record(alive, 4)
    assert twin.recovered_at == 4 and "recovered at 4" in twin.summary()


def replay(path: Path, patience: int = 10) -> int | None:
    """The step at which the default guard would have gone off on a committed run's logged steps."""
    guard = CollapseGuard(patience=patience)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row.get("train/reward_mean"):
                metrics = {k: float(v) for k, v in row.items() if k.startswith("train/") and v}
                if guard.record(metrics, int(row["step"])):
                    return int(row["step"])
    return None


@pytest.mark.parametrize(
    "run, alarm",
    [
        ("methods_agent/runs/grpo__seed=1", True),  # zero reward from step ~126 on
        ("methods_agent/runs/shear__seed=1", True),  # no gradient from step ~14 on
        ("lr_tuning_agent/runs/grpo__lr=0.002__seed=0", True),
        ("methods_agent/runs/grpo__seed=0", False),  # 15 dead steps, never more than 3 in a row
        ("control_agent_grpo_lr/runs/grpo__lr=0.0005__seed=0", False),
        ("methods_agent/runs/hp_rlvr+hp_rlvr__seed=0", False),  # groups of one: frac_zero_std is always 1
        ("methods_addition_long/runs/grpo__seed=0", False),
    ],
)
def test_the_default_guard_on_committed_runs(run, alarm):
    assert (replay(RESULTS / run / "logs" / "fit" / "metrics.csv") is not None) is alarm


def test_the_guard_is_set_from_the_command_line(run_cli):
    settings = {
        "class_path": "lightning_rlvr.collapse_guard.CollapseGuard",
        "init_args": {"patience": 7, "stop": True},
    }
    guard = json.dumps(settings)
    cli = run_cli("fit", "--model.collapse_guard", guard, "--trainer.max_steps", "1")
    assert (cli.model.collapse_guard.patience, cli.model.collapse_guard.stop) == (7, True)
    assert sum(isinstance(c, CollapseGuard) for c in cli.trainer.callbacks) == 1
