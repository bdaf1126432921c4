"""Which runs the sweep report pairs with the baseline: the same seed from the same warm start, also across
sweeps (``report.include``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_rlvr.experiments.sweep.checks import SweepError
from lightning_rlvr.experiments.sweep.comparison import compare_to_baseline, comparison_table, included_rows
from lightning_rlvr.experiments.sweep.spec import ReportSettings, load_sweep
from tests.sweep_rows import read_rows


def test_a_seed_pairs_only_when_both_runs_started_from_the_same_warm_start(tmp_path):
    # "moved" ran after the warm start was trained again (val before RL 0.109, not 0.152) on every
    # seed, "mixed" on seed 2 only; a missing start (an older run) pairs as before.
    text = "run_id,method,seed,val/pass@1_start,test/pass@1\n" + "".join(
        f"r,{m},{s},{start},{value}\n"
        for m, s, start, value in [
            ("grpo", 0, 0.152, 0.50),
            ("grpo", 1, 0.152, 0.60),
            ("grpo", 2, 0.152, 0.70),
            ("grpo", 3, "", 0.4),
            ("mixed", 0, 0.152, 0.58),
            ("mixed", 1, 0.152, 0.66),
            ("mixed", 2, 0.109, 0.10),
            ("mixed", 3, "", 0.5),
            ("moved", 0, 0.109, 0.30),
            ("moved", 1, 0.109, 0.31),
            ("moved", 2, 0.109, 0.32),
        ]
    )
    axes, rows = read_rows(text, tmp_path)
    settings = ReportSettings(baseline={"method": "grpo"})
    found = {e["cell"]["method"]: e for e in compare_to_baseline(axes, rows, settings)}
    mixed = found["mixed"]
    assert mixed["unpaired"] == [("2", "0.109", "0.152")]
    # seeds 0, 1, 3: 0.08, 0.06, 0.10 (seed 2's -0.60 would swamp them)
    assert mixed["comparison"].n == 3 and mixed["comparison"].diff == pytest.approx(0.08)
    assert found["moved"]["comparison"].n == 0 and len(found["moved"]["unpaired"]) == 3
    lines = {
        x.split(" | ")[0].strip("| "): x for x in comparison_table(axes, rows, settings).splitlines()[2:]
    }
    note = "not paired: another warm start (val pass@1 before RL 0.109 vs 0.152)"
    assert lines["mixed"].endswith(f"| better; 1 seed {note} |")
    assert (
        lines["moved"]
        == f"| moved | test/pass@1 | 0 | - | - | - | undecided (0 paired seeds); 3 seeds {note} |"
    )


def test_included_results_give_a_main_sweeps_methods_the_rerun_baseline_from_their_start(tmp_path):
    # a control reran GRPO from the warm start as it trains now (0.109); the main sweep's GRPO and
    # SHEAR began at 0.152, its MC at 0.109: MC pairs with the control's GRPO, SHEAR cannot
    main = tmp_path / "main.csv"
    main.write_text(
        "run_id,method,seed,val/pass@1_start,test/pass@1\n"
        + "".join(
            f"r,grpo,{s},0.152,0.5\nr,shear,{s},0.152,0.4\nr,mc,{s},0.109,{0.3 + 0.02 * s}\n"
            for s in range(3)
        )
    )
    axes, rows = read_rows(
        "run_id,method,seed,val/pass@1_start,test/pass@1\n"
        + "".join(f"c,grpo,{s},0.109,{0.2 + 0.01 * s}\n" for s in range(3)),
        tmp_path,
    )
    joined, said = included_rows(axes, rows, [main, tmp_path / "gone.csv"])
    assert sorted({r["method"] for r in joined}) == [
        "mc"
    ]  # the main sweep's GRPO is not ours; SHEAR's start differs
    assert said[0] == (
        f"Also compared with this baseline: mc, from `{main}`"
        " (not shear: another warm start on every seed).\n"
    )
    assert "not found" in said[1]
    found = {
        e["cell"]["method"]: e
        for e in compare_to_baseline(axes, rows + joined, ReportSettings(baseline={"method": "grpo"}))
    }
    assert found["mc"]["comparison"].n == 3 and found["mc"]["comparison"].diff == pytest.approx(0.11)
    assert "shear" not in found


def test_report_include_must_be_a_list_of_paths(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("grid:\n  seed_everything: [0]\n  model.lr: [1]\nreport:\n  include: {a: 1}\n")
    with pytest.raises(SweepError, match="report.include must be a list of results.csv paths"):
        load_sweep(path)
    path.write_text("grid:\n  seed_everything: [0]\n  model.lr: [1]\nreport:\n  include: r.csv\n")
    assert load_sweep(path).report.include == [Path("r.csv")]
