"""The run archive committed with a sweep's report: a sweep resumes from it on a fresh clone, a rewritten
report keeps every archived run it can show and says which it cannot, and a credit lab's table added
after a run is done joins its archive."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess

import pytest

from lightning_rlvr.experiments.sweep import run as sw
from tests.conftest import REPO, write
from tests.test_sweep_lifecycle import FakeLightning
from tests.test_sweep_report import write_credit_eval


@pytest.mark.parametrize("report_dir", ["report", None])  # a report directory of its own, or ``out``
def test_a_sweep_resumes_on_a_fresh_machine_from_the_runs_archived_with_its_report(
    tmp_path, monkeypatch, report_dir
):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    write(tmp_path / "m" / "two.yaml", "model: {lr: 2.0e-4}\n")
    text = "out: out\ngrid:\n  config: [m/one.yaml, m/two.yaml]\n  seed_everything: [0, 1]\n"
    path = write(tmp_path / "s.yaml", text + (f"report_dir: {report_dir}\n" if report_dir else ""))
    with pytest.raises(KeyboardInterrupt):  # killed in its third run
        sw.main([str(path), "--jobs", "1"], runner=FakeLightning(kill_at="one__seed=1"))
    report = tmp_path / (report_dir or "out")
    archived = sorted(p.parent.name for p in (report / "runs").glob("*/DONE"))
    assert archived == ["one__seed=0", "two__seed=0"]
    kept = sorted(str(p.relative_to(report / "runs" / "one__seed=0")) for p in report.glob("runs/one*/**/*"))
    assert "checkpoints" not in " ".join(kept) and "logs/fit/metrics.csv" in kept
    if report_dir:  # a fresh clone: the run directories are gone, the committed report is not
        shutil.rmtree(tmp_path / "out")
    else:  # the unfinished run's directory survives; only the finished ones' large files are lost
        for run in ("one__seed=0", "two__seed=0"):
            shutil.rmtree(tmp_path / "out" / run)
    again = FakeLightning()
    assert sw.main([str(path), "--jobs", "1"], runner=again) == 0
    assert [c for c in again.calls if c[1] != "_warmup"] == [
        ("fit", "one__seed=1"),
        ("test", "one__seed=1"),
        ("fit", "two__seed=1"),
        ("test", "two__seed=1"),
    ]
    with open(report / "results.csv") as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == ["one__seed=0", "one__seed=1", "two__seed=0", "two__seed=1"]
    assert rows["one__seed=0"]["test/pass@1"] == rows["one__seed=1"]["test/pass@1"] == "0.5"
    shutil.rmtree(tmp_path / "out")
    write(path, path.read_text() + "overrides: {trainer.max_steps: 7}\n")  # archived under another spec:
    third = FakeLightning()  # every run is run again
    assert sw.main([str(path), "--jobs", "1"], runner=third) == 0
    assert len([c for c in third.calls if c[0] == "fit"]) == 4


@pytest.mark.parametrize("flag", [["--only", "^two"], ["--only", "seed=1$"], ["--report-only"]])
def test_a_sweep_on_a_fresh_clone_reports_every_archived_run_whatever_it_selects(tmp_path, monkeypatch, flag):
    """A fresh clone holds the archive, not the run folders. Run with ``--only`` (or ``--report-only``),
    the sweep rewrites the committed report: it must still hold every archived run, not just the
    selected ones, and a selected run that is archived is not run again."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    write(tmp_path / "m" / "two.yaml", "model: {lr: 2.0e-4}\n")
    grid = "grid:\n  config: [m/one.yaml, m/two.yaml]\n  seed_everything: [0, 1]\n"
    path = write(tmp_path / "s.yaml", "out: out\nreport_dir: report\n" + grid)
    with pytest.raises(KeyboardInterrupt):  # one__seed=0, two__seed=0 finish and are archived
        sw.main([str(path), "--jobs", "1"], runner=FakeLightning(kill_at="one__seed=1"))
    shutil.rmtree(tmp_path / "out")  # the fresh clone
    again = FakeLightning()
    sw.main([str(path), "--jobs", "1", *flag], runner=again)
    selected = {"--only": flag[-1]}.get(flag[0])
    ran = sorted({c[1] for c in again.calls if c[0] == "fit"})
    want = [] if selected is None else [r for r in ("one__seed=1", "two__seed=1") if re.search(selected, r)]
    assert ran == want
    with open(tmp_path / "report" / "results.csv") as f:
        reported = sorted(r["run_id"] for r in csv.DictReader(f))
    assert reported == sorted({"one__seed=0", "two__seed=0", *want})
    assert f"{len(reported)} of 4 runs finished" in (tmp_path / "report" / "results.md").read_text()


