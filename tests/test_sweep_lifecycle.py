"""A sweep's runs over time: dry run, resume after a kill, two sweeps on one directory, changed configs,
warm starts, launchers, an interrupted fit and Ctrl-C (the run archive: test_sweep_archive.py)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import torch

from lightning_rlvr.core.process import FIT_REPORT_ENV
from lightning_rlvr.experiments.sweep import commands as swc
from lightning_rlvr.experiments.sweep import run as sw
from lightning_rlvr.experiments.sweep import runner as swr
from lightning_rlvr.experiments.sweep.spec import SPEC, expand, load_sweep
from tests.conftest import REPO, TINY, write


def test_dry_run_prints_the_commands_and_runs_nothing(grid_sweep, tmp_path, capsys):
    calls = []
    code = sw.main([str(grid_sweep), "--dry-run", "--out", "out"], runner=lambda *a: calls.append(a) or 0)
    assert code == 0 and calls == [] and not (tmp_path / "out").exists()
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 * 12  # no warm start configured here, so a fit and a test per run
    first_fit, first_test = lines[0], lines[1]  # seed by seed: the runs of seed 0 come first
    assert all("--seed_everything 0" in line for line in lines[:8:2])
    assert "lightning-rlvr fit --config base.yaml --config method/beta.yaml" in first_fit
    assert "--trainer.max_steps 3 --model.lr 0.0001 --seed_everything 0" in first_fit
    assert "--checkpoint.dirpath out/beta__lr=0.0001__seed=0/checkpoints" in first_fit
    assert "lightning-rlvr test --ckpt_path out/beta__lr=0.0001__seed=0/checkpoints/last.ckpt" in first_test
    assert len({line for line in lines if " fit " in line}) == 12  # one distinct fit per run
    assert len({line for line in lines if " test " in line}) == 12


def method_grid(tmp_path: Path, methods: dict[str, float], seeds: list[int]) -> Path:
    """A sweep file over method files m/<name>.yaml (each setting only its lr) and ``seeds``."""
    for name, lr in methods.items():
        write(tmp_path / "m" / f"{name}.yaml", f"model: {{lr: {lr}}}\n")
    configs = ", ".join(f"m/{name}.yaml" for name in methods)
    return write(tmp_path / "s.yaml", f"out: out\ngrid:\n  config: [{configs}]\n  seed_everything: {seeds}\n")


class FakeLightning:
    """Stands in for ``lightning-rlvr``: writes what fit and test would write, can die on one run."""

    def __init__(self, kill_at: str | None = None, fail_test_at: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.kill_at, self.fail_test_at = kill_at, fail_test_at

    def __call__(self, argv: list[str], log_path: Path, env: dict[str, str]) -> int:
        run = log_path.parent
        self.calls.append((argv[0], run.name))
        if run.name == "_warmup":
            return 0  # the warm-start job
        if argv[0] == "fit":
            if run.name == self.kill_at:
                raise KeyboardInterrupt  # the sweep is killed in the middle of this run's fit
            (run / "checkpoints").mkdir(parents=True)
            (run / "checkpoints" / "last.ckpt").write_text("ckpt")
            report = {"ckpt_path": str(run / "checkpoints" / "last.ckpt")}
            write(Path(env[FIT_REPORT_ENV]), json.dumps(report))  # what the fit reports (cli.after_fit)
            write(
                run / "logs" / "fit" / "metrics.csv",
                "step,train/reward_mean,val/pass@1\n0,,0.25\n0,0.5,\n1,0.75,\n",
            )
            return 0
        if run.name == self.fail_test_at:
            return 1
        write(run / "logs" / "test" / "metrics.csv", "epoch,step,test/pass@1,test/pass@2\n0,2,0.5,0.625\n")
        return 0


def test_a_killed_sweep_resumes_without_rerunning_finished_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = method_grid(tmp_path, {"one": 1.0e-4, "two": 2.0e-4}, [0, 1])
    # seed by seed: one__seed=0, two__seed=0, one__seed=1 (killed here), two__seed=1
    first = FakeLightning(kill_at="one__seed=1")
    with pytest.raises(KeyboardInterrupt):
        sw.main([str(path), "--jobs", "1"], runner=first)
    done = sorted(p.parent.name for p in (tmp_path / "out").glob("*/DONE"))
    assert done == ["one__seed=0", "two__seed=0"]
    assert json.loads((tmp_path / "out" / "one__seed=0" / "test_metrics.json").read_text()) == {
        "test/pass@1": 0.5,
        "test/pass@2": 0.625,
    }
    second = FakeLightning(fail_test_at="two__seed=1")
    assert sw.main([str(path), "--jobs", "1"], runner=second) == 1  # one run still fails its test
    assert second.calls == [
        ("fit", "one__seed=1"),
        ("test", "one__seed=1"),
        ("fit", "two__seed=1"),
        ("test", "two__seed=1"),
    ]
    third = FakeLightning()
    assert sw.main([str(path), "--jobs", "2"], runner=third) == 0
    assert third.calls == [("test", "two__seed=1")]  # its fit had finished: only the test reruns
    with open(tmp_path / "out" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["run_id"] for r in rows) == ["one__seed=0", "one__seed=1", "two__seed=0", "two__seed=1"]
    assert {r["test/pass@1"] for r in rows} == {"0.5"}


def test_a_second_sweep_on_the_same_directory_leaves_the_runs_in_progress_to_the_first(tmp_path, monkeypatch):
    """Launched twice, the second invocation used to delete the first's unfinished run directory and run
    it again beside it; now each run is locked by the process running it and the other skips it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(swr, "LOCK_WAIT_S", 0.1)  # the first is alive: waiting longer changes nothing
    path = method_grid(tmp_path, {"one": 1.0e-4}, [0, 1])
    second = FakeLightning()
    inner: list[int] = []

    class First(FakeLightning):
        def __call__(self, argv, log_path, env):
            if argv[0] == "fit" and log_path.parent.name == "one__seed=0":
                write(log_path.parent / "partial.txt", "half a fit")
                inner.append(sw.main([str(path), "--jobs", "1"], runner=second))  # launched again meanwhile
                assert (log_path.parent / "partial.txt").read_text() == "half a fit"  # not deleted under us
            return super().__call__(argv, log_path, env)

    first = First()
    assert sw.main([str(path), "--jobs", "1"], runner=first) == 0
    assert inner == [1]  # the second could not finish one__seed=0: the first was running it
    assert ("fit", "one__seed=0") not in second.calls and ("fit", "one__seed=1") in second.calls
    assert [c for c in first.calls if c[1] != "_warmup"] == [("fit", "one__seed=0"), ("test", "one__seed=0")]
    assert sorted(p.parent.name for p in (tmp_path / "out").glob("*/DONE")) == ["one__seed=0", "one__seed=1"]


