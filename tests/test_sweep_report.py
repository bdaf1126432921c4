"""The sweep report: t-intervals a human can check with a t-table, the markdown table, curves and files."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from lightning_rlvr.experiments.credit_lab.metrics import Summary
from lightning_rlvr.experiments.credit_lab.report import write_csv
from lightning_rlvr.experiments.stats import min_detectable_difference, t_interval, t_quantile
from lightning_rlvr.experiments.sweep import report as rep
from lightning_rlvr.experiments.sweep import rows as run_rows
from lightning_rlvr.experiments.sweep.comparison import compare_to_baseline, comparison_table, per_seed_table
from lightning_rlvr.experiments.sweep.spec import DONE, TEST_METRICS, ReportSettings, Run, expand, load_sweep
from tests.sweep_rows import read_rows

# Student's t, two-sided 95% (the 0.975 quantile), from any printed t-table
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_a_printed_t_table(df):
    assert t_quantile(df) == pytest.approx(T_TABLE[df], abs=5e-4)


def test_t_interval_by_hand():
    # 0.5, 0.6, 0.7: mean 0.6, sd 0.1, half-width 4.303 * 0.1 / sqrt(3) = 0.2484
    mean, lo, hi = t_interval([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6)
    assert (lo, hi) == (pytest.approx(0.6 - 0.24844, abs=1e-4), pytest.approx(0.6 + 0.24844, abs=1e-4))
    mean, lo, hi = t_interval([0.3])
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
    axes, rows = run_rows.read_results_csv(path)
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


def fake_finished_run(out: Path, run: Run, rewards: list[float], val: list[float], test: float) -> None:
    d = out / run.run_id
    (d / "logs" / "fit").mkdir(parents=True)
    lines = ["step,train/reward_mean,val/pass@1"]
    lines += [f"{s},{r}," for s, r in enumerate(rewards)]
    lines += [f"{s},,{v}" for s, v in zip(range(0, len(rewards) + 1, 2), val)]
    (d / "logs" / "fit" / "metrics.csv").write_text("\n".join(lines) + "\n")
    (d / TEST_METRICS).write_text(json.dumps({"test/pass@1": test, "test/pass@2": min(1.0, 2 * test)}))
    (d / DONE).write_text(json.dumps({"fit_s": 12.0, "test_s": 3.0}))


def test_report_writes_csv_table_curves_and_a_png(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for m in ("grpo", "shear"):
        (tmp_path / f"{m}.yaml").write_text("model: {}\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "out: out\nreport_dir: report\ngrid:\n  'config:method': [grpo.yaml, shear.yaml]\n"
        "  seed_everything: [0, 1, 2]\n"
    )
    sweep = load_sweep(path)
    runs = expand(sweep)
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
    assert "Compute: 75 s of job time over 5 finished runs (fit 60 s, test 15 s;" in md  # 5 x (12 + 3) s
    assert "The 1 run not finished would take about 15 s more if run" in md  # its cell's mean: 15 s
    from lightning_rlvr.experiments.sweep.rows import duration

    assert [duration(s) for s in (119, 120, 7199, 7200)] == ["119 s", "2 min", "120 min", "2.0 h"]
    assert (tmp_path / "report" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "report" / "curves.csv") as f:
        curve = [r for r in csv.DictReader(f) if r["cell"] == "grpo" and r["metric"] == "train/reward_mean"]
    # step 2, moving average over steps 0-2 of each seed (k = 0, 1, 2): 0.2 k; seed mean 0.2
    last = curve[-1]
    assert last["step"] == "2" and float(last["mean"]) == pytest.approx(0.2) and last["seeds"] == "3"


# ---------------------------------------------------------------------------- what the data can say
# seeds 0-2 of GRPO and three methods, in the order a sweep writes them (seed by seed)
PAIRED = """run_id,method,seed,test/pass@1
a,grpo,0,0.50
b,better,0,0.58
c,same,0,0.55
d,lonely,0,0.90
e,grpo,1,0.60
f,better,1,0.66
g,same,1,0.55
h,grpo,2,0.70
i,better,2,0.80
j,same,2,0.73
k,same,7,0.99
"""


PER_SEED = """run_id,max_steps,seed,test/pass@1,test/samples
a,1,0,0.0234375,128
b,1,1,0.0234375,128
c,1,2,0.0234375,
d,150,0,0.125,128
e,150,1,0.0625,128
f,150,2,0.5,128
g,150,3,0.5,128
"""


def test_per_seed_table_judges_each_seed_against_the_baselines_wilson_interval(tmp_path):
    axes, rows = read_rows(PER_SEED, tmp_path)
    settings = ReportSettings(baseline={"max_steps": "1"})
    text = per_seed_table(axes, rows, settings)
    lines = [line for line in text.splitlines() if line.startswith("| 150 |")]
    # the baseline's 3 of 128 has the 95% Wilson interval [0.008, 0.067]: 0.125 is above it, 0.0625 is not;
    # seed 2's baseline has no sample count and seed 3 has no baseline run: neither is judged
    assert lines == [
        "| 150 | 0 | 0.125 | 0.023 | [0.008, 0.067] | yes |",
        "| 150 | 1 | 0.062 | 0.023 | [0.008, 0.067] | no |",
    ]
    assert "- 150: 1 of 2 seeds above the baseline's interval." in text
    # runs tested before the sample count was logged: no table rather than a guessed one
    old = [{k: v for k, v in r.items() if k != "test/samples"} for r in rows]
    assert per_seed_table(axes, old, settings) == ""


def test_comparison_with_grpo_is_paired_by_seed_with_hand_computed_interval_and_p(tmp_path):
    axes, rows = read_rows(PAIRED, tmp_path)
    settings = ReportSettings(baseline={"method": "grpo"})
    found = {e["cell"]["method"]: e["comparison"] for e in compare_to_baseline(axes, rows, settings)}
    assert set(found) == {"better", "same", "lonely"}  # grpo is not compared with itself
    # better - grpo on seeds 0, 1, 2: 0.08, 0.06, 0.10 -> mean 0.08, sd 0.02, se 0.02 / sqrt 3
    c = found["better"]
    half = 4.302653 * 0.02 / math.sqrt(3)
    assert c.n == 3 and c.diff == pytest.approx(0.08)
    assert (c.low, c.high) == (pytest.approx(0.08 - half, abs=1e-6), pytest.approx(0.08 + half, abs=1e-6))
    tval = 0.08 / (0.02 / math.sqrt(3))  # t on 2 df: P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2
    assert c.p_value == pytest.approx(1 - tval / math.sqrt(tval**2 + 2), rel=1e-6)
    # same - grpo: 0.05, -0.05, 0.03 (seed 7 has no GRPO partner and is left out)
    assert found["same"].n == 3 and found["same"].diff == pytest.approx(0.01)
    assert found["lonely"].n == 1


def test_comparison_table_verdicts_read_better_worse_or_no_difference_larger_than_the_mdd(tmp_path):
    axes, rows = read_rows(PAIRED, tmp_path)
    table = comparison_table(axes, rows, ReportSettings(baseline={"method": "grpo"}))
    lines = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:]}
    half = 4.302653 * 0.02 / math.sqrt(3) * 100  # points
    mdd = min_detectable_difference(0.02, 3) * 100
    assert lines["better"] == (
        f"| better | test/pass@1 | 3 | +8.0 [{8 - half:+.1f}, {8 + half:+.1f}] | 0.020 | {mdd:.1f} | better |"
    )
    sd_same = math.sqrt(((0.04) ** 2 + (0.06) ** 2 + (0.02) ** 2) / 2)  # diffs 0.05, -0.05, 0.03; mean 0.01
    mdd_same = min_detectable_difference(sd_same, 3) * 100
    assert lines["same"].endswith(f"| {mdd_same:.1f} | no difference > {mdd_same:.1f} points |")
    assert lines["lonely"] == "| lonely | test/pass@1 | 1 | +40.0 | - | - | undecided (1 paired seed) |"
    # swapping the roles turns 'better' into 'worse' with the same MDD
    swapped = comparison_table(axes, rows, ReportSettings(baseline={"method": "better"}))
    assert [line for line in swapped.splitlines() if line.startswith("| grpo ")][0].endswith(
        f"| {mdd:.1f} | worse |"
    )
    # the same difference on every seed: no spread, so no test (not a certain 'better')
    shifted = PAIRED.replace("b,better,0,0.58", "b,better,0,0.56").replace(
        "i,better,2,0.80", "i,better,2,0.76"
    )
    settings = ReportSettings(baseline={"method": "grpo"})
    table = comparison_table(*read_rows(shifted, tmp_path), settings)
    line = [x for x in table.splitlines() if x.startswith("| better ")][0]
    no_spread = "undecided (every seed differs by exactly this: no spread to test)"
    assert line == f"| better | test/pass@1 | 3 | +6.0 | - | - | {no_spread} |"


def test_the_baseline_is_matched_on_every_other_axis(tmp_path):
    text = "run_id,method,task,seed,test/pass@1\n" + "".join(
        f"r,{m},{t},{s},{base + (0.1 if m == 'x' else 0) + 0.01 * s * (t == 'b')}\n"
        for t, base in (("a", 0.2), ("b", 0.6))
        for m in ("grpo", "x")
        for s in (0, 1)
    )
    axes, rows = read_rows(text, tmp_path)
    found = compare_to_baseline(axes, rows, ReportSettings(baseline={"method": "grpo"}))
    assert [(e["cell"]["method"], e["cell"]["task"]) for e in found] == [("x", "a"), ("x", "b")]
    assert all(e["comparison"].diff == pytest.approx(0.1) for e in found)  # not 0.5 across tasks


def test_training_seconds_and_steps_to_reach_the_target_come_from_the_step_rows(tmp_path):
    d = tmp_path / "run"
    (d / "logs" / "fit").mkdir(parents=True)
    # as Lightning writes it: the validation before RL at step 0, then one after steps 0-1 logged at
    # step 1 and one after steps 0-4 at step 4
    cols = "step,train/reward_mean,time/rollout_s,time/score_s,time/credit_s,time/update_s,val/pass@1"
    lines = [cols, "0,,,,,,0.10"]
    steps = [f"{s},0.5,1.0,0.25,0.25,{0.5 * (s + 1)}," for s in range(5)]  # steps 0-4: 2.0, 2.5 .. 4.0 s
    lines += [*steps[:2], "1,,,,,,0.30", *steps[2:], "4,,,,,,0.50"]
    (d / "logs" / "fit" / "metrics.csv").write_text("\n".join(lines) + "\n")
    full = run_rows.training_curve(d)
    assert full == [(0.0, 0, 0.10), (4.5, 2, 0.30), (15.0, 5, 0.50)]
    curve = [(seconds, value) for seconds, _, value in full]
    assert stats_time(curve, 0.3) == 4.5 and stats_time(curve, 0.4) == 15.0 and stats_time(curve, 0.05) == 0.0
    assert math.isnan(stats_time(curve, 0.6))


def stats_time(curve, target):
    from lightning_rlvr.experiments.stats import time_to_reach

    return time_to_reach(curve, target)


def write_credit_eval(path, rows: list[tuple[str, float | None, float | None, float | None]]) -> None:
    """credit_eval.csv as ``lightning-rlvr-credit-eval`` writes it; rows: (method, spearman, localisation,
    sign)."""

    def summary(x):
        return Summary(x, None if x is None else x - 0.1, None if x is None else x + 0.1, 4, 4)

    write_csv(
        path,
        [
            {
                "method": m,
                "class": "X",
                "spearman": summary(sp),
                "localisation": summary(lo),
                "uniform": summary(0.1),
                "sign": summary(sg),
                "tokens_per_group": 10.0,
                "seconds_per_group": 0.1,
            }
            for m, sp, lo, sg in rows
        ],
    )


def test_credit_eval_columns_are_read_when_present_and_omitted_otherwise(tmp_path):
    assert run_rows.read_credit_eval(tmp_path, "shear") == {}
    write_credit_eval(
        tmp_path / "credit_eval.csv",
        [("grpo", 0.1, 0.2, 0.5), ("shear", 0.4, 0.6, 0.8), ("shear", 0.6, None, 0.9)],
    )
    got = run_rows.read_credit_eval(tmp_path, "shear")  # the rows of this run's method; undefined skipped
    assert got == pytest.approx(
        {"credit_eval/spearman": 0.5, "credit_eval/localisation": 0.6, "credit_eval/sign": 0.85}
    )
    assert run_rows.read_credit_eval(tmp_path, "hsd")["credit_eval/spearman"] == pytest.approx(
        (0.1 + 0.4 + 0.6) / 3
    )


def test_report_has_the_comparison_time_to_target_and_credit_columns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for m in ("grpo", "shear"):
        (tmp_path / f"{m}.yaml").write_text("model: {}\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "out: out\nreport_dir: report\ngrid:\n  'config:method': [grpo.yaml, shear.yaml]\n"
        "  seed_everything: [0, 1, 2]\nreport: {target_accuracy: 0.55}\n"
    )
    sweep = load_sweep(path)
    assert sweep.report.baseline == {"method": "grpo"}  # the first value of the first axis
    runs = expand(sweep)
    for i, run in enumerate(runs):
        fake_finished_run(sweep.out, run, rewards=[0.1, 0.2, 0.3], val=[0.25, 0.5 + 0.05 * i], test=0.1 * i)
    write_credit_eval(sweep.out / runs[4].run_id / "credit_eval.csv", [("shear", 0.3, 0.2, 0.6)])
    rep.write_report(sweep, runs)
    md = (tmp_path / "report" / "results.md").read_text()
    assert "## Against the baseline (method = grpo)" in md
    assert "| shear | test/pass@1 | 3 | +30.0 [+30.0, +30.0] |" in md  # test = 0.1 i: shear - grpo = 0.3
    assert "loaded s to val pass@1 >= 0.55 (seeds)" in md and "credit spearman" in md
    with open(tmp_path / "report" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    # run i reaches 0.5 + 0.05 i at its second validation (step 2, no step times logged: 0 s)
    assert [r["time_to_target_s"] for r in rows] == ["", "0.0", "0.0", "0.0", "0.0", "0.0"]
    assert [r["steps_to_target"] for r in rows] == ["", "3", "3", "3", "3", "3"]  # after the 3 rewards
    assert [r["steps_at_last_val"] for r in rows] == ["3"] * 6
    assert "RL steps to val pass@1 >= 0.55 (seeds)" in md
    assert [r["credit_eval/spearman"] for r in rows] == ["", "", "", "", "0.3", ""]
    assert [r["credit_eval/sign"] for r in rows] == ["", "", "", "", "0.6", ""]


def test_the_compute_line_prices_the_runs_left_at_their_own_cells_mean():
    """A slow arm's runs not finished cost its own mean, not the sweep's; a cell with none finished costs the
    mean of all finished runs; a finished sweep states no estimate."""
    from lightning_rlvr.experiments.sweep.rows import compute_line

    cells = [(m, s) for m in ("a", "b", "c") for s in (0, 1, 2)]
    runs = [Run(f"{m}__seed={s}", (), (), (("method", m),), str(s)) for m, s in cells]
    times = {"a__seed=0": 100.0, "a__seed=1": 200.0, "b__seed=0": 1000.0}  # a: 150 s each; b: 1000 s
    rows = [{"run_id": r, "fit_s": t - 10, "test_s": 10} for r, t in times.items()]
    line = compute_line(rows, runs)
    # not finished: a 1 x 150 + b 2 x 1000 + c 3 x (1300 / 3) = 150 + 2000 + 1300 = 3450 s = 58 min
    assert "Compute: 22 min of job time over 3 finished runs" in line
    assert "The 6 runs not finished would take about 58 min more if run" in line
    done = [{"run_id": r.run_id, "fit_s": 1.0, "test_s": ""} for r in runs]
    assert "not finished" not in compute_line(done, runs) and "not finished" not in compute_line(rows)
