"""Training seconds (and RL steps) to a target accuracy, compared with the baseline: a run that never
reaches the target counts its whole training time (it is not dropped), and a shorter time reads as faster."""

from __future__ import annotations

import pytest

from lightning_rlvr.experiments.sweep import report as rep
from lightning_rlvr.experiments.sweep.claims import Claim, claims_section
from lightning_rlvr.experiments.sweep.comparison import compare_to_baseline, comparison_table
from lightning_rlvr.experiments.sweep.rows import (
    START,
    STEPS_CAP,
    STEPS_TO_TARGET,
    TIME_CAP,
    TIME_TO_TARGET,
    to_target,
)
from lightning_rlvr.experiments.sweep.spec import ReportSettings


def run(method: str, seed: int, reached: float | None, cap: float | None = 500.0) -> dict:
    """A results.csv row: seconds to the target ("" if never) and at the last validation ("" if unknown)."""
    return {
        "method": method,
        "seed": str(seed),
        START: "0.1",
        TIME_TO_TARGET: "" if reached is None else str(reached),
        TIME_CAP: "" if cap is None else str(cap),
    }


def by_seed(*rows: dict) -> dict[str, dict]:
    return {r["seed"]: r for r in rows}


def test_a_run_that_never_reaches_the_target_counts_its_whole_training_time():
    cell = by_seed(run("x", 0, 100), run("x", 1, None, 300), run("x", 2, None, 250), run("x", 3, 50))
    base = by_seed(run("b", 0, 80), run("b", 1, 120), run("b", 2, None, 200), run("b", 3, None, 400))
    base["4"] = run("b", 4, 10)  # no partner: not paired
    x, y, capped = to_target(cell, base)
    # seed 2: neither reached it, nothing about speed; seeds 1 and 3: one side capped at its full time
    assert x == {"0": 100.0, "1": 300.0, "3": 50.0} and y == {"0": 80.0, "1": 120.0, "3": 400.0}
    assert capped == 2


def test_rows_without_the_cap_leave_never_reached_seeds_out_as_before():
    cell = by_seed(run("x", 0, 100), run("x", 1, None, cap=None))
    base = by_seed(run("b", 0, 80), run("b", 1, 120))
    assert to_target(cell, base) == ({"0": 100.0}, {"0": 80.0}, 0)


SETTINGS = ReportSettings(baseline={"method": "grpo"}, compare=[TIME_TO_TARGET])


def table_row(rows: list[dict], method: str) -> str:
    table = comparison_table(["method"], rows, SETTINGS)
    (line,) = [line for line in table.splitlines() if line.startswith(f"| {method} |")]
    return line


def test_a_method_that_never_reaches_the_target_is_slower_not_missing():
    grpo = [run("grpo", s, t) for s, t in enumerate([100, 120, 110])]
    never = [run("slow", s, None, cap) for s, cap in enumerate([400, 420, 450])]
    line = table_row(grpo + never, "slow")
    # differences 300, 300, 340: mean 313.3, every seed capped, so the true gap is larger still
    assert "| 3 | +313 [" in line and "s |" in line  # whole seconds
    assert "| slower; 3 pair(s) with a run that never reached the target (its full time) |" in line


@pytest.mark.parametrize(("times", "said"), [([50, 60, 70], "faster"), ([200, 215, 225], "slower")])
def test_seconds_read_as_faster_or_slower(times, said):
    grpo = [run("grpo", s, t) for s, t in enumerate([100, 110, 125])]
    other = [run("m", s, t) for s, t in enumerate(times)]
    assert table_row(grpo + other, "m").endswith(f"| {said} |")


def test_the_speed_claim_counts_a_method_that_never_got_there_against_it():
    grpo = [run("grpo", s, t) for s, t in enumerate([100, 120, 110])]
    never = [run("hp", s, None, cap) for s, cap in enumerate([400, 420, 450])]
    settings = ReportSettings(baseline={"method": "grpo"}, compare=[TIME_TO_TARGET])
    entries = compare_to_baseline(["method"], grpo + never, settings)
    claim = Claim({"method": "hp"}, TIME_TO_TARGET, direction=-1, effect=1 / 1.21 - 1, relative=True)
    text = claims_section([claim], entries, level=0.95, power=0.8)
    said = "| slower, against the claim; 3 pair(s) with a run that never reached the target (its full time) |"
    assert said in text


