"""docs/methods.md stands alone and states the defaults the constructors really have."""

from __future__ import annotations

import csv
import importlib
import inspect
import re
from pathlib import Path

import pytest

from lightning_rlvr.collect.dynamic_sampling import DynamicSampling
from lightning_rlvr.credit import DrGRPOCredit, GRPOCredit
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.credit.hsd import HSDCredit
from lightning_rlvr.credit.rredcot import RREDCoTCredit
from lightning_rlvr.credit.sc_grpo import SCGRPOCredit
from lightning_rlvr.credit.shear import SHEARCredit
from lightning_rlvr.losses import PPOClip
from lightning_rlvr.module import RLVRModule
from lightning_rlvr.rewards import OverlongPenalty
from tests.conftest import REPO

DOC = REPO / "docs" / "methods.md"
SECTIONS = {  # heading prefix -> the classes whose defaults that section states
    "The shared objective": [RLVRModule, PPOClip],
    "GRPO": [GRPOCredit],
    "Dr. GRPO": [DrGRPOCredit],
    "DAPO": [DynamicSampling, OverlongPenalty],
    "SHEAR": [SHEARCredit],
    "SC-GRPO": [SCGRPOCredit],
    "HSD": [HSDCredit],
    "HP-RLVR": [HPRLVRCredit],
    "RREDCoT": [RREDCoTCredit],
}
METHOD_FILES = ["grpo", "dr_grpo", "shear", "sc_grpo", "hsd", "hp_rlvr", "rredcot"]
ASSIGNMENT = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^,`)\s]+)')


def sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)
    return {p.split("\n", 1)[0]: p for p in parts[1:]}


def stated_defaults(text: str) -> list[tuple[str, object]]:
    """Every ``name=value`` inside a code span of ``text``, the value evaluated as Python."""
    out = []
    for span in re.findall(r"`([^`]+)`", text, flags=re.S):
        for name, value in ASSIGNMENT.findall(span):
            out.append((name, eval(value, {"__builtins__": {}})))  # literals and 2**24 only
    return out


def actual_default(classes: list[type], name: str):
    for cls in classes:
        params = inspect.signature(cls.__init__).parameters
        if name in params:
            default = params[name].default
            if default is None and name in getattr(cls, "text_defaults", {}):  # None = the task's, else this
                return cls.text_defaults[name]
            return getattr(cls(), name) if default is None else default  # None = "use the module constant"
    raise AssertionError(f"{name} is not an argument of {[c.__name__ for c in classes]}")


@pytest.mark.parametrize("heading", sorted(SECTIONS))
def test_every_stated_default_is_the_constructor_default(heading):
    (text,) = [t for h, t in sections().items() if h.split(" (")[0] == heading]
    stated = stated_defaults(text)
    assert stated, f"section {heading} states no defaults"
    for name, value in stated:
        assert actual_default(SECTIONS[heading], name) == value, (heading, name)


def test_every_method_has_a_section_with_provenance_tags_and_a_place_for_later_ones():
    found = sections()
    for heading in SECTIONS:
        assert any(h.split(" (")[0] == heading for h in found), heading
    for heading in ("SHEAR", "SC-GRPO", "HSD", "HP-RLVR", "RREDCoT", "DAPO"):
        (text,) = [t for h, t in found.items() if h.split(" (")[0] == heading]
        assert "[proposed]" in text and re.search(r"\[(paper|summary|abstract)\]", text), heading
    assert list(found)[-1] == "Baselines added later"


def test_docs_and_method_files_stand_alone():
    for name in METHOD_FILES:
        doc = importlib.import_module(f"lightning_rlvr.credit.{name}").__doc__
        assert "docs/methods.md" in doc, name
    assert "docs/methods.md" in importlib.import_module("lightning_rlvr.collect.dynamic_sampling").__doc__
    paths = [
        REPO / "README.md",
        DOC,
        *(REPO / "lightning_rlvr").rglob("*.py"),
        *(REPO / "configs").rglob("*.yaml"),
    ]
    for path in paths:
        text = path.read_text()
        assert "METHODS.md" not in text and "../shared" not in text and "/work/shared" not in text, path
    assert "docs/methods.md" in (REPO / "README.md").read_text()


def test_the_rredcot_segments_table_in_credit_lab_md_matches_its_committed_lab_run():
    """docs/credit_lab.md's table for RREDCoT on the steps3 checkpoint restates the lab's committed
    tables (segments from credit_method_metrics.csv, localisation and Spearman from credit_eval.csv)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks/results/credit_eval_real/steps3"
    metrics = {}
    for row in csv.DictReader(open(folder / "credit_method_metrics.csv")):
        metrics[(row["method"], row["metric"])] = float(row["mean_over_batches"])
    evals = {row["method"]: row for row in csv.DictReader(open(folder / "credit_eval.csv"))}
    page = (Path(__file__).resolve().parents[1] / "docs/credit_lab.md").read_text()
    rows = {"RREDCoT (its YAML)": "rredcot", "RREDCoT, line breaks": "rredcot_lines"}
    for label, method in rows.items():
        (line,) = [x for x in page.splitlines() if x.startswith(f"| {label} |")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"{metrics[(method, 'segments_mean')]:.2f}"
        assert cells[2] == f"{100 * metrics[(method, 'multi_segment_frac')]:.0f}%"
        assert cells[3] == f"{metrics[(method, 'segments_max')]:.0f}"
        e = evals[method]
        loc = [float(e[f"localisation_{k}"]) for k in ("mean", "low", "high")]
        assert cells[5] == "{:.2f} [{:.2f}, {:.2f}]".format(*loc)
        assert re.match(r"-?\d\.\d\d", cells[6]) and cells[6].startswith(f"{float(e['spearman_mean']):.2f}")


def test_the_decisive_study_paragraph_states_the_sweep_files_design():
    """docs/results.md's paragraph on study_real: every setting it names is the sweep file's, and its
    4.4-point bar is +8.1% of methods_real's GRPO test pass@1 (the earlier design it was set from)."""
    from lightning_rlvr.experiments.sweep.spec import load_sweep

    text = (REPO / "docs/results.md").read_text()
    para = " ".join(text.split("### The decisive study")[1].split("<!-- findings:study begin")[0].split())
    sweep = load_sweep(REPO / "sweeps/study_real.yaml")
    own = sweep.axis_overrides["method"]["sc_grpo_own_rate"]["model.lr"]
    assert f"{sweep.overrides['trainer.max_steps']} RL steps" in para
    assert f"GRPO's bracketed rate {sweep.overrides['model.lr']:.0e}".replace("e-0", "e-") in para
    assert f"at its own ({own:.0e})".replace("e-0", "e-") in para
    assert f"{sweep.test_overrides['data.test_size']} test prompts" in para
    assert f"up to {len(sweep.grid['seed_everything'])} seeds" in para
    with open(REPO / "sweeps/results/methods_real/results.csv") as f:
        grpo = [float(r["test/pass@1"]) for r in csv.DictReader(f) if r["method"] == "grpo"]
    mean = sum(grpo) / len(grpo)
    assert f"test pass@1 of {mean:.2f}" in para and f"at most {100 * 0.081 * mean:.1f} points" in para


def test_the_committed_sweeps_table_counts_what_each_report_counts():
    """docs/sweeps.md's "runs committed" column is each report's "X of Y runs finished" (a sweep that
    grew an arm, or a run that landed, changes the report and must change the table)."""
    text = (REPO / "docs/sweeps.md").read_text()
    rows = re.findall(r"^\| `sweeps/(\w+)\.yaml` \|.*\| (\d+) of (\d+)\b[^|]*\|$", text, flags=re.M)
    assert len(rows) >= 10
    for name, done, planned in rows:
        report = (REPO / "sweeps/results" / name / "results.md").read_text()
        counted = re.search(r"(\d+) of (\d+) runs finished", report)
        assert counted and counted.groups() == (done, planned), (name, counted and counted.groups())
