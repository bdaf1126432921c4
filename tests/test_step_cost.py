"""Time to the target in RL steps and in steps x an idle pilot's per-step cost; loaded seconds labelled so."""

from __future__ import annotations

import csv

import pytest

from lightning_rlvr.experiments.sweep import report as rep
from lightning_rlvr.experiments.sweep.checks import SweepError
from lightning_rlvr.experiments.sweep.rows import IDLE_CAP, IDLE_TO_TARGET
from lightning_rlvr.experiments.sweep.spec import expand, load_sweep
from tests.test_sweep_report import fake_finished_run

GRID = "out: out\nreport_dir: report\ngrid:\n  'config:method': [grpo.yaml, shear.yaml]\n"
GRID += "  seed_everything: [0, 1]\n"


def _sweep(tmp_path, report: str):
    for m in ("grpo", "shear"):
        (tmp_path / f"{m}.yaml").write_text("model: {}\n")
    path = tmp_path / "s.yaml"
    path.write_text(GRID + f"report: {report}\n")
    return load_sweep(path)


def test_steps_times_the_idle_cost_beside_loaded_seconds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = _sweep(
        tmp_path,
        "{target_accuracy: 0.5, step_cost_s: {grpo: 10, shear: 2.5}, compare: [idle_time_to_target_s]}",
    )
    assert sweep.report.step_cost_s == {"grpo": 10.0, "shear": 2.5}
    runs = expand(sweep)  # grpo 0, grpo 1, shear 0, shear 1
    for i, run in enumerate(runs):  # every run but shear seed 1 reaches 0.5 after its 3 steps
        fake_finished_run(
            sweep.out, run, rewards=[0.1, 0.2, 0.3], val=[0.25, 0.4 if i == 3 else 0.6], test=0.1
        )
    rep.write_report(sweep, runs)
    with open(tmp_path / "report" / "results.csv") as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    idle = [rows[r.run_id][IDLE_TO_TARGET] for r in runs]
    assert idle == ["30.0", "30.0", "7.5", ""]  # 3 steps x 10 s, 3 x 2.5 s; one never reached it
    assert [rows[r.run_id][IDLE_CAP] for r in runs] == ["30.0", "30.0", "7.5", "7.5"]
    md = (tmp_path / "report" / "results.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method | seeds"))
    titles = ["RL steps to val pass@1 >= 0.5", "idle s to val pass@1 >= 0.5", "loaded s to val pass@1 >= 0.5"]
    assert [header.index(t) for t in titles] == sorted(header.index(t) for t in titles)  # in this order
    assert "| 30 [30, 30] (2/2) |" in md and "| 8 (1/2) |" in md
    # shear minus grpo in idle seconds, paired by seed: 7.5 - 30 on both (seed 1's shear capped at its end)
    assert "| shear | idle_time_to_target_s | 2 | -22 |" in md  # -22.5 to whole seconds


def test_a_cell_without_a_cost_shows_no_idle_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = _sweep(tmp_path, "{target_accuracy: 0.5, step_cost_s: {grpo: 10}}")
    runs = expand(sweep)
    for run in runs:
        fake_finished_run(sweep.out, run, rewards=[0.1, 0.2, 0.3], val=[0.25, 0.6], test=0.1)
    rep.write_report(sweep, runs)
    md = (tmp_path / "report" / "results.md").read_text()
    shear = next(line for line in md.splitlines() if line.startswith("| shear | 2 |"))
    assert "| - |" in shear and "never" not in shear  # not measured, which is not "never reached"


@pytest.mark.parametrize(
    "costs, said",
    [
        ("fast", "report.step_cost_s must map a grid value to seconds per step"),
        ("{grpo: fast}", "report.step_cost_s.grpo must be a number"),
        ("{grpo: 0}", "report.step_cost_s.grpo must be a positive number of seconds"),
        ("{grpo: -3.0}", "report.step_cost_s.grpo must be a positive number of seconds"),
        ("{dapo: 3.0}", "report.step_cost_s: 'dapo' is not a grid value"),
        ("{grpo: .inf}", "report.step_cost_s.grpo must be a positive number of seconds"),
    ],
)
def test_a_bad_step_cost_is_one_line(tmp_path, monkeypatch, costs, said):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SweepError) as err:
        _sweep(tmp_path, f"{{step_cost_s: {costs}}}")
    assert said in str(err.value) and "\n" not in str(err.value) and "s.yaml" in str(err.value)