@pytest.mark.parametrize("metric", [TIME_TO_TARGET, "test/pass@1", "train/tokens"])
def test_the_claims_table_prints_a_difference_as_the_comparison_table_does(metric):
    rows = [
        {"method": m, "seed": str(s), START: "0.1", metric: str(v), TIME_CAP: "900"}
        for m, vs in [("grpo", [100.25, 120.5, 110.75]), ("hp", [400.5, 420.25, 450.0])]
        for s, v in enumerate(vs)
    ]
    if metric != TIME_TO_TARGET:  # accuracies are fractions
        rows = [{**r, metric: str(float(r[metric]) / 1000)} for r in rows]
    settings = ReportSettings(baseline={"method": "grpo"}, compare=[metric])
    table = comparison_table(["method"], rows, settings)
    (line,) = [x for x in table.splitlines() if x.startswith("| hp |")]
    difference = line.split(" | ")[3]  # method | metric | paired seeds | difference [interval] | p | ...
    claim = Claim({"method": "hp"}, metric, direction=-1, effect=-0.174, relative=True)
    text = claims_section([claim], compare_to_baseline(["method"], rows, settings), level=0.95, power=0.8)
    (claim_row,) = [x for x in text.splitlines() if x.startswith("| - | hp |")]
    assert f"| {difference} |" in claim_row
    if metric == TIME_TO_TARGET:  # whole seconds: GRPO's mean 110.5 x -17.4% = -19.2
        assert "| -19 (-17.4%) |" in claim_row and "." not in difference.split(" [")[0]


def test_times_print_in_whole_seconds_in_every_table_and_verdict():
    grpo = [run("grpo", s, t) for s, t in enumerate([100.0, 180.5, 110.75])]
    other = [run("m", s, t) for s, t in enumerate([150.5, 120.25, 260.0])]  # noisy: no verdict either way
    line = table_row(grpo + other, "m")
    assert "| no difference > " in line and line.endswith(" s |")
    numbers = line.split(" | ")[3:]  # difference [interval], p, MDD, verdict
    assert [n for n in " ".join(numbers[:1] + numbers[2:]).replace(",", " ").split() if "." in n] == []
    column = rep.to_target_column(["method"], grpo + other)
    assert column[0].startswith("130 [") and "." not in column[0]  # mean of 100, 180.5, 110.75: 130.4


def steps_run(method: str, seed: int, reached: int | None, cap: int = 24) -> dict:
    """A results.csv row with RL steps to the target ("" if never) and at the last validation."""
    return {
        "method": method,
        "seed": str(seed),
        START: "0.1",
        STEPS_TO_TARGET: "" if reached is None else str(reached),
        STEPS_CAP: str(cap),
    }


@pytest.mark.parametrize(("steps", "said"), [([3, 6, 3], "faster"), ([21, 21, 18], "slower")])
def test_steps_to_the_target_read_as_faster_or_slower_in_steps(steps, said):
    grpo = [steps_run("grpo", s, n) for s, n in enumerate([12, 15, 9])]
    other = [steps_run("m", s, n) for s, n in enumerate(steps)]
    settings = ReportSettings(baseline={"method": "grpo"}, compare=[STEPS_TO_TARGET])
    (line,) = [
        x for x in comparison_table(["method"], grpo + other, settings).splitlines() if x.startswith("| m |")
    ]
    assert line.endswith(f"| {said} |")
    difference = line.split(" | ")[3]
    mean = sum(steps) / 3 - 12
    assert difference.startswith(f"{mean:+.1f} [")  # steps, not seconds: a tenth of a step


def test_a_run_that_never_reaches_the_target_counts_all_its_steps():
    cell = {r["seed"]: r for r in [steps_run("x", 0, None, cap=24), steps_run("x", 1, 6)]}
    base = {r["seed"]: r for r in [steps_run("b", 0, 9), steps_run("b", 1, None, cap=24)]}
    assert to_target(cell, base, STEPS_TO_TARGET) == ({"0": 24.0, "1": 6.0}, {"0": 9.0, "1": 24.0}, 2)
    # the seconds of the same rows are not there: nothing to pair
    assert to_target(cell, base) == ({}, {}, 0)
