"""Paper claims in a sweep report: the verdict rules on hand-made differences, the seeds that would
decide (against published sample sizes), every malformed ``report.claims`` entry as one clear error,
and the section in a written report."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from lightning_rlvr.experiments.pooled import fit_pool
from lightning_rlvr.experiments.stats import paired_comparison, seeds_needed, t_power
from lightning_rlvr.experiments.sweep import report as rep
from lightning_rlvr.experiments.sweep.checks import SweepError
from lightning_rlvr.experiments.sweep.claims import (
    Claim,
    all_claim_rows,
    claim_rows,
    claims_section,
    holm,
    judge,
    parse_claims,
)
from lightning_rlvr.experiments.sweep.spec import expand, load_sweep
from tests.test_sweep_report import fake_finished_run

ALPHA, POWER = 0.05, 0.8


# One-sample / paired t-test, two-sided alpha 0.05, power 0.8: the sample size for a standardised effect
# d = effect / sd, as printed in Cohen (1988) and computed by G*Power: d = 1 -> 10, 0.8 -> 15, 0.5 -> 34.
@pytest.mark.parametrize("d, n", [(1.0, 10), (0.8, 15), (0.5, 34)])
def test_seeds_needed_matches_published_paired_t_sample_sizes(d, n):
    for sd in (0.01, 1.0, 30.0):  # only effect / sd matters, in points or in seconds
        assert seeds_needed(d * sd, sd, POWER, ALPHA) == n
        assert seeds_needed(-d * sd, sd, POWER, ALPHA) == n  # a decrease needs as many as an increase
    assert t_power(d, 1.0, n) >= POWER > t_power(d, 1.0, n - 1)  # the fewest, not just enough


@pytest.mark.parametrize(
    "effect, sd", [(0.0, 1.0), (1.0, 0.0), (1.0, math.nan), (math.nan, 1.0), (1.0, math.inf)]
)
def test_seeds_needed_is_none_where_undefined(effect, sd):
    assert seeds_needed(effect, sd) is None


def test_seeds_needed_is_none_past_the_cap_and_two_at_least():
    assert seeds_needed(0.001, 1.0, most=100) is None  # d = 0.001 needs millions
    assert seeds_needed(100.0, 1.0) == 2  # a huge effect still needs two pairs for a t-test


def _c(diffs: list[float]):
    """A paired comparison whose differences are ``diffs`` (the baseline at 0.5 on every seed)."""
    return paired_comparison({s: 0.5 + d for s, d in enumerate(diffs)}, dict.fromkeys(range(len(diffs)), 0.5))


UP = Claim({"method": "x"}, "test/pass@1", direction=1, effect=0.05)


def test_reproduced_when_the_interval_excludes_zero_on_the_claimed_side():
    # diffs 0.05, 0.06, 0.07: mean 0.06, interval 0.06 +- 4.303 * 0.01 / sqrt 3 = [0.035, 0.085]
    assert judge(UP, _c([0.05, 0.06, 0.07]), 0.5, POWER, ALPHA) == ("better, as claimed", 0.05)
    # diffs 0.010, 0.011, 0.012: [0.0085, 0.0135], wholly below the claimed 0.05
    assert judge(UP, _c([0.010, 0.011, 0.012]), 0.5, POWER, ALPHA)[0] == "better, smaller than claimed"


def test_opposite_when_the_interval_excludes_zero_on_the_other_side():
    assert judge(UP, _c([-0.05, -0.06, -0.07]), 0.5, POWER, ALPHA)[0] == "worse, against the claim"


def test_not_reproduced_when_the_interval_excludes_the_claim_but_not_zero():
    # diffs -0.01, 0, 0.01: interval +- 0.0248, below the claimed +0.05 and around 0
    assert judge(UP, _c([-0.01, 0.0, 0.01]), 0.5, POWER, ALPHA)[0] == "not reproduced"


def test_undecided_names_the_seeds_the_measured_spread_would_need():
    diffs = [-0.05, 0.0, 0.08]  # interval [-0.14, 0.17] holds both 0 and the claimed 0.05
    c = _c(diffs)
    sd = math.sqrt(sum((d - 0.01) ** 2 for d in diffs) / 2)
    n = seeds_needed(0.05, sd, POWER, ALPHA)
    assert c.sd == pytest.approx(sd) and n is not None and n > 3
    assert judge(UP, c, 0.5, POWER, ALPHA)[0] == f"undecided ({n} seeds needed)"
    # with no size claimed, the seeds to detect the difference seen
    bare = Claim({"method": "x"}, "test/pass@1", direction=1)
    said, effect = judge(bare, c, 0.5, POWER, ALPHA)
    assert effect is None and said == (f"undecided ({seeds_needed(0.01, sd, POWER, ALPHA)} seeds needed)")


def test_a_relative_claim_scales_by_the_baselines_mean_and_a_lower_claim_mirrors():
    rel = Claim({"method": "x"}, "test/pass@1", direction=1, effect=0.081, relative=True)
    assert judge(rel, _c([0.05, 0.06, 0.07]), 0.5, POWER, ALPHA) == (
        "better, as claimed",
        pytest.approx(0.0405),
    )
    # "1.21x faster": time to target 1 / 1.21 - 1 of the baseline's 1000 s, i.e. -174 s
    faster = Claim({"method": "x"}, "time_to_target_s", direction=-1, effect=1 / 1.21 - 1, relative=True)
    said, effect = judge(faster, _c([-300.0, -250.0, -280.0]), 1000.0, POWER, ALPHA)
    assert said == "faster, as claimed" and effect == pytest.approx(-173.55, abs=0.01)
    assert judge(faster, _c([-10.0, 0.0, 10.0]), 1000.0, POWER, ALPHA)[0] == "not reproduced"
    assert judge(faster, _c([300.0, 250.0, 280.0]), 1000.0, POWER, ALPHA)[0] == "slower, against the claim"


def test_too_few_seeds_or_no_spread_is_undecided_not_a_verdict():
    assert judge(UP, _c([0.2]), 0.5, POWER, ALPHA)[0] == "undecided (1 paired seed)"
    assert judge(UP, _c([]), 0.5, POWER, ALPHA)[0] == "undecided (0 paired seeds)"
    said = judge(UP, _c([0.06, 0.06, 0.06]), 0.5, POWER, ALPHA)[0]
    assert said == "undecided (every seed differs by exactly this: no spread to test)"


AXES = {"method": ["grpo", "x", "y"]}
COMPARE = ["test/pass@1", "time_to_target_s"]


def test_claims_parse_a_first_axis_value_or_a_cell():
    got = parse_claims(
        [
            {"cell": "x", "metric": "test/pass@1", "effect": 0.016, "source": "paper A"},
            {"cell": {"method": "y"}, "metric": "time_to_target_s", "effect": -0.17, "relative": True},
            {"cell": "y", "metric": "test/pass@1", "direction": "higher"},
        ],
        AXES,
        COMPARE,
    )
    assert got == [
        Claim({"method": "x"}, "test/pass@1", 1, 0.016, False, "paper A"),
        Claim({"method": "y"}, "time_to_target_s", -1, -0.17, True, ""),
        Claim({"method": "y"}, "test/pass@1", 1, None, False, ""),
    ]


@pytest.mark.parametrize(
    "raw, says",
    [
        ({"cell": "x"}, "claims must be a list"),
        ([{"cell": "x"}], r"claims\[0\]: needs at least cell and metric"),
        (["x"], r"claims\[0\]: needs at least cell and metric"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": 0.1, "size": 2}], "unknown keys \\['size'\\]"),
        ([{"cell": "z", "metric": "test/pass@1", "effect": 0.1}], "method = 'z' is not a grid cell"),
        ([{"cell": {"task": "x"}, "metric": "test/pass@1", "effect": 0.1}], "task = 'x' is not a grid cell"),
        ([{"cell": "x", "metric": "val/pass@1", "effect": 0.1}], "not in report.compare .*: add it"),
        ([{"cell": "x", "metric": "test/pass@1"}], "give effect .* or direction"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": 0}], "effect must be a non-zero number"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": True}], "effect must be a non-zero number"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": ".1"}], "effect must be a non-zero number"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": math.nan}], "effect must be a non-zero number"),
        ([{"cell": "x", "metric": "test/pass@1", "direction": "up"}], "direction must be higher or lower"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": -0.1, "direction": "higher"}], "disagree"),
        ([{"cell": "x", "metric": "test/pass@1", "direction": "lower", "relative": True}], "needs an effect"),
        ([{"cell": "x", "metric": "test/pass@1", "effect": 0.1, "relative": "yes"}], "relative must be"),
    ],
)
def test_every_malformed_claim_is_one_clear_error(raw, says, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=says):
        parse_claims(raw, AXES, COMPARE)
    monkeypatch.chdir(tmp_path)  # in a sweep file: a SweepError of one line naming the file
    for m in AXES["method"]:
        (tmp_path / f"{m}.yaml").write_text("model: {}\n")
    grid = {"config:method": [f"{m}.yaml" for m in AXES["method"]], "seed_everything": [0]}
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({"grid": grid, "report": {"compare": COMPARE, "claims": raw}})
    )
    with pytest.raises(SweepError) as err:
        load_sweep("s.yaml")
    message = str(err.value)
    assert message.startswith("s.yaml: report.claims") and "\n" not in message and re.search(says, message)


def test_a_malformed_claim_in_a_sweep_file_is_a_sweep_error_naming_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "grid:\n  seed_everything: [0]\n  model.lr: [1, 2]\n"
        "report:\n  claims: [{cell: 3, metric: test/pass@1, effect: 0.1}]\n"
    )
    with pytest.raises(SweepError, match=r"s.yaml: report.claims\[0\]: model.lr = '3' is not a grid cell"):
        load_sweep(path)


def test_a_claim_without_runs_yet_reads_undecided():
    text = claims_section([UP], [], 0.95, 0.8)
    assert (
        "| - | x | test/pass@1 | - | 0 | - | - | - | undecided (no run of this cell and its baseline yet) "
        "| - | - |" in text
    )


def test_the_report_judges_each_claim_from_the_paired_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for m in ("grpo", "up", "flat"):
        (tmp_path / f"{m}.yaml").write_text("model: {}\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "out: out\nreport_dir: report\ngrid:\n  'config:method': [grpo.yaml, up.yaml, flat.yaml]\n"
        "  seed_everything: [0, 1, 2]\nreport:\n  claims:\n"
        "    - {cell: up, metric: test/pass@1, effect: 0.02, source: 'paper: +2 points'}\n"
        "    - {cell: flat, metric: test/pass@1, effect: 0.5, relative: true, source: 'paper: +50%'}\n"
    )
    sweep = load_sweep(path)
    runs = expand(sweep)  # grpo s0-2, up s0-2, flat s0-2
    tests = [0.40, 0.50, 0.60, 0.45, 0.56, 0.64, 0.41, 0.49, 0.61]  # up: +5, +6, +4; flat: +1, -1, +1
    for run, test in zip(runs, tests):
        fake_finished_run(sweep.out, run, rewards=[0.1, 0.2], val=[0.2, 0.3], test=test)
    rep.write_report(sweep, runs)
    md = (tmp_path / "report" / "results.md").read_text()
    assert "## Paper claims" in md and "| - | test/pass@1 | 3 | 3 | 4 |" in md  # the pool: 3 arms, df 4
    rows = {line.split(" | ")[1]: line for line in md.splitlines() if line.startswith("| paper")}
    # three arms scattering alike: the verdicts rest on the pool (seed + method), df (3 - 1)(3 - 1) = 4
    values = {(m,): dict(zip("012", tests[3 * i : 3 * i + 3])) for i, m in enumerate(("grpo", "up", "flat"))}
    pool = fit_pool(values, ("grpo",))
    assert pool.justified and pool.df == 4
    up, flat = pool.comparisons[("up",)], pool.comparisons[("flat",)]
    assert rows["up"].startswith(
        "| paper: +2 points | up | test/pass@1 | +2.0 | 3 | "
        f"+5.0 [{up.low * 100:+.1f}, {up.high * 100:+.1f}] | {up.p_value:.3f} | {up.mdd * 100:.1f} | "
        "better, as claimed | 3 seeds, pooled over 3 arms (df 4) | "
    )
    # +50% of grpo's 0.50 is +25 points, far above flat's interval
    assert rows["flat"].startswith("| paper: +50% | flat | test/pass@1 | +25.0 (+50.0%) | 3 | +0.3 [")
    assert f"| {flat.mdd * 100:.1f} | not reproduced | 3 seeds, pooled over 3 arms (df 4) |" in rows["flat"]


@pytest.mark.parametrize(
    "ps, adjusted",
    [
        ([0.01, 0.04, 0.03], [0.03, 0.06, 0.06]),  # 3 x 0.01; 2 x 0.03; 1 x 0.04 raised to the 0.06 before it
        ([0.5, 0.01], [0.5, 0.02]),
        ([0.6, 0.7], [1.0, 1.0]),  # capped at 1, and never below the step before
        ([0.02], [0.02]),
    ],
)
def test_holm_adjusts_step_down(ps, adjusted):
    assert holm(ps) == pytest.approx(adjusted)


def _entry(cell: str, diffs: list[float]) -> dict:
    return {"cell": {"method": cell}, "metric": "test/pass@1", "comparison": _c(diffs), "unpaired": []} | {
        "baseline_mean": 0.5
    }


def test_a_verdict_that_does_not_survive_holm_over_the_sweeps_claims_says_so():
    from scipy.stats import t

    better = _entry("x", [0.03, 0.05, 0.07])  # mean 0.05, se 0.02 / sqrt 3: t 4.33, p 0.049 on df 2
    unsure = _entry("y", [-0.05, 0.0, 0.08])  # interval around 0 and +0.05: undecided
    not_rep = _entry("z", [-0.01, 0.0, 0.01])  # excludes the claimed +0.05 (t 8.7 against it), not 0
    claims = [Claim({"method": m}, "test/pass@1", 1, 0.05) for m in ("x", "y", "z")]
    alone = [row for c in claims for row in claim_rows(c, [better, unsure, not_rep], 0.95, 0.8)]
    assert [r[8] for r in alone] == ["better, as claimed", alone[1][8], "not reproduced"]
    assert alone[1][8].startswith("undecided")
    p_x = better["comparison"].p_value
    p_z = float(2 * t.sf(0.05 / (0.01 / math.sqrt(3)), 2))  # against the claimed effect, not 0
    p_y = unsure["comparison"].p_value
    assert p_x < 0.05 and p_z < 0.05 < p_y
    rows = all_claim_rows(claims, [better, unsure, not_rep], 0.95, 0.8)
    # Holm: z first (3 x p_z < 0.05 holds), then x (2 x p_x > 0.05 fails)
    assert 3 * p_z < 0.05 < 2 * p_x
    assert rows[0][8] == f"better, as claimed; not after Holm's correction over 3 claims (p {2 * p_x:.3f})"
    assert rows[1][8] == alone[1][8] and rows[2][8] == "not reproduced"
    # one claim alone is not corrected, and the report's table carries the corrected words
    assert all_claim_rows(claims[:1], [better], 0.95, 0.8)[0][8] == "better, as claimed"
    assert "not after Holm's correction over 3 claims" in claims_section(
        claims, [better, unsure, not_rep], 0.95, 0.8
    )