def test_the_progress_bar_counts_a_run_left_to_another_sweep_as_skipped_not_failed():
    ok, busy = {"ok": True}, {"ok": False, "stage": "busy"}
    failed = {"ok": False, "stage": "test", "code": 1}
    skipped = "skipped (another sweep runs them)"
    assert swr.progress_counts([ok, ok]) == {}
    assert swr.progress_counts([busy, ok, busy]) == {skipped: 2}
    assert swr.progress_counts([failed, busy, failed]) == {"failed": 2, skipped: 1}


def test_a_run_done_with_another_lr_is_run_again_and_the_others_are_kept(grid_sweep):
    text = grid_sweep.read_text().replace("  model.lr: [1.0e-4, 5.0e-5]\n", "").replace("[0, 1, 2]", "[0]")
    write(grid_sweep, text + "out: out\naxis_overrides:\n  method:\n    alpha: {model.lr: 2.0e-4}\n")
    assert sw.main([str(grid_sweep)], runner=FakeLightning()) == 0
    again = FakeLightning()
    assert sw.main([str(grid_sweep)], runner=again) == 0 and again.calls == []  # all done: nothing runs
    write(grid_sweep, grid_sweep.read_text().replace("2.0e-4", "4.0e-4"))  # the tuning chose another lr
    sweep = load_sweep(grid_sweep)
    assert [swr.is_done(sweep, r) for r in expand(sweep)] == [True, False]  # beta, alpha
    third = FakeLightning()
    assert sw.main([str(grid_sweep)], runner=third) == 0
    assert [c for c in third.calls if c[1] != "_warmup"] == [
        ("fit", "alpha__seed=0"),
        ("test", "alpha__seed=0"),
    ]
    spec = json.loads((sweep.out / "alpha__seed=0" / SPEC).read_text())
    assert ["model.lr", 4.0e-4] in spec["overrides"]


