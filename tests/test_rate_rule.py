"""The tuning rule: a rate is chosen only when bracketed (else the report names the value to run next),
ties within a stated tolerance go by the declared rule, and the report flags comparisons whose rates
differ, reading each run's model.lr from its spec.json."""

from __future__ import annotations

import json

import pytest

from lightning_rlvr.experiments.sweep import choice
from lightning_rlvr.experiments.sweep.checks import SweepError
from lightning_rlvr.experiments.sweep.claims import claim_rows, parse_claims
from lightning_rlvr.experiments.sweep.comparison import compare_to_baseline
from lightning_rlvr.experiments.sweep.plan import Evidence, lr_of_spec, rates_section, read_rates
from lightning_rlvr.experiments.sweep.spec import ReportSettings, load_sweep
from tests.sweep_rows import read_rows

GRID = "run_id,method,model.lr,seed,val/pass@1_final\n"


def chosen(text: str, tmp_path, tie: str = "lower", tolerance: float = 0.0) -> list[dict]:
    axes, rows = read_rows(GRID + text, tmp_path)
    return choice.choose_values(axes, rows, "model.lr", "val/pass@1_final", tie, tolerance)


def test_an_interior_best_is_chosen_and_an_edge_best_names_the_next_value_on_a_ratio_grid(tmp_path):
    got = chosen(
        "a,m,1e-4,0,0.30\nb,m,2e-4,0,0.45\nc,m,4e-4,0,0.40\n"  # interior: chosen
        "d,n,1e-4,0,0.30\ne,n,2e-4,0,0.35\nf,n,4e-4,0,0.40\n"  # rising to the top: run 8e-4
        "g,o,1e-4,0,0.50\nh,o,2e-4,0,0.35\n",  # falling from the bottom: run 5e-5
        tmp_path,
    )
    assert [(c["chosen"], c["extend"]) for c in got] == [("2e-4", []), (None, ["0.0008"]), (None, ["5e-05"])]
    assert [c["best"] for c in got] == ["2e-4", "4e-4", "1e-4"]


def test_a_tie_with_an_edge_value_is_not_bracketed(tmp_path):
    # SC-GRPO's case: 2e-4 and 4e-4 tie, 4e-4 is the largest tried, so 8e-4 must run before choosing
    got = chosen("a,m,1e-4,0,0.367\nb,m,2e-4,0,0.422\nc,m,4e-4,0,0.422\n", tmp_path)[0]
    assert got["tied"] == ["2e-4", "4e-4"] and got["best"] == "2e-4" and got["bracketed"]
    assert got["chosen"] is None and got["extend"] == ["0.0008"]


@pytest.mark.parametrize(
    "tie, tolerance, best",
    [
        ("lower", 0.0, "3e-4"),  # no tie at 0: the best alone
        ("lower", 0.011, "2e-4"),  # 2e-4 is within 1.1 points of the best: the lower wins
        ("higher", 0.011, "4e-4"),  # ... and 4e-4 too: the higher wins
        ("first", 0.011, "3e-4"),  # the first of the tied in grid order (3e-4 listed first)
    ],
)
def test_ties_within_the_tolerance_go_by_the_declared_rule(tmp_path, tie, tolerance, best):
    text = "z,m,1e-4,0,0.10\na,m,3e-4,0,0.44\nb,m,2e-4,0,0.43\nc,m,4e-4,0,0.435\nd,m,8e-4,0,0.20\n"
    got = chosen(text, tmp_path, tie, tolerance)[0]
    assert got["best"] == best == got["chosen"]


def test_the_choice_text_states_its_rule_and_pastes_only_bracketed_choices(tmp_path):
    axes, rows = read_rows(
        GRID + "a,m,1e-4,0,0.3\nb,m,2e-4,0,0.4\nc,m,4e-4,0,0.35\nd,n,1e-4,0,0.3\n", tmp_path
    )
    text = choice.choice_text(axes, rows, "model.lr", "val/pass@1_final", "higher", 0.02)
    assert "values within 0.02 of the best tie, and the tie goes to the higher value" in text
    assert "| n | none: extend the grid to a value below 1e-4 and a value above 1e-4 | 0.300 |" in text
    assert "m: {model.lr: 0.0002}" in text and "n: {" not in text


