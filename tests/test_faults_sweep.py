"""Process lifetime under SIGKILL: a killed sweep leaves no writer behind, and a rerun at once is clean.

Run as a module (``python -m tests.test_faults_sweep fit|test ...``) this file is a stand-in for
``lightning-rlvr``: a "fit" that writes ``last.ckpt`` (its pid and step) every 0.1 s and reports it, a
"test" that records what it read. The sweep runs it through its real ``subprocess_runner``
(``sweep.runner.CLI_MODULE``), so the process handling under test is the sweep's own. Sweeps and parents
are forked from pytest (no interpreter start-up); the only real ``lightning-rlvr`` is the one whose
death with its parent is checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STEPS = 40  # the stand-in fit takes about 4 s: a surviving orphan would still be writing during the rerun


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaps, as under a container's init, counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _core(name: str):  # pragma: no cover - runs in the sweep's children
    """``lightning_rlvr.core.<name>`` loaded by path: importing the package would import torch (seconds)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "lightning_rlvr" / "core" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_cli(argv: list[str]) -> None:  # pragma: no cover - runs in the sweep's children
    write_text, process = _core("files").write_text, _core("process")

    if not os.environ.get("FAULT_ESCAPES"):  # else: a writer that outlives its parent (no PDEATHSIG)
        process.adopt_parent_from_env()  # as lightning_rlvr.cli.main does
    args = dict(zip(argv[1::2], argv[2::2]))
    root = Path(args["--trainer.default_root_dir"])
    if argv[0] == "fit":
        with open(root / "fit_pids", "a") as f:
            f.write(f"{os.getpid()}\n")
        ckpt = Path(args["--checkpoint.dirpath"]) / "last.ckpt"
        for step in range(1, STEPS + 1):
            time.sleep(0.1)
            write_text(ckpt, f"{os.getpid()} {step}")
            with open(root / "writes", "a") as f:  # every write, by whom (appended by path: a write
                f.write(f"{os.getpid()} {step}\n")  # into a recreated folder shows up here)
        write_text(os.environ[process.FIT_REPORT_ENV], json.dumps({"ckpt_path": str(ckpt)}))
    else:
        content = Path(args["--ckpt_path"]).read_text()
        write_text(root / "tested.txt", content)
        write_text(root / "logs" / "test" / "metrics.csv", f"step,test/pass@1\n0,{content.split()[1]}\n")