def test_a_run_whose_config_changed_a_value_is_run_again_and_a_comment_changes_nothing(grid_sweep, caplog):
    text = grid_sweep.read_text().replace("  model.lr: [1.0e-4, 5.0e-5]\n", "").replace("[0, 1, 2]", "[0]")
    write(grid_sweep, text + "out: out\n")
    assert sw.main([str(grid_sweep)], runner=FakeLightning()) == 0
    alpha = grid_sweep.parent / "method" / "alpha.yaml"
    # a comment and another layout say the same: every run stays finished
    write(alpha, "# the sequence-mean method\nmodel:\n  loss: {init_args: {loss_agg: seq_mean}}\n")
    again = FakeLightning()
    assert sw.main([str(grid_sweep)], runner=again) == 0 and again.calls == []
    # a value changed in one method file: its run is stale, named in the log, and run again; beta's is kept
    write(alpha, "model:\n  loss: {init_args: {loss_agg: token_mean}}\n")
    sweep = load_sweep(grid_sweep)
    assert [swr.is_done(sweep, r) for r in expand(sweep)] == [True, False]  # beta, alpha
    third = FakeLightning()
    with caplog.at_level("WARNING"):
        assert sw.main([str(grid_sweep)], runner=third) == 0
    ran = [c for c in third.calls if c[1] != "_warmup"]
    assert ran == [("fit", "alpha__seed=0"), ("test", "alpha__seed=0")]
    assert "alpha__seed=0 finished with other contents of method/alpha.yaml: it runs again" in caplog.text
    # a spec recorded before digests existed counts by its files' names and overrides, as it did
    spec_path = sweep.out / "beta__seed=0" / SPEC
    spec = json.loads(spec_path.read_text())
    write(spec_path, json.dumps({k: v for k, v in spec.items() if k != "config_digests"}))
    write(grid_sweep.parent / "base.yaml", "model:\n  group_size: 8\n")
    # beta's spec cannot tell, so it stays finished; alpha's records the old base.yaml: stale
    assert [swr.is_done(sweep, r) for r in expand(sweep)] == [True, False]


def test_warm_start_runs_once_per_setting_before_the_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    path = write(
        tmp_path / "s.yaml",
        f"out: {tmp_path / 'out'}\nconfigs: [configs/quickstart.yaml]\n"
        "grid:\n  config: [configs/method/grpo.yaml, configs/method/dr_grpo.yaml]\n"
        "  model.task.init_args.digits: [2, 3]\n",
    )
    runs = expand(load_sweep(path))
    groups = swc.warm_start_groups(runs)
    assert len(groups) == 2  # the task differs; the method does not change the warm start
    fake = FakeLightning()
    assert sw.main([str(path), "--jobs", "2"], runner=fake) == 0
    assert [c[0] for c in fake.calls[:2]] == ["fit", "fit"] and all(c[1] == "_warmup" for c in fake.calls[:2])
    assert len(fake.calls) == 2 + 2 * len(runs)
    fake.calls.clear()
    assert sw.main([str(path)], runner=fake) == 0 and fake.calls == []  # all done: nothing runs at all