@pytest.mark.parametrize(
    "report, says",
    [
        ("tie: lowest", "report.tie must be one of ['lower', 'higher', 'first'], got 'lowest'"),
        ("tie_tolerance: -0.01", "report.tie_tolerance must be a number >= 0, got -0.01"),
        ("tie_tolerance: a point", "report.tie_tolerance must be a number, got 'a point'"),
        ("collapse_floor: low", "report.collapse_floor must be a number, got 'low'"),
    ],
)
def test_a_bad_rule_is_one_sweep_error(tmp_path, report, says):
    (tmp_path / "s.yaml").write_text(
        f"grid:\n  model.lr: [1, 2]\n  seed_everything: [0]\nreport:\n  {report}\n"
    )
    with pytest.raises(SweepError) as err:
        load_sweep(tmp_path / "s.yaml")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_rates_come_from_overrides_over_config_files_and_unmatched_ones_are_flagged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.yaml").write_text("model:\n  lr: 2.0e-4\n")
    text = "run_id,method,seed,test/pass@1\n"
    for m, lr in (("grpo", 4e-4), ("same", 4e-4), ("own", None)):
        for seed in (1, 2):
            run = f"{m}__seed={seed}"
            text += f"{run},{m},{seed},0.{seed}{len(m)}\n"
            (tmp_path / "runs" / run).mkdir(parents=True)
            overrides = [["seed_everything", seed]] + ([["model.lr", lr]] if lr else [])
            (tmp_path / "runs" / run / "spec.json").write_text(
                json.dumps({"configs": ["base.yaml"], "overrides": overrides})
            )
    assert lr_of_spec(tmp_path / "runs" / "own__seed=1" / "spec.json") == "0.0002"  # base.yaml's
    assert lr_of_spec(tmp_path / "runs" / "nothing" / "spec.json") is None
    axes, rows = read_rows(text, tmp_path)
    rates = read_rates(rows, [tmp_path / "runs"])
    assert rates == {r["run_id"]: "0.0004" if not r["run_id"].startswith("own") else "0.0002" for r in rows}
    settings = ReportSettings(baseline={"method": "grpo"})
    entries = compare_to_baseline(axes, rows, settings)
    evidence = Evidence(axes, rows, settings, rates)
    section = rates_section(entries, evidence)
    assert "- own: model.lr 0.0002 against the baseline's 0.0004" in section and "- same" not in section
    assert "(df 1), rate-matched" in evidence.basis(entries[0])
    assert "(df 1), rates differ: 0.0002 vs 0.0004" in evidence.basis(entries[1])
    # a run without a spec says nothing about rates, so its comparison makes no rate statement
    del rates["same__seed=2"]
    assert "rate" not in Evidence(axes, rows, settings, rates).basis(entries[0])


def _tuned_world(tmp_path, sc_scores: str) -> tuple:
    """A tuning sweep (grpo best at 2e-4; sc by ``sc_scores`` over 1e-4..8e-4) and a study whose
    ``sc_own`` arm is sc.yaml at 4e-4 against grpo at 2e-4; returns (study sweep, axes, rows)."""
    (tmp_path / "base.yaml").write_text("trainer:\n  max_steps: 2\n")
    for name in ("grpo", "sc"):
        (tmp_path / f"{name}.yaml").write_text(f"# {name}\n")
    grid = "grid:\n  config:method: [grpo.yaml, sc.yaml]\n  model.lr: [1.0e-4, 2.0e-4, 4.0e-4, 8.0e-4]\n"
    (tmp_path / "tune.yaml").write_text(
        f"name: tune\nreport_dir: tune_results\nconfigs: [base.yaml]\n{grid}  seed_everything: [0]\n"
        "report:\n  choose: model.lr\n  compare: [val/pass@1_final]\n"
    )
    text = "run_id,method,model.lr,seed,val/pass@1_final\n"
    for method, scores in (("grpo", "0.30 0.45 0.40 0.20"), ("sc", sc_scores)):
        for lr, score in zip(("1e-4", "2e-4", "4e-4", "8e-4"), scores.split()):
            text += f"{method}__lr={lr}__seed=0,{method},{lr},0,{score}\n"
    (tmp_path / "tune_results").mkdir(exist_ok=True)
    (tmp_path / "tune_results" / "results.csv").write_text(text)
    (tmp_path / "study.yaml").write_text(
        "name: study\nconfigs: [base.yaml]\noverrides:\n  model.lr: 2.0e-4\n"
        "grid:\n  config:method: [grpo.yaml, sc.yaml, {sc_own: sc.yaml}]\n  seed_everything: [1, 2]\n"
        "axis_overrides:\n  method:\n    sc_own: {model.lr: 4.0e-4}\n"
        "report:\n  baseline: grpo\n  claims:\n"
        "    - {cell: sc_own, metric: test/pass@1, effect: 0.05, tuned_in: tune.yaml}\n"
    )
    axes, rows = read_rows(
        "run_id,method,seed,test/pass@1\n"
        + "".join(f"{m}__seed={s},{m},{s},0.{s}{len(m)}\n" for m in ("grpo", "sc_own") for s in (1, 2)),
        tmp_path,
    )
    return load_sweep(tmp_path / "study.yaml"), axes, rows


