"""The sweep report: t-intervals a human can check with a t-table, the markdown table, curves and files."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from lightning_rlvr import sweep as sw
from lightning_rlvr import sweep_report as rep

# Student's t, two-sided 95% (the 0.975 quantile), from any printed t-table
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_a_printed_t_table(df):
    assert rep.t_quantile(df) == pytest.approx(T_TABLE[df], abs=5e-4)


def test_t_interval_by_hand():
    # 0.5, 0.6, 0.7: mean 0.6, sd 0.1, half-width 4.303 * 0.1 / sqrt(3) = 0.2484
    mean, lo, hi = rep.t_interval([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6)
    assert (lo, hi) == (pytest.approx(0.6 - 0.24844, abs=1e-4), pytest.approx(0.6 + 0.24844, abs=1e-4))
    mean, lo, hi = rep.t_interval([0.3])
    assert mean == 0.3 and math.isnan(lo) and math.isnan(hi)  # one seed: no interval


HAND_MADE = """run_id,method,model.lr,seed,test/pass@1,test/pass@2,train/reward_last,fit_s
grpo__lr=1e-4__seed=0,grpo,1e-4,0,0.5,0.70,0.30,100
grpo__lr=1e-4__seed=1,grpo,1e-4,1,0.6,0.80,0.40,110
grpo__lr=1e-4__seed=2,grpo,1e-4,2,0.7,0.90,0.50,120
shear__lr=1e-4__seed=0,shear,1e-4,0,0.2,0.50,0.20,200
shear__lr=1e-4__seed=1,shear,1e-4,1,0.4,0.50,0.20,220
shear__lr=5e-5__seed=0,shear,5e-5,0,0.9,0.95,0.60,300
"""


def test_markdown_table_from_a_hand_made_results_file(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text(HAND_MADE)
    axes, rows = rep.read_results_csv(path)
    assert axes == ["method", "model.lr"]
    table = rep.markdown_table(axes, rows).splitlines()
    assert table[0] == (
        "| method | model.lr | seeds | test pass@1 | test pass@2 | train reward (last 10 steps) "
        "| fit time (s) |"
    )
    assert len(table) == 2 + 3  # header, rule, one row per (method, lr) cell
    grpo, shear, shear_small_lr = table[2:]
    # grpo pass@1: 0.5, 0.6, 0.7 -> 0.600 +- 4.303 * 0.1 / sqrt(3) = 0.600 [0.352, 0.848]
    # grpo pass@2: 0.7, 0.8, 0.9 -> 0.800 [0.552, 1.048]; reward 0.3, 0.4, 0.5 -> 0.400 [0.152, 0.648]
    assert grpo == (
        "| grpo | 1e-4 | 3 | 0.600 [0.352, 0.848] | 0.800 [0.552, 1.048] | 0.400 [0.152, 0.648] | 110 |"
    )
    # shear pass@1: 0.2, 0.4 -> 0.300 +- 12.706 * 0.1414 / sqrt(2) = 0.300 [-0.971, 1.571]; pass@2 constant
    assert (
        shear
        == "| shear | 1e-4 | 2 | 0.300 [-0.971, 1.571] | 0.500 [0.500, 0.500] | 0.200 [0.200, 0.200] | 210 |"
    )
    assert shear_small_lr == "| shear | 5e-5 | 1 | 0.900 | 0.950 | 0.600 | 300 |"  # one seed: the value alone


def fake_finished_run(out: Path, run: sw.Run, rewards: list[float], val: list[float], test: float) -> None:
    d = out / run.run_id
    (d / "logs" / "fit").mkdir(parents=True)
    lines = ["step,train/reward_mean,val/pass@1"]
    lines += [f"{s},{r}," for s, r in enumerate(rewards)]
    lines += [f"{s},,{v}" for s, v in zip(range(0, len(rewards) + 1, 2), val)]
    (d / "logs" / "fit" / "metrics.csv").write_text("\n".join(lines) + "\n")
    (d / sw.TEST_METRICS).write_text(json.dumps({"test/pass@1": test, "test/pass@2": min(1.0, 2 * test)}))
    (d / sw.DONE).write_text(json.dumps({"fit_s": 12.0, "test_s": 3.0}))


def test_report_writes_csv_table_curves_and_a_png(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for m in ("grpo", "shear"):
        (tmp_path / f"{m}.yaml").write_text("model: {}\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "out: out\nreport_dir: report\ngrid:\n  'config:method': [grpo.yaml, shear.yaml]\n"
        "  seed_everything: [0, 1, 2]\n"
    )
    sweep = sw.load_sweep(path)
    runs = sw.expand(sweep)
    for i, run in enumerate(runs[:5]):  # the last run (shear, seed 2) has not finished
        k = i % 3
        fake_finished_run(
            sweep.out, run, rewards=[0.1 * k, 0.2 * k, 0.3 * k], val=[0.25, 0.5 + 0.1 * k], test=0.2 * k
        )
    paths = rep.write_report(sweep, runs)
    assert {p.name for p in paths} == {"results.csv", "results.md", "curves.csv", "curves.png"}
    with open(tmp_path / "report" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["run_id"] for r in rows] == [r.run_id for r in runs[:5]]
    assert rows[1]["method"] == "grpo" and rows[1]["seed"] == "1"
    assert float(rows[1]["val/pass@1_start"]) == 0.25 and float(rows[1]["val/pass@1_final"]) == 0.6
    assert float(rows[2]["train/reward_last"]) == pytest.approx(
        (0.2 + 0.4 + 0.6) / 3
    )  # seed 2: 0.2, 0.4, 0.6
    md = (tmp_path / "report" / "results.md").read_text()
    assert "5 of 6 runs finished" in md and "| grpo | 3 |" in md and "| shear | 2 |" in md
    assert "val pass@1 before RL (the shared warm start): 0.250" in md
    assert (tmp_path / "report" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "report" / "curves.csv") as f:
        curve = [r for r in csv.DictReader(f) if r["cell"] == "grpo" and r["metric"] == "train/reward_mean"]
    # step 2, moving average over steps 0-2 of each seed (k = 0, 1, 2): 0.2 k; seed mean 0.2
    last = curve[-1]
    assert last["step"] == "2" and float(last["mean"]) == pytest.approx(0.2) and last["seeds"] == "3"