def test_submitit_launcher_runs_every_run(tmp_path, monkeypatch):
    """The cluster path through submitit's ``debug`` executor (same API as SLURM, run in this process)."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    path = write(
        tmp_path / "s.yaml",
        "out: out\nslurm: {timeout_min: 5}\ngrid:\n  config: [m/one.yaml]\n  seed_everything: [0, 1]\n",
    )
    fake = FakeLightning()
    assert sw.main([str(path), "--launcher", "debug", "--slurm", "slurm_partition=x"], runner=fake) == 0
    assert sorted(fake.calls) == [
        ("fit", "one__seed=0"),
        ("fit", "one__seed=1"),
        ("test", "one__seed=0"),
        ("test", "one__seed=1"),
    ]
    assert sorted(p.parent.name for p in (tmp_path / "out").glob("*/DONE")) == ["one__seed=0", "one__seed=1"]


def _fit_rows(run: Path) -> list[dict]:
    rows = []
    for path in sorted((run / "logs" / "fit").rglob("metrics.csv")):
        with open(path) as f:
            for r in csv.DictReader(f):  # timings differ from run to run; everything else must not
                keep = {k: v for k, v in r.items() if not k.startswith("perf/") and "time" not in k}
                rows.append({k: v for k, v in keep.items() if v not in ("", None)})
    return rows


def test_an_interrupted_fit_resumes_from_its_checkpoint_and_ends_as_the_uninterrupted_run(
    tmp_path, monkeypatch
):
    """Killed after its step-2 checkpoint (and after logging a step past it), a run's rerun continues from
    that checkpoint: same metrics rows, same final weights as a run never interrupted; the interrupted
    part's rows before the checkpoint are kept, the one after it is not counted twice."""
    from lightning_rlvr.cli import run as cli_run

    monkeypatch.chdir(tmp_path)
    sweep = write(
        tmp_path / "s.yaml",
        f"configs: [{REPO / 'configs' / 'quickstart.yaml'}, {TINY}]\n"
        "overrides: {trainer.max_steps: 4, trainer.val_check_interval: 2,\n"
        "  checkpoint.every_n_train_steps: 2, model.warm_start.init_args.max_steps: 300}\n"
        "grid:\n  seed_everything: [0]\n",
    )
    calls: list[list[str]] = []

    def in_process(kill_after: int | None):
        def runner(argv: list[str], log_path: Path, env: dict[str, str]) -> int:
            calls.append(argv)
            monkeypatch.setenv(FIT_REPORT_ENV, env.get(FIT_REPORT_ENV, ""))
            if (
                argv[0] == "fit" and kill_after is not None and log_path.parent.name != "_warmup"
            ):  # the first part stops after its checkpoint...
                cli_run([*argv, "--trainer.max_steps", str(kill_after)])
                metrics = log_path.parent / "logs" / "fit" / "metrics.csv"
                with open(metrics, newline="") as f:
                    header = next(csv.reader(f))
                with open(metrics, "a", newline="") as f:  # ...having logged a step past it
                    csv.DictWriter(f, header).writerow({"step": kill_after, "train/reward_mean": 9.0})
                raise KeyboardInterrupt
            cli_run(argv)
            return 0

        return runner

    with pytest.raises(KeyboardInterrupt):
        sw.main([str(sweep), "--out", "cut"], runner=in_process(kill_after=2))
    assert sw.main([str(sweep), "--out", "cut"], runner=in_process(None)) == 0
    resumed_fit = [a for a in calls if a[0] == "fit"][-1]
    assert resumed_fit[-2] == "--ckpt_path" and Path(resumed_fit[-1]).parent.name == "checkpoints"
    assert sw.main([str(sweep), "--out", "whole"], runner=in_process(None)) == 0

    cut, whole = tmp_path / "cut" / "seed=0", tmp_path / "whole" / "seed=0"
    assert (cut / "logs" / "fit" / "0_until_step_0000002" / "metrics.csv").is_file()
    assert _fit_rows(cut) == _fit_rows(whole)  # every step and validation once, with the same values
    assert [r["step"] for r in _fit_rows(whole) if "train/reward_mean" in r] == ["0", "1", "2", "3"]
    final = [
        torch.load(d / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for d in (cut, whole)
    ]
    assert final[0].keys() == final[1].keys()
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])
    rewards = [float(r["train/reward_mean"]) for r in _fit_rows(whole) if "train/reward_mean" in r]
    assert 0 < max(rewards) and min(rewards) < 1  # mixed groups: the updates moved the weights
    assert json.loads((cut / "fit_before.json").read_text())["resumed_at"] == [2]
    assert json.loads((cut / "DONE").read_text())["fit_s"] > 0


