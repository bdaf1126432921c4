"""The conflict scanner: one figure stated with two values is found; two figures that round alike are not."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from lightning_rlvr.experiments import figure_conflicts, findings

ROOT = Path(__file__).resolve().parents[1]
NAMES = findings.figure_names(ROOT)
SETTINGS = findings.figure_settings()
REAL_SOURCES = [s for s in findings.SOURCES if s.sweep in (findings.REAL, findings.STUDY)]
HEAD = "| claim | compared | claimed | measured [95%] | MDD | verdict |\n|---|---|---|---|---|---|\n"


def _found(tmp: Path, readme: str, *docs: str) -> list[str]:
    (tmp / "docs").mkdir(exist_ok=True)
    (tmp / "README.md").write_text(f"# x\n\n{readme}\n")
    for i, text in enumerate(docs):
        (tmp / f"docs/p{i}.md").write_text(f"# p{i}\n\n{text}\n")
    return figure_conflicts.conflicts(tmp, NAMES, settings=SETTINGS)


def _claims_table(sweep: str, rows: list[tuple[str, str, str]]) -> str:
    """A per-claim table as docs/results.md prints it, under a lead naming its sweep file."""
    body = "".join(
        f"| {claim} | {metric} | +4.0 | {figure} | 3.8 | not reproduced |\n" for claim, metric, figure in rows
    )
    return f"### A study\n\n`{sweep}` asks the claims.\n\n{HEAD}{body}"


def _claims(path: str) -> list:
    return findings.load_sweep(ROOT / path).report.claims


def test_no_figure_is_stated_with_two_values_in_readme_and_docs() -> None:
    assert figure_conflicts.conflicts(ROOT, NAMES, settings=SETTINGS) == []


def test_every_difference_the_generated_blocks_print_is_labelled_with_its_setting() -> None:
    """None is skipped for sitting far from its method's name, wrapped over two lines or in a claims list
    whose setting its parent item or its table's lead names."""
    for page, text in findings.render(ROOT).items():
        spans = [
            (text.index(findings.BEGIN.format(name)), text.index(findings.END.format(name)))
            for (where, name) in findings.BLOCKS
            if where == page
        ]
        inside = [
            m.start()
            for m in figure_conflicts.DIFFERENCE.finditer(text)
            if any(a < m.start() < b for a, b in spans)
        ]
        labels = {at: label for at, label, _ in figure_conflicts.differences(text, NAMES, SETTINGS)}
        assert inside and all(" on " in labels.get(at, "") for at in inside), (
            page,
            [labels.get(at) for at in inside],
        )


@pytest.mark.parametrize("one,other", list(itertools.permutations(REAL_SOURCES, 2)))
def test_one_claim_in_two_sweeps_tables_is_two_figures(tmp_path: Path, one, other) -> None:
    """The same claim judged by two sweeps whose estimates round alike: two figures, each sweep's own."""
    claim = _claims(findings.STUDY)[0].source
    first = _claims_table(one.sweep, [(claim, "test pass@1 points", "-3.8 [-7.5, -0.0]")])
    second = _claims_table(other.sweep, [(claim, "test pass@1 points", "-3.8 [-10.6, +2.9]")])
    assert _found(tmp_path, "x", first, second) == []
    clash = _claims_table(one.sweep, [(claim, "test pass@1 points", "-3.8 [-10.6, +2.9]")])
    found = _found(tmp_path, "x", first, clash)
    assert len(found) == 1 and f"on {one.label} -3.8" in found[0]


@pytest.mark.parametrize("sweep", [findings.REAL, findings.STUDY])
def test_two_claims_of_one_method_in_one_table_are_two_figures(tmp_path: Path, sweep: str) -> None:
    """Every pair of a sweep's claims (rate-matched and at its own rate; seconds and steps) may round alike
    and stay two figures; the at-a-glance column holds the pass@1 claim's figure under its arm's name."""
    claims = _claims(sweep)
    for a, b in itertools.combinations(claims, 2):
        rows = [(a.source, a.metric, "+1.1 [-0.7, +2.9]"), (b.source, b.metric, "+1.1 [-0.6, +3.1]")]
        same = NAMES.get(a.source) == NAMES.get(b.source)  # one arm and metric: one figure, truly twice
        assert bool(_found(tmp_path, "x", _claims_table(sweep, rows))) == same, (a.source, b.source)


