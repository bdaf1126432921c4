"""``lightning-rlvr-sweep --plan``: the seeds each claim needs at the report's power, their cost from the
pilot's runs, "not testable within budget" past the sweep's budget, what each verdict rests on (pooled or
paired, rate-matched or not), and every bad input as one line with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_rlvr.experiments.pooled import fit_pool
from lightning_rlvr.experiments.stats import paired_comparison, seeds_needed
from lightning_rlvr.experiments.sweep import run as sw
from lightning_rlvr.experiments.sweep.claims import claims_section
from lightning_rlvr.experiments.sweep.comparison import compare_to_baseline
from lightning_rlvr.experiments.sweep.plan import Evidence
from lightning_rlvr.experiments.sweep.rows import read_results_csv
from lightning_rlvr.experiments.sweep.spec import load_sweep
from lightning_rlvr.experiments.verdicts import BETTER, NOT_TESTABLE, decide

TESTS = {  # test pass@1 by seed 1-3; x is +1 point on average, y about grpo, dead collapsed
    "grpo": [0.50, 0.56, 0.47],
    "x": [0.52, 0.55, 0.49],
    "y": [0.49, 0.57, 0.46],
    "dead": [0.0, 0.0, 0.0],
}
COST = {"grpo": (3000.0, 600.0), "x": (6000.0, 600.0), "y": (3000.0, 600.0), "dead": (1000.0, 100.0)}
CLAIM = "{cell: x, metric: test/pass@1, effect: 0.03, source: 'paper: +3 points'}"


def setup(
    tmp_path: Path, budget: object = 40, claims: str = CLAIM, columns: str = "test/pass@1,fit_s,test_s"
):
    """A sweep file over grpo, x, y and dead, and a pilot results.csv with ``columns`` of the runs."""
    for m in TESTS:
        (tmp_path / f"{m}.yaml").write_text("model: {lr: 4.0e-4}\n" if m == "y" else "model: {}\n")
    report = f"report:\n  claims: [{claims}]\n" + ("" if budget is None else f"  budget_hours: {budget}\n")
    (tmp_path / "s.yaml").write_text(
        "out: out\nreport_dir: report\ngrid:\n  'config:method': [grpo.yaml, x.yaml, y.yaml, dead.yaml]\n"
        "  seed_everything: [1, 2, 3]\n" + report
    )
    lines = [f"run_id,method,seed,{columns}"]
    for m, values in TESTS.items():
        for seed, value in zip((1, 2, 3), values):
            numbers = {"test/pass@1": value, "fit_s": COST[m][0], "test_s": COST[m][1]}
            row = [f"{m}__seed={seed}", m, str(seed)] + [str(numbers[c]) for c in columns.split(",") if c]
            lines.append(",".join(row))
            spec = tmp_path / "pilot" / "runs" / f"{m}__seed={seed}" / "spec.json"
            spec.parent.mkdir(parents=True, exist_ok=True)
            overrides = [["model.lr", 0.0002 if m == "x" else 0.0004]] if m != "y" else []
            spec.write_text(json.dumps({"configs": [f"{m}.yaml"], "overrides": overrides}))
    (tmp_path / "pilot" / "results.csv").write_text("\n".join(lines) + "\n")


def plan(tmp_path, monkeypatch, capsys, *extra: str) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp_path)
    rc = sw.main(["s.yaml", "--plan", "--pilot", "pilot/results.csv", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def rows_of(text: str) -> dict[str, list[str]]:
    """The claims' and comparisons' table rows by "first cell/second cell" (the pooled section after them
    is the report's, tested in test_pooled.py and test_sweep_claims.py)."""
    text = text.split("## Pooled analysis")[0]
    return {
        line.split(" | ")[0].strip("| ") + "/" + line.split(" | ")[1]: [
            c.strip("| ") for c in line.split(" | ")
        ]
        for line in text.splitlines()
        if line.startswith("| ") and " | " in line
    }


def pooled_x() -> tuple:
    """The claim's comparison as the plan should make it: the pool of grpo, x and y (dead left out)."""
    values = {(m,): {str(s): v for s, v in zip((1, 2, 3), TESTS[m])} for m in ("grpo", "x", "y", "dead")}
    pool = fit_pool(values, ("grpo",))
    assert pool.justified and pool.df == 4 and ("dead",) in pool.excluded
    return pool.comparisons[("x",)], pool


def test_the_plan_prices_the_seeds_a_claim_needs_and_says_not_testable_past_the_budget(
    tmp_path, monkeypatch, capsys
):
    c, _ = pooled_x()
    assert c.low < 0 < 0.03 < c.high  # the pilot cannot tell: undecided at any budget that allows it
    n = seeds_needed(0.03, c.sd, 0.8, 0.05, arms=3)
    seed_cost = (6000 + 600) + (3000 + 600)  # one run of x and one of grpo
    hours = n * seed_cost / 3600
    setup(tmp_path, budget=round(hours + 5))
    rc, out, err = plan(tmp_path, monkeypatch, capsys)
    assert rc == 0 and err == "" and "| - | test/pass@1 | 3 | 3 | 4 |" in out  # the pool: 3 arms, df 4
    row = rows_of(out)["paper: +3 points/x"]
    assert row[8:11] == [
        f"undecided ({n} seeds needed)",
        "3 seeds, pooled over 3 arms (df 4), rates differ: 0.0002 vs 0.0004",
        f"{n} ({hours:.1f} h)",
    ]
    setup(tmp_path, budget=round(hours / 2, 1))
    rc, out, _ = plan(tmp_path, monkeypatch, capsys)
    said = rows_of(out)["paper: +3 points/x"][8]
    assert (
        rc == 0 and said == f"{NOT_TESTABLE} ({n} seeds needed, {hours:.1f} h > {round(hours / 2, 1):.1f} h)"
    )


def test_every_comparison_names_its_basis_and_the_observed_differences_seeds(tmp_path, monkeypatch, capsys):
    setup(tmp_path)
    rc, out, _ = plan(tmp_path, monkeypatch, capsys)
    rows = rows_of(out)
    c, _ = pooled_x()
    n = seeds_needed(c.diff, c.sd, 0.8, 0.05, arms=3)
    assert rows["x/test/pass@1"][5].startswith("no difference > ")
    hours = n * 10200 / 3600  # one run of x and one of grpo: 6,600 + 3,600 s
    assert rows["x/test/pass@1"][7] == f"{n} ({hours:.1f} h); {'over' if hours > 40 else 'within'} budget"
    assert rows["y/test/pass@1"][6] == "3 seeds, pooled over 3 arms (df 4), rate-matched"  # lr from y.yaml
    # the collapsed arm is compared paired (it is outside the pool), and is plainly worse
    dead = paired_comparison(dict(zip("123", TESTS["dead"])), dict(zip("123", TESTS["grpo"])))
    assert rows["dead/test/pass@1"][5] == "worse" and rows["dead/test/pass@1"][6].startswith(
        "3 seeds, paired (df 2)"
    )
    assert decide(dead, "test/pass@1").verdict == "worse"


def test_a_finished_sweeps_own_results_plan_without_pilot(tmp_path, monkeypatch, capsys):
    setup(tmp_path)
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "results.csv").write_text((tmp_path / "pilot" / "results.csv").read_text())
    monkeypatch.chdir(tmp_path)
    assert sw.main(["s.yaml", "--plan"]) == 0
    assert "# Plan for sweep `s` from `report/results.csv` (12 runs)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "budget, says",
    [
        ("forty", "report.budget_hours must be a number, got 'forty'"),
        ("true", "report.budget_hours must be a number, got True"),
        ("-3", "report.budget_hours must be a positive number of hours, got -3"),
        ("0", "report.budget_hours must be a positive number of hours, got 0"),
        (".inf", "report.budget_hours must be a positive number of hours, got inf"),
        ("[40]", "report.budget_hours must be a number, got [40]"),
    ],
)
def test_a_budget_that_is_not_a_positive_number_is_one_line(tmp_path, monkeypatch, capsys, budget, says):
    setup(tmp_path, budget=budget)
    rc, out, err = plan(tmp_path, monkeypatch, capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and says in err and "s.yaml" in err


@pytest.mark.parametrize(
    "columns, claims, says",
    [
        (
            "fit_s,test_s",
            CLAIM,
            "has no value of 'test/pass@1' (report.compare): run the pilot with that metric",
        ),
        ("test/pass@1,test_s", CLAIM, "has no fit_s column to cost a run with"),
        (
            "test/pass@1,fit_s,test_s",
            "{cell: dead, metric: test/pass@1, direction: higher}",
            "claims[0] is on dead, which collapsed on test/pass@1 (every run at 0)",
        ),
    ],
)
def test_a_pilot_that_cannot_plan_is_one_line(tmp_path, monkeypatch, capsys, columns, claims, says):
    setup(tmp_path, claims=claims, columns=columns)
    rc, out, err = plan(tmp_path, monkeypatch, capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and says in err and "pilot/results.csv" in err


def test_an_empty_metric_column_a_missing_pilot_and_pilot_without_plan_are_one_line(
    tmp_path, monkeypatch, capsys
):
    setup(tmp_path)
    csv = tmp_path / "pilot" / "results.csv"
    lines = csv.read_text().splitlines()
    csv.write_text(
        "\n".join([lines[0]] + [",".join(r.split(",")[:3] + ["", "1", "1"]) for r in lines[1:]]) + "\n"
    )
    rc, _, err = plan(tmp_path, monkeypatch, capsys)
    assert rc == 2 and err.count("\n") == 1 and "has no value of 'test/pass@1'" in err
    csv.unlink()
    rc, _, err = plan(tmp_path, monkeypatch, capsys)
    assert rc == 2 and err.count("\n") == 1 and "not found" in err
    assert sw.main(["s.yaml", "--pilot", "pilot/results.csv"]) == 2
    assert (
        capsys.readouterr().err == "lightning-rlvr-sweep: error: --pilot is read by --plan only: add --plan\n"
    )


def test_the_vocabulary_has_one_home():
    c = paired_comparison({"1": 0.6, "2": 0.62, "3": 0.61}, {"1": 0.5, "2": 0.51, "3": 0.5})
    assert decide(c, "test/pass@1").verdict == BETTER
    assert decide(c, "steps_to_target").verdict == "slower"  # lower is better for a duration
    assert decide(c, "test/pass@1", effect=-0.05, direction=-1).verdict == "better, against the claim"


def test_the_report_says_a_claim_on_a_collapsed_arm_rests_on_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path, claims="{cell: dead, metric: test/pass@1, direction: higher}")
    axes, rows = read_results_csv(tmp_path / "pilot" / "results.csv")
    sweep = load_sweep(tmp_path / "s.yaml")
    entries = compare_to_baseline(axes, rows, sweep.report)
    evidence = Evidence(axes, rows, sweep.report)
    text = claims_section(sweep.report.claims, entries, 0.95, 0.8, evidence)
    assert "| undecided (the cell collapsed on test/pass@1 (every run at 0)) |" in text