def test_ctrl_c_on_a_sweep_is_one_line_and_exit_130(monkeypatch, capsys):
    """The console script turns an interrupt anywhere in the sweep (the runner's join loop, a run) into
    one line saying how to resume, not a traceback; ``main`` itself still raises for callers and tests."""

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sw, "main", interrupted)
    assert sw.console() == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lightning-rlvr-sweep: interrupted;") and "again" in err[0]
    entry = re.search(r'^lightning-rlvr-sweep = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert entry and entry.group(1) == "lightning_rlvr.experiments.sweep.run:console"  # what the script runs


def test_a_run_killed_twice_after_the_same_checkpoint_keeps_the_first_parts_rows(tmp_path):
    """Resumed from step 2 and killed again before its next checkpoint: the second set-aside finds the
    part for step 2 already there and must keep its rows (steps 0-1), not replace them with the resumed
    part's rows before step 2 (none). Neither part's seconds after the checkpoint are counted."""
    from lightning_rlvr.experiments.sweep.resume import fit_seconds_before, set_aside_logs

    run, ckpt = tmp_path / "run", tmp_path / "run" / "checkpoints" / "last.ckpt"
    live = run / "logs" / "fit" / "metrics.csv"

    def log_steps(steps):
        live.parent.mkdir(parents=True, exist_ok=True)
        live.write_text("step,train/reward_mean\n" + "".join(f"{s},0.{s}\n" for s in steps))

    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"x")
    log_steps([0, 1, 2, 3])  # the first part: its checkpoint at step 2, then one step more
    set_aside_logs(run, ckpt, 2, started=ckpt.stat().st_mtime - 30.0)
    log_steps([2])  # the resumed part, killed before step 4's checkpoint
    set_aside_logs(run, ckpt, 2, started=ckpt.stat().st_mtime + 5.0)
    assert [r["step"] for r in _fit_rows(run)] == ["0", "1"]
    assert fit_seconds_before(run) == pytest.approx(30.0, abs=0.2)
    assert json.loads((run / "fit_before.json").read_text())["resumed_at"] == [2, 2]

    log_steps([0, 1, 2])  # killed between writing the part and removing the live file: done again
    set_aside_logs(run, ckpt, 2, started=ckpt.stat().st_mtime + 5.0)
    assert [r["step"] for r in _fit_rows(run)] == ["0", "1"]  # each row once


def test_a_seed_left_partly_done_is_completed_before_the_next_seed(tmp_path, monkeypatch):
    """The grid lists methods before seeds, so the pending runs of a sweep that finished some methods
    of seed 0 start with the other methods' seed 1; the order follows the grid's seeds instead."""
    monkeypatch.chdir(tmp_path)
    path = method_grid(tmp_path, {"one": 1.0e-4, "two": 1.0e-4, "three": 1.0e-4}, [0, 1, 2])
    first = FakeLightning(kill_at="three__seed=0")
    with pytest.raises(KeyboardInterrupt):
        sw.main([str(path), "--jobs", "1"], runner=first)
    sweep = load_sweep(path)
    order = [r.run_id for r in swr.pending(sweep, expand(sweep))]
    assert order[:4] == ["three__seed=0", "one__seed=1", "two__seed=1", "three__seed=1"]
    assert len(order) == 7