def finished_two_config_sweep(tmp_path, monkeypatch) -> tuple:
    """A sweep of two config files x seeds 0-1 with its own report directory, run to the end: (file, grid)."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    write(tmp_path / "m" / "two.yaml", "model: {lr: 2.0e-4}\n")
    grid = "grid:\n  config: [m/one.yaml, m/two.yaml]\n  seed_everything: [0, 1]\n"
    path = write(tmp_path / "s.yaml", "out: out\nreport_dir: report\n" + grid)
    assert sw.main([str(path), "--jobs", "1"], runner=FakeLightning()) == 0
    return path, grid


def test_a_rewritten_report_says_which_archived_runs_it_leaves_out_and_why(tmp_path, monkeypatch, caplog):
    """Archived runs the sweep file no longer names (a file renamed) or names with other overrides (a new
    lr) drop out of a rewritten report; each kind is said in the log, and the archive keeps them."""
    path, grid = finished_two_config_sweep(tmp_path, monkeypatch)
    shutil.rmtree(tmp_path / "out")  # a fresh clone
    (tmp_path / "m" / "two.yaml").rename(tmp_path / "m" / "deux.yaml")
    renamed = grid.replace("two.yaml", "deux.yaml")
    write(
        path,
        "out: out\nreport_dir: report\n" + renamed + "axis_overrides:\n  config: {one: {model.lr: 0.5}}\n",
    )
    with caplog.at_level("WARNING"):
        sw.main([str(path), "--report-only"], runner=FakeLightning())
    assert "2 archived runs in report/runs are no run of the sweep file now" in caplog.text
    assert "two__seed=0, two__seed=1" in caplog.text
    for seed in (0, 1):
        assert (
            f"one__seed={seed} finished with other overrides than the sweep's: it runs again" in caplog.text
        )
    # no run of the file now has finished: the committed report stays, and the log says why
    assert "no run of s has finished in out; the report in report keeps its 4 committed rows" in caplog.text
    assert "4 of 4 runs finished" in (tmp_path / "report" / "results.md").read_text()
    assert len(list((tmp_path / "report" / "runs").glob("*/DONE"))) == 4  # nothing deleted


@pytest.mark.parametrize("archived", [True, False])  # its runs archived and dropped, or never archived
@pytest.mark.parametrize("mode", [["--report-only"], ["--report-only", "--only", "two"]])
def test_a_committed_report_whose_runs_are_not_here_is_kept_not_emptied(
    tmp_path, monkeypatch, caplog, archived, mode
):
    """A clone without a sweep's runs (a sweep committed before runs were archived, or an archive removed)
    must not rewrite its committed report as "No run has finished yet": that loses every number in it."""
    path, grid = finished_two_config_sweep(tmp_path, monkeypatch)
    report = tmp_path / "report"
    before = {name: (report / name).read_bytes() for name in ("results.md", "results.csv")}
    shutil.rmtree(tmp_path / "out")
    if not archived:
        shutil.rmtree(report / "runs")
    else:  # the archive's runs no longer count: their files were renamed
        (tmp_path / "m" / "two.yaml").rename(tmp_path / "m" / "deux.yaml")
        (tmp_path / "m" / "one.yaml").rename(tmp_path / "m" / "un.yaml")
        write(path, "out: out\nreport_dir: report\n" + grid.replace("two", "deux").replace("one", "un"))
    with caplog.at_level("WARNING"):
        sw.main([str(path), *mode], runner=FakeLightning())
    assert {name: (report / name).read_bytes() for name in before} == before
    assert "keeps its 4 committed rows" in caplog.text


def test_a_sweep_with_no_committed_rows_says_none_has_finished(tmp_path, monkeypatch):
    """Nothing to lose (no results.csv, or one with a header only): the report says no run has finished."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    path = write(tmp_path / "s.yaml", "out: out\nreport_dir: report\ngrid:\n  config: [m/one.yaml]\n")
    for committed in (None, "run_id,config,seed\n"):
        if committed is not None:
            write(tmp_path / "report" / "results.csv", committed)
        sw.main([str(path), "--report-only"], runner=FakeLightning())
        assert "No run has finished yet (1 planned)" in (tmp_path / "report" / "results.md").read_text()


def test_the_run_archive_under_a_report_directory_is_committed_not_ignored():
    """A fresh clone resumes only from archived runs git keeps (a bare ``runs/`` ignore rule hid them)."""
    from lightning_rlvr.experiments.sweep.archive import ARCHIVE

    archived = f"sweeps/results/any_sweep/{ARCHIVE}/grpo__seed=0/logs/fit/version_0/metrics.csv"
    for path in (archived, f"sweeps/results/any_sweep/{ARCHIVE}/grpo__seed=0/DONE"):
        check = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert check.returncode == 1, f"{path} is ignored by .gitignore"
    assert subprocess.run(["git", "check-ignore", "-q", "runs/sweeps/x/DONE"], cwd=REPO).returncode == 0


def test_a_credit_eval_added_after_a_run_is_archived_and_survives_a_fresh_clone(tmp_path, monkeypatch):
    """The credit lab scores a final checkpoint after its run is done; the next report archives the
    credit_eval.csv (and its readable credit_eval.md) with the run, so the report's credit columns come
    back on a fresh clone."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    path = write(
        tmp_path / "s.yaml",
        "out: out\nreport_dir: rep\ngrid:\n  config: [m/one.yaml]\n  seed_everything: [0, 1]\n",
    )
    assert sw.main([str(path), "--jobs", "1"], runner=FakeLightning()) == 0
    write_credit_eval(tmp_path / "out" / "one__seed=1" / "credit_eval.csv", [("one", 0.25, 0.5, 0.75)])
    write(tmp_path / "out" / "one__seed=1" / "credit_eval.md", "| method | spearman |\n")
    assert sw.main([str(path), "--report-only"], runner=FakeLightning()) == 0
    kept = tmp_path / "rep" / "runs" / "one__seed=1"
    assert (kept / "credit_eval.csv").is_file() and (
        kept / "credit_eval.md"
    ).read_text() == "| method | spearman |\n"
    shutil.rmtree(tmp_path / "out")  # a fresh clone
    again = FakeLightning()
    assert sw.main([str(path), "--jobs", "1"], runner=again) == 0
    assert [c for c in again.calls if c[1] != "_warmup"] == []  # both runs restored, nothing reruns
    with open(tmp_path / "rep" / "results.csv") as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    assert (
        rows["one__seed=1"]["credit_eval/spearman"] == "0.25"
        and rows["one__seed=0"]["credit_eval/spearman"] == ""
    )