def test_a_claim_is_labelled_by_its_arm_and_metric() -> None:
    labels = {findings.NAMES[c.cell["method"]] for c in _claims(findings.STUDY)}
    assert {NAMES[c.source] for c in _claims(findings.STUDY)} == labels
    steps = [c for c in _claims(findings.REAL) if c.metric == "steps_to_target"]
    assert steps and all(NAMES[c.source].endswith(findings.METRIC_WORDS["steps_to_target"]) for c in steps)


@pytest.mark.parametrize("source", REAL_SOURCES, ids=lambda s: s.label)
def test_a_claim_differs_from_its_at_a_glance_cell(tmp_path: Path, source) -> None:
    """The claims table's pass@1 figure and the at-a-glance column's are one figure: two values clash."""
    claim = next(c for c in _claims(source.sweep) if c.metric == findings.METRIC)
    arm = findings.NAMES[claim.cell["method"]]
    glance = f"| method | {source.label} |\n|---|---|\n| {arm} | -0.8 [-3.5, +1.9] no difference |"
    table = _claims_table(source.sweep, [(claim.source, "test pass@1 points", "-0.8 [-3.5, +1.9]")])
    assert _found(tmp_path, "x", glance, table) == []
    table = _claims_table(source.sweep, [(claim.source, "test pass@1 points", "-0.8 [-3.6, +1.9]")])
    found = _found(tmp_path, "x", glance, table)
    assert len(found) == 1 and found[0].startswith(f"{arm} on {source.label} -0.8")


@pytest.mark.parametrize("width", [30, 45, 60, 110])
def test_a_claims_list_item_wrapped_anywhere_takes_its_setting_from_its_parent(
    tmp_path: Path, width: int
) -> None:
    """The README's claims sub-list, wrapped at any width: each figure is read whole, with the setting its
    parent item names, and clashes with the claims table of that sweep."""
    claim = _claims(findings.STUDY)[0]
    lines = [
        ("- ", "**HSD**: reasoning-gym +1.1 [-0.7, +2.9]."),
        ("- ", f"**The study** (`{findings.STUDY}`: keyed sampling, 32 RL steps):"),
        ("  - ", f"{claim.source}: claimed +4.0, measured -0.8 [-3.5, +1.9] in test pass@1 points."),
    ]
    readme = "\n".join(
        textwrap.fill(mark + text, width, subsequent_indent=" " * len(mark), break_long_words=False)
        for mark, text in lines
    )
    table = _claims_table(findings.STUDY, [(claim.source, "test pass@1 points", "-0.8 [-3.5, +2.0]")])
    found = _found(tmp_path, readme, table)
    label = findings.figure_settings()[findings.STUDY]
    assert len(found) == 1 and found[0].startswith(f"SC-GRPO on {label} -0.8"), found


@pytest.mark.parametrize("marker", ["-", "*", "1."])
def test_a_sub_item_takes_its_method_from_its_parent(tmp_path: Path, marker: str) -> None:
    nested = f"{marker} **HSD**, by setting:\n   {marker} reasoning-gym +0.9 [-0.5, +2.5]\n   {marker} x"
    found = _found(tmp_path, "- **HSD**: reasoning-gym +0.9 [-0.6, +2.5].", nested)
    assert len(found) == 1 and found[0].startswith("HSD on reasoning-gym +0.9")
    sibling = (
        f"{marker} **HSD**: long addition +2.0 [-1.0, +5.0]\n{marker} other: reasoning-gym +0.9 [-0.5, +2.5]"
    )
    assert _found(tmp_path, "- **HSD**: reasoning-gym +0.9 [-0.6, +2.5].", sibling) == []  # not a parent


def test_a_cell_far_along_a_long_row_belongs_to_the_rows_method(tmp_path: Path) -> None:
    labels = list(SETTINGS.values())[:3]
    wide = "no difference > 9.5 points (rates differ: 0.0002 vs GRPO's 0.0004) " * 2
    head = f"| method | {' | '.join(labels)} |\n|{'---|' * (len(labels) + 1)}\n"
    row = f"| KTAE | {' | '.join(f'+0.{i} [-1.0, +1.{i}] {wide}' for i in range(len(labels)))} |"
    prose = f"- **KTAE**: {labels[-1]} +0.{len(labels) - 1} [-9.0, +9.9]."
    found = _found(tmp_path, prose, head + row)
    assert len(found) == 1 and found[0].startswith(f"KTAE on {labels[-1]} +0.{len(labels) - 1}")