def _sweep(cwd: Path) -> int:
    """``lightning-rlvr-sweep s.yaml`` in a forked child of this process (already imported: no startup)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.chdir(cwd)
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115
            from lightning_rlvr.experiments.sweep import run as sw
            from lightning_rlvr.experiments.sweep import runner

            runner.CLI_MODULE = "tests.test_faults_sweep"
            code = sw.main(["s.yaml", "--jobs", "1"])
        finally:
            os._exit(code)
    return pid


@pytest.mark.parametrize("orphan_dies", [True, False], ids=["fit-dies-with-sweep", "fit-escapes"])
def test_a_killed_sweep_leaves_no_writer_and_a_rerun_at_once_tests_its_own_fit(
    tmp_path, monkeypatch, orphan_dies
):
    """The fit dies with the killed sweep; and were one to escape, it still holds the run lock, so the
    rerun waits for it to end instead of deleting the folder under it (the issue's stale checkpoint)."""
    import lightning_rlvr.experiments.sweep.run  # noqa: F401 - imported once here, not in each forked sweep

    (tmp_path / "m.yaml").write_text("model: {lr: 1.0e-4}\n")
    (tmp_path / "s.yaml").write_text("out: out\ngrid:\n  config: [m.yaml]\n  seed_everything: [0]\n")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the stand-in runs as python -m tests.test_faults_sweep
    if not orphan_dies:
        monkeypatch.setenv("FAULT_ESCAPES", "1")
    run = tmp_path / "out" / "m__seed=0"
    pids = run / "fit_pids"
    first = _sweep(tmp_path)
    ckpt = run / "checkpoints" / "last.ckpt"
    assert _wait(lambda: ckpt.is_file() and int(ckpt.read_text().split()[1]) >= 3, 60), (
        "the fit never started"
    )
    orphan = int(pids.read_text().split()[0])
    os.kill(first, signal.SIGKILL)  # no handler runs: only the kernel can end the fit now
    os.waitpid(first, 0)
    if orphan_dies:
        assert _wait(lambda: not _alive(orphan), 2), "the killed sweep's fit outlived it"
    _, status = os.waitpid(_sweep(tmp_path), 0)  # rerun at once
    assert os.waitstatus_to_exitcode(status) == 0
    fits = [int(p) for p in pids.read_text().split()]
    assert len(fits) == 1 and fits[0] != orphan  # the folder was restarted, then written by one fit only
    assert (run / "tested.txt").read_text() == f"{fits[0]} {STEPS}"  # the rerun's own, finished checkpoint
    assert ckpt.read_text() == f"{fits[0]} {STEPS}"
    assert {line.split()[0] for line in (run / "writes").read_text().splitlines()} == {str(fits[0])}
    assert tmp_path / json.loads((run / "fit.done").read_text())["ckpt_path"] == ckpt  # what the fit reported


def test_the_trainer_cli_dies_with_its_parent_and_frees_its_checkpoint_folder(tmp_path):
    """The real ``lightning-rlvr fit`` started as a child that must die with its parent, parent SIGKILLed."""
    from lightning_rlvr.core.process import child_env, is_locked

    folder = tmp_path / "ckpts"
    configs = [
        "--config",
        str(REPO / "configs/quickstart.yaml"),
        "--config",
        str(REPO / "tests/configs/tiny.yaml"),
    ]
    fit = [
        sys.executable,
        "-m",
        "lightning_rlvr.cli",
        "fit",
        *configs,
        "--trainer.max_steps",
        "100000",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.logger",
        "false",
        "--checkpoint.dirpath",
        str(folder),
    ]
    read, write = os.pipe()
    parent = os.fork()
    if parent == 0:  # pragma: no cover - the parent of the fit, a child of pytest
        try:
            env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **child_env()}
            proc = subprocess.Popen(fit, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.write(write, b"%d\n" % proc.pid)
            proc.wait()
        finally:
            os._exit(0)
    child = int(os.read(read, 64))
    assert _wait(lambda: is_locked(folder / ".lock"), 120), "the fit never claimed its folder"
    os.kill(parent, signal.SIGKILL)
    os.waitpid(parent, 0)
    assert _wait(lambda: not _alive(child), 5), "the fit outlived its parent"
    # its leader shows as a zombie while its other threads still tear down; the kernel frees the lock
    # when the last of them has closed the file, a moment later
    assert _wait(lambda: not is_locked(folder / ".lock"), 5), "the dead fit still holds its folder"


if __name__ == "__main__":
    _fake_cli(sys.argv[1:])


def test_restoring_archived_runs_never_deletes_a_run_folder_a_live_process_holds(tmp_path, monkeypatch):
    from lightning_rlvr.core.process import locked
    from lightning_rlvr.experiments.sweep.archive import archive_dir, restore_runs
    from lightning_rlvr.experiments.sweep.spec import DONE, expand, load_sweep, lock_path, run_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text("model: {lr: 1.0e-4}\n")
    (tmp_path / "s.yaml").write_text("out: out\ngrid:\n  config: [m.yaml]\n  seed_everything: [0]\n")
    sweep = load_sweep("s.yaml")
    (run,) = expand(sweep)
    archived = archive_dir(sweep, run)
    archived.mkdir(parents=True)
    (archived / DONE).write_text("{}")  # finished on another machine
    partial = run_dir(sweep, run) / "partial.txt"
    partial.parent.mkdir(parents=True)
    partial.write_text("a fit in progress")
    for held in (lock_path(sweep, run), partial.parent / "checkpoints" / ".lock"):
        with locked(held) as f:
            assert f is not None
            assert restore_runs(sweep, [run]) == []
            assert partial.read_text() == "a fit in progress"
    assert restore_runs(sweep, [run]) == [run.run_id]  # nobody holds it: the archived run replaces it
    assert not partial.exists() and (run_dir(sweep, run) / DONE).is_file()
