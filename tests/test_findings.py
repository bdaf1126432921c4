"""The findings pages are generated from committed results: the prose's numbers match the data they cite."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from lightning_rlvr.experiments import findings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return findings.render(ROOT)


def test_committed_pages_match_the_data(rendered: dict[str, str]) -> None:
    """Regenerate every block from the committed results: a page that differs is stale."""
    for page, text in rendered.items():
        assert (ROOT / page).read_text() == text, (
            f"{page} is stale: python -m lightning_rlvr.experiments.findings"
        )


def test_every_block_holds_numbers(rendered: dict[str, str]) -> None:
    for (page, name), _ in findings.BLOCKS.items():
        body = rendered[page].split(findings.BEGIN.format(name))[1].split(findings.END.format(name))[0]
        assert re.search(r"\d+\.\d", body), f"{page}: block {name} has no figure"


def _copy(tmp: Path) -> Path:
    """A root whose data are the committed ones (linked) and whose pages are copies."""
    for folder in ("sweeps", "benchmarks", "configs"):
        (tmp / folder).symlink_to(ROOT / folder)
    (tmp / "docs").mkdir()
    for page in findings.PAGES:
        shutil.copy(ROOT / page, tmp / page)
    return tmp


def test_a_changed_number_is_caught_and_regenerated(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = _copy(tmp_path)
    page = root / "docs/results.md"
    text = page.read_text()
    begin = text.index(findings.BEGIN.format("glance"))
    hit = re.compile(r"[+-]\d+\.\d").search(text, begin)
    assert hit is not None
    changed = f"{hit.group()[0]}{float(hit.group()[1:]) + 1:.1f}"
    page.write_text(text[: hit.start()] + changed + text[hit.end() :])
    assert findings.main(["--root", str(root), "--check"]) == 1
    assert "docs/results.md is stale" in capsys.readouterr().err
    assert findings.main(["--root", str(root)]) == 0
    assert page.read_text() == text
    assert findings.main(["--root", str(root), "--check"]) == 0


@pytest.mark.parametrize("mode", [[], ["--check"], ["--conflicts"]])
@pytest.mark.parametrize("sweep", [findings.REAL, findings.STUDY])
def test_a_malformed_sweep_file_is_one_line_in_every_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture, mode: list[str], sweep: str
) -> None:
    root = _copy(tmp_path)
    (root / "sweeps").unlink()
    shutil.copytree(ROOT / "sweeps", root / "sweeps", symlinks=True, ignore=shutil.ignore_patterns("runs"))
    (root / sweep).write_text((ROOT / sweep).read_text() + "report: {claims: [\n")
    before = {p: (root / p).read_text() for p in findings.PAGES}
    assert findings.main(["--root", str(root), *mode]) == 2
    err = capsys.readouterr().err
    assert f"{sweep}: not valid YAML" in err and err.count("\n") == 1
    assert {p: (root / p).read_text() for p in findings.PAGES} == before  # nothing written


@pytest.mark.parametrize(
    "mode,page", [([], "README.md"), (["--check"], "docs/results.md"), (["--conflicts"], "docs/x.md")]
)
def test_a_page_that_is_not_text_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, mode: list[str], page: str
) -> None:
    root = _copy(tmp_path)
    (root / page).write_bytes(b"# x\n\xff\xfe SC-GRPO -3.8 [-7.5, -0.0]\n")
    assert findings.main(["--root", str(root), *mode]) == 2
    err = capsys.readouterr().err
    assert f"{page}: not UTF-8 text (byte 4" in err and err.count("\n") == 1


@pytest.mark.parametrize("damage", ["markers", "results", "credit"])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, damage: str) -> None:
    root = _copy(tmp_path)
    if damage == "markers":
        page = root / "README.md"
        page.write_text(page.read_text().replace(findings.END.format("readme"), ""))
        said = "README.md: no '<!-- findings:readme begin -->'"
    else:
        (root / "sweeps").unlink()
        shutil.copytree(
            ROOT / "sweeps", root / "sweeps", symlinks=True, ignore=shutil.ignore_patterns("runs")
        )
        if damage == "results":
            (root / "sweeps/results/methods_agent/results.csv").unlink()
            said = "sweeps/results/methods_agent/results.csv: not found"
        else:
            (root / "sweeps").joinpath("results/methods_real/runs").mkdir()
            said = "sweeps/results/methods_real/runs/grpo__seed=1/credit_eval.md: not found"
    before = {p: (root / p).read_text() for p in findings.PAGES}
    assert findings.main(["--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
    assert {p: (root / p).read_text() for p in findings.PAGES} == before  # nothing written


def _two_sided(k: int, n: int) -> float:
    tail = sum(math.comb(n, i) for i in range(max(k, n - k), n + 1)) / 2**n
    return min(1.0, 2 * tail)


@pytest.mark.parametrize("k,n", [(15, 24), (14, 20), (20, 20), (9, 20), (17, 32), (2, 20)])
def test_chance_is_a_two_sided_binomial_test(k: int, n: int) -> None:
    p = _two_sided(k, n)
    assert findings.binomial_p(k, n) == pytest.approx(p)
    word = findings.chance_word(k, n)
    if p >= findings.CHANCE_ALPHA:
        assert word == f"indistinguishable from chance (p {p:.2f})"
    else:
        assert word.startswith("beyond chance" if 2 * k > n else "below chance")


def test_a_claim_at_unmatched_rates_is_undecided() -> None:
    row = ["c", "x", "test/pass@1", "+4.4", "3", "-3.8 [-10.6, +2.9]", "0.2", "9.5", "not reproduced"]
    assert findings._claim_verdict([*row, "3 seeds, paired (df 2), rate-matched", "-"]) == "not reproduced"
    said = findings._claim_verdict([*row, "3 seeds, paired (df 2), rates differ: 0.0002 vs 0.0004", "-"])
    assert said.startswith("undecided: rates differ (0.0002 vs 0.0004)") and said.endswith("not reproduced")


def test_the_studys_progress_counts_each_arms_finished_seeds(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "sweeps").unlink()
    shutil.copytree(ROOT / "sweeps", root / "sweeps", symlinks=True, ignore=shutil.ignore_patterns("runs"))
    table = root / "sweeps/results/study_real/results.csv"
    lines = table.read_text().splitlines()
    method = lines[0].split(",").index("method")
    runs = [line for line in lines[1:] if line.split(",")[method] == "grpo"]
    planned = len(findings.load_sweep(ROOT / findings.STUDY).grid["seed_everything"])
    for missing in (1, 2):  # the committed study less one, then two, of GRPO's runs: it still runs
        table.write_text("\n".join([lines[0], *(line for line in lines[1:] if line not in runs[-missing:])]))
        said = findings.seeds_done(root, findings.STUDY)
        assert f"GRPO {len(runs) - missing}," in said and said.endswith(f"of {planned} seeds finished")
        assert said.startswith("still running: ")
    planned_runs = findings.expand(findings.load_sweep(ROOT / findings.STUDY))
    row = lines[1].split(",")
    every = [",".join([r.run_id, *row[1:]]) for r in planned_runs]  # one row per planned run: finished
    table.write_text("\n".join([lines[0], *every]) + "\n")
    arms = len({r.cell for r in planned_runs})
    said = findings.seeds_done(root, findings.STUDY)
    assert said == f"finished: {planned} seeds for each of its {arms} arms"
    table.write_text("\n".join([lines[0], *every[:-1], every[0]]) + "\n")  # a run twice is not every run
    assert findings.seeds_done(root, findings.STUDY).startswith("still running: ")
    table.unlink()
    with pytest.raises(findings.FindingsError, match="study_real/results.csv: not found"):
        findings.seeds_done(root, findings.STUDY)


@pytest.mark.parametrize(
    ("line", "changed", "said"),
    [
        ("  trainer.max_steps: 32", "  trainer.max_steps: 40", "40 RL steps"),
        ("  data.test_size: 512", "  data.test_size: 256", "256 test prompts"),
        ("  model.sampling_key: keyed", "  model.sampling_key: stream", None),
    ],
)
def test_the_studys_settings_on_the_pages_are_read_from_its_sweep_file(
    tmp_path: Path, line: str, changed: str, said: str | None
) -> None:
    root = _copy(tmp_path)
    (root / "sweeps").unlink()
    (root / "sweeps").mkdir()
    for entry in (ROOT / "sweeps").iterdir():  # the committed data, linked; the study's file, a copy
        (root / "sweeps" / entry.name).symlink_to(entry)
    sweep = root / findings.STUDY
    sweep.unlink()
    text = (ROOT / findings.STUDY).read_text()
    assert line in text
    sweep.write_text(text)
    before = findings.design(root, findings.STUDY)
    sweep.write_text(text.replace(line, changed))
    after = findings.design(root, findings.STUDY)
    assert after != before
    if said is None:
        assert "keyed sampling" in before and "keyed sampling" not in after
    else:
        assert said in after and said in " ".join(findings.readme_findings(root).split())