@pytest.mark.parametrize(
    "sc_scores, own_rate, says",
    [
        # sc.yaml's bracketed choice is 4e-4, the rate sc_own ran at: the two arms' own tuned rates
        (
            "0.20 0.30 0.50 0.40",
            "0.0004",
            "(df 1), each at its own tuned rate: 0.0004 vs 0.0002, chosen and bracketed in tune",
        ),
        # the same choice, but sc_own ran at 8e-4: not the tuned rate
        (
            "0.20 0.30 0.50 0.40",
            "0.0008",
            "rates differ: 0.0008 vs 0.0002 (tune chose 0.0004 for sc_own, not 0.0008)",
        ),
        # sc.yaml's best is the largest rate tried: not bracketed, so nothing was chosen
        ("0.20 0.30 0.40 0.50", "0.0004", "rates differ: 0.0004 vs 0.0002 (tune chose no rate for sc_own)"),
    ],
)
def test_unmatched_rates_count_as_tuned_only_where_the_tuning_sweep_chose_both(
    tmp_path, monkeypatch, sc_scores, own_rate, says
):
    monkeypatch.chdir(tmp_path)
    study, axes, rows = _tuned_world(tmp_path, sc_scores)
    rates = {r["run_id"]: own_rate if r["method"] == "sc_own" else "0.0002" for r in rows}
    entry = compare_to_baseline(axes, rows, study.report)[0]
    assert entry["cell"] == {"method": "sc_own"}
    evidence = Evidence(axes, rows, study.report, rates, sweep=study)
    assert says in evidence.basis(entry, study.report.claims[0].tuned_in)
    assert "rates differ: " + own_rate in evidence.basis(entry)  # without tuned_in: unmatched, as before
    # the claim table's basis is the same words
    row = claim_rows(study.report.claims[0], [entry], 0.95, 0.8, evidence)[0]
    assert says in row[9]


def test_a_tuned_in_that_tunes_no_rate_or_is_not_a_sweep_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study, axes, rows = _tuned_world(tmp_path, "0.20 0.30 0.50 0.40")
    rates = {r["run_id"]: "0.0004" if r["method"] == "sc_own" else "0.0002" for r in rows}
    entry = compare_to_baseline(axes, rows, study.report)[0]
    said = Evidence(axes, rows, study.report, rates, sweep=study).basis(entry, "study.yaml")
    assert "rates differ: 0.0004 vs 0.0002 (tuned rates unknown: study.yaml: report.choose is None" in said
    assert "no sweep file given" in Evidence(axes, rows, study.report, rates).basis(entry, "tune.yaml")
    (tmp_path / "tune_results" / "results.csv").unlink()
    said = Evidence(axes, rows, study.report, rates, sweep=study).basis(entry, "tune.yaml")
    assert "results.csv: not found" in said and "rates differ" in said
    with pytest.raises(ValueError, match=r"claims\[0\]: tuned_in must be the path of a tuning sweep file"):
        parse_claims(
            [{"cell": "a", "metric": "m", "direction": "higher", "tuned_in": 3}], {"x": ["a"]}, ["m"]
        )


def test_the_rates_section_names_the_tuning_behind_an_unmatched_pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study, axes, rows = _tuned_world(tmp_path, "0.20 0.30 0.50 0.40")
    rates = {r["run_id"]: "0.0004" if r["method"] == "sc_own" else "0.0002" for r in rows}
    entries = compare_to_baseline(axes, rows, study.report)
    section = rates_section(entries, Evidence(axes, rows, study.report, rates, sweep=study))
    assert "- sc_own: model.lr 0.0004 against the baseline's 0.0002 (each at its own tuned rate" in section
    rates = {r: "0.0008" if r.startswith("sc_own") else lr for r, lr in rates.items()}
    section = rates_section(entries, Evidence(axes, rows, study.report, rates, sweep=study))
    assert "0.0008 against the baseline's 0.0002 (tune chose 0.0004 for sc_own, not 0.0008)" in section