@pytest.mark.parametrize(
    "first,second,label",
    [
        ("SC-GRPO is -3.8 [-7.8, +0.1] here.", "SC-GRPO: -3.8 [-10.6, +2.9].", "SC-GRPO -3.8"),
        ("SC-GRPO is -3.8 [-7.8, +0.1] here.", "| SC-GRPO -3.8 [-10.6, +2.9] | x |", "SC-GRPO -3.8"),
        ("SC-GRPO is -3.8 [-7.8, +0.1] here.", "SC-GRPO: -3.8 points\n[-10.6, +2.9].", "SC-GRPO -3.8"),
        ("HP-RLVR (paper: 1.2-2.3x faster)", "HP-RLVR, whose paper reports 1.21x faster", "HP-RLVR's paper"),
        ("At M = 16 the oracle's ceiling is 0.74.", "M = 16: 0.62 [0.46, 0.73] (the ceiling)", "ceiling"),
        (
            "- **HSD**: reasoning-gym +0.9 [-0.6, +2.5] no difference.",
            "| method | long addition | reasoning-gym |\n|---|---|---|\n"
            "| HSD | -1.2 [-10.3, +7.9] | +0.9 [-0.5, +2.5] |",
            "HSD on reasoning-gym +0.9",
        ),  # the same setting in prose and in its table column
    ],
)
def test_a_figure_with_two_values_is_reported(tmp_path: Path, first: str, second: str, label: str) -> None:
    found = _found(tmp_path, first, second)
    assert len(found) == 1 and label in found[0] and "README.md" in found[0] and "docs/p0.md" in found[0]
    assert _found(tmp_path, first, first) == []  # the same value twice is one statement


@pytest.mark.parametrize(
    "second",
    [
        "| method | reasoning-gym | SmolLM2 study |\n|---|---|---|\n"
        "| HSD | +0.9 [-0.6, +2.5] | +0.9 [-2.5, +4.2] |",
        "- **HSD**: reasoning-gym +0.9 [-0.6, +2.5]; SmolLM2 study +0.9 [-2.5, +4.2] no difference.",
    ],
)
def test_two_settings_differences_that_round_alike_are_two_figures(tmp_path: Path, second: str) -> None:
    """HSD's +0.9 on reasoning-gym and its +0.9 in the SmolLM2 study are different figures, in a table's
    columns or named in prose before each."""
    assert _found(tmp_path, "- **HSD**: reasoning-gym +0.9 [-0.6, +2.5] no difference.", second) == []


def test_a_paired_difference_is_its_own_statistic(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("KTAE: -4.0 [-10.8, +2.7] pooled; KTAE's paired -4.0 [-5.4, -2.6].\n")
    assert figure_conflicts.conflicts(tmp_path, findings.NAMES.values()) == []


def test_the_conflicts_flag_lists_each_conflict_and_fails(tmp_path: Path, capsys) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("SC-GRPO is -3.8 [-7.8, +0.1] here.\n")
    (tmp_path / "docs/a.md").write_text("SC-GRPO: -3.8 [-10.6, +2.9].\n")
    assert findings.main(["--root", str(tmp_path), "--conflicts"]) == 1
    assert capsys.readouterr().out.startswith("SC-GRPO -3.8: [-7.8, +0.1] (README.md)")
    (tmp_path / "docs/a.md").write_text("SC-GRPO: -3.8 [-7.8, +0.1].\n")
    assert findings.main(["--root", str(tmp_path), "--conflicts"]) == 0


def test_a_figure_is_placed_in_its_tables_column_even_at_the_pages_first_line() -> None:
    table = "| method | SmolLM2 study |\n|---|---|\n| HSD | +0.9 [-2.5, +4.2] |"
    assert figure_conflicts.column_header(table, table.index("+0.9")) == "SmolLM2 study"
    assert figure_conflicts.column_header("HSD +0.9 [-2.5, +4.2]", 4) == ""  # prose: no column
    headless = "| HSD | +0.9 [-2.5, +4.2] |"  # no line above: the line is its own header, no error
    assert figure_conflicts.column_header(headless, headless.index("+0.9")) == "+0.9 [-2.5, +4.2]"
