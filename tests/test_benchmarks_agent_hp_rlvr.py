"""The agent HP-RLVR benchmark's budget arithmetic and its reading/summary of runs (offline, no fits)."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import math
import random
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_agent_hp_rlvr", Path(__file__).resolve().parents[1] / "benchmarks" / "agent_hp_rlvr.py"
)
bench = sys.modules["bench_agent_hp_rlvr"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("budget", ["prompts", "steps"])
def test_plans_sample_the_same_episodes_and_validate_at_the_same_episode_counts(budget: str) -> None:
    for group, batch, steps, every in itertools.product((1, 2, 4, 8), (1, 3, 4), (1, 5, 8), (1, 2, 3)):
        grpo = bench.plan_for(8, 8, batch, steps, every, budget)
        other = bench.plan_for(group, 8, batch, steps, every, budget)
        assert (grpo.batch_size, grpo.max_steps, grpo.val_every) == (batch, steps, every)
        assert other.group_size == group and other.episodes == grpo.episodes == batch * 8 * steps
        assert other.val_every * other.episodes_per_step == grpo.val_every * grpo.episodes_per_step
        if budget == "prompts":
            assert other.max_steps == steps  # same number of updates
        else:
            assert other.batch_size == batch  # same prompts per update


def test_plan_rejects_a_group_that_does_not_divide_and_an_unknown_budget() -> None:
    with pytest.raises(ValueError, match="divide"):
        bench.plan_for(3, 8, 4, 8, 2, "prompts")
    with pytest.raises(ValueError, match="budget"):
        bench.plan_for(1, 8, 4, 8, 2, "time")


def _write_metrics(path: Path, step_s: list[float], zero: list[float], vals: list[tuple[int, float]]) -> None:
    """A CSVLogger-like metrics.csv: a pre-RL val row (if vals has step 0), a train row per step, val rows."""
    keys = ["step", "time/rollout_s", "time/update_s", "train/zero_grad_frac", "train/success", "val/pass@1"]
    rows = [{"step": 0, "val/pass@1": v} for done, v in vals if done == 0]
    for s, (dt, z) in enumerate(zip(step_s, zero)):
        rows.append(
            {
                "step": s,
                "time/rollout_s": dt / 2,
                "time/update_s": dt / 2,
                "train/zero_grad_frac": z,
                "train/success": 0.5,
            }
        )
        rows += [{"step": s, "val/pass@1": v} for done, v in vals if done == s + 1]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("validate_at_start", [True, False])
def test_runs_are_read_back_and_summarised(tmp_path: Path, validate_at_start: bool) -> None:
    rng = random.Random(0)
    runs = []
    for method, (_, _, group) in bench.METHODS.items():
        plan = bench.plan_for(group, 8, 4, 6, 2, "prompts")
        for seed in range(3):
            step_s = [rng.uniform(1, 5) for _ in range(plan.max_steps)]
            zero = [float(rng.random() < 0.5) for _ in range(plan.max_steps)]
            first = 0 if validate_at_start else plan.val_every
            vals = [(s, rng.randint(0, 32) / 32) for s in range(first, plan.max_steps + 1, plan.val_every)]
            path = tmp_path / f"{method}{seed}" / "metrics.csv"
            _write_metrics(path, step_s, zero, vals)
            run = bench.read_metrics(path, bench.Run(method, seed, plan))
            run.test = rng.random()
            assert run.val_steps == [s for s, _ in vals] and run.val == [v for _, v in vals]
            assert run.train_time == pytest.approx(list(itertools.accumulate(step_s)))
            assert run.zero_grad == zero
            curve = run.curve("episodes")
            assert [x for x, _ in curve] == [s * plan.episodes_per_step for s, _ in vals]
            # the last validation within a run's own training time is its final one
            assert run.val_within(run.train_time[-1]) == run.val[-1]
            assert math.isnan(run.val_within(-1.0))
            runs.append(run)
    hp = {r.seed: r.val[-1] for r in runs if r.method == bench.HP}
    grpo = {r.seed: r.val[-1] for r in runs if r.method == bench.GRPO}
    text = bench.summarize(runs, target=0.5)
    diff = sum(hp[s] - grpo[s] for s in hp) / len(hp)
    assert f"- final val success: {bench.fmt(diff)} [" in text
    for method in bench.METHODS:
        assert f"| {method} | " in text
    target = bench.default_target(runs)
    base = sum(r.val[0] for r in runs) / len(runs) if validate_at_start else 0.0
    assert base + 0.1 <= target < base + 0.1 + 1 / 32 + 1e-9 or target == 1.0
