"""Running a sweep's runs: each run's fit and test subprocesses under its lock, locally or on SLURM.

Layer: experiments (imports ``core``, ``sweep/spec.py``, ``sweep/archive.py`` and ``sweep/commands.py``).
``execute_run`` holds the run's lock (``run_lock``, inherited by the run's processes through
``LOCK_FD_ENV``), fits unless an earlier fit finished, tests the checkpoint the fit reported
(``FIT_REPORT``), then writes ``DONE`` and archives the run; ``run_warmups`` fills the warm-start cache
first; ``run_local`` (``--jobs`` threads) and ``run_submitit`` (SLURM) run the queue.
``subprocess_runner`` starts ``python -m CLI_MODULE``: tests patch ``CLI_MODULE`` and ``LOCK_WAIT_S``
here, where they are read. ``sweep/run.py`` is the command line.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...core.files import write_text
from ...core.process import FIT_REPORT_ENV, child_env, locked
from .archive import archive_run
from .commands import fit_command, shell_line, test_command, warm_start_groups, warmup_command
from .identity import is_finished, run_spec, same_settings, same_spec
from .resume import fit_seconds_before, interrupted_fit, set_aside_logs
from .spec import (
    DONE,
    FIT_DONE,
    SPEC,
    TEST_METRICS,
    Run,
    Sweep,
    lock_path,
    run_dir,
)

log = logging.getLogger("lightning_rlvr.experiments.sweep.run")  # the sweep's one log, as run.py's

CLI_MODULE = "lightning_rlvr.cli"  # what ``subprocess_runner`` runs (the fault tests put a stand-in here)
STARTED = "fit.started"  # its mtime: when the fit (or its latest resumed part) began
FIT_REPORT = "fit.json"  # {"ckpt_path": the fit's last checkpoint, "global_step": ...}
LOCK_FD_ENV = "LIGHTNING_RLVR_RUN_LOCK_FD"  # the run lock's descriptor, passed on to the run's processes
LOCK_WAIT_S = 10.0  # a rerun right after a kill waits this long for the killed run's processes to end

# Runs ``lightning-rlvr <argv>``: (argv, log file, variables to set) -> exit code. Tests pass a fake one.
CommandRunner = Callable[[list[str], Path, dict[str, str]], int]


def subprocess_runner(argv: list[str], log_path: Path, env: dict[str, str]) -> int:
    """Run ``lightning-rlvr <argv>`` in this interpreter, stdout and stderr to ``log_path``.

    The child dies with this process (``child_env``), and holds the run lock too when ``env`` names its
    descriptor (``LOCK_FD_ENV``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lock_fd = env.get(LOCK_FD_ENV)
    with open(log_path, "w") as f:
        f.write(shell_line(argv) + "\n")
        f.flush()
        cmd = [sys.executable, "-m", CLI_MODULE, *argv]
        full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **env, **child_env()}
        fds = (int(lock_fd),) if lock_fd else ()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=full_env, pass_fds=fds).returncode


def read_test_metrics(directory: Path) -> dict[str, float]:
    """The ``test/*`` metrics the test logger wrote under ``directory/logs/test``."""
    metrics: dict[str, float] = {}
    for path in sorted((directory / "logs" / "test").rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                metrics.update({k: float(v) for k, v in row.items() if k.startswith("test/") and v})
    return metrics


def is_done(sweep: Sweep, run: Run) -> bool:
    return is_finished(sweep, run)


def pending(sweep: Sweep, runs: Sequence[Run]) -> list[Run]:
    """The runs not done yet, in execution order: seed by seed in the grid's seed order, so a partial
    sweep covers every cell and a seed some of whose runs finished earlier is completed first."""
    todo = [r for r in runs if not is_done(sweep, r)]
    seeds = list(dict.fromkeys(r.seed for r in runs))
    return sorted(todo, key=lambda r: seeds.index(r.seed))


@contextlib.contextmanager
def run_lock(sweep: Sweep, run: Run):
    """Hold an exclusive lock on ``run`` (yields the locked file, or None if another process holds it).

    Two sweep invocations on one output directory (a second terminal, a relaunch while the first still
    runs) would otherwise run the same run at once, and the second would delete the first's unfinished
    directory under it. The lock file lives beside the run directory, which a restart removes. The
    run's own processes inherit the locked file (``LOCK_FD_ENV``), so the lock is free only once every
    writer of the run has ended; a rerun waits ``LOCK_WAIT_S`` for a killed run's processes to go."""
    with locked(lock_path(sweep, run), LOCK_WAIT_S) as f:
        yield f


def execute_run(
    sweep: Sweep, run: Run, env: dict[str, str], runner: CommandRunner = subprocess_runner
) -> dict:
    """Fit (unless a previous fit finished), test, then mark the run done; returns its status.
    A run another process is running is left to it (status stage "busy")."""
    with run_lock(sweep, run) as lock:
        if lock is None:
            return {"run_id": run.run_id, "ok": False, "stage": "busy", "log": str(lock_path(sweep, run))}
        if is_done(sweep, run):  # the other process finished it while this one waited in the queue
            return {"run_id": run.run_id, "ok": True, **json.loads((run_dir(sweep, run) / DONE).read_text())}
        return _execute_run(sweep, run, {**env, LOCK_FD_ENV: str(lock.fileno())}, runner)


def _execute_run(sweep: Sweep, run: Run, env: dict[str, str], runner: CommandRunner) -> dict:
    d = run_dir(sweep, run)
    t0 = time.time()
    status: dict[str, Any] = {"run_id": run.run_id, "ok": False}
    recorded = json.loads((d / SPEC).read_text()) if (d / SPEC).is_file() else None
    same = recorded is not None and (
        same_spec(recorded, run_spec(run)) or same_settings(sweep, run, recorded)
    )
    if not (same and (d / FIT_DONE).is_file()):
        command = fit_command(sweep, run)
        found = interrupted_fit(d) if same else None
        if found is not None:  # an interrupted fit continues from its newest checkpoint (resume.py)
            ckpt, step = found
            began = (d / STARTED).stat().st_mtime if (d / STARTED).is_file() else (d / SPEC).stat().st_mtime
            set_aside_logs(d, ckpt, step, started=began)
            command += ["--ckpt_path", str(ckpt)]
            _log_fit_resumed(run, step, d / "fit.log")
        else:  # one that never checkpointed restarts from nothing (same seed, same result), and a run
            if d.exists():  # done with other overrides than the sweep file's now is run again
                shutil.rmtree(d)
            d.mkdir(parents=True)
            write_text(d / SPEC, json.dumps(run_spec(run), indent=1))
        write_text(d / STARTED, "")  # its modification time is when this part of the fit began
        code = runner(command, d / "fit.log", {**env, FIT_REPORT_ENV: str(d / FIT_REPORT)})
        ckpt = _reported_checkpoint(d)
        if code != 0 or ckpt is None:
            return {**status, "stage": "fit", "code": code, "log": str(d / "fit.log")}
        fit_s = fit_seconds_before(d) + time.time() - t0
        write_text(d / FIT_DONE, json.dumps({"fit_s": round(fit_s, 1), "ckpt_path": ckpt}))
    t1 = time.time()
    if (d / "logs" / "test").exists():
        shutil.rmtree(d / "logs" / "test")
    ckpt = json.loads((d / FIT_DONE).read_text()).get("ckpt_path")
    code = runner(test_command(sweep, run, ckpt), d / "test.log", env)
    metrics = read_test_metrics(d) if code == 0 else {}
    if code != 0 or not metrics:
        return {**status, "stage": "test", "code": code, "log": str(d / "test.log")}
    write_text(d / TEST_METRICS, json.dumps(metrics, indent=1, sort_keys=True))
    fit_s = json.loads((d / FIT_DONE).read_text()).get("fit_s")
    done = {"fit_s": fit_s, "test_s": round(time.time() - t1, 1), "seed": run.seed, "cell": dict(run.cell)}
    write_text(d / DONE, json.dumps(done, indent=1))
    archive_run(sweep, run)  # the report's inputs, kept next to the report so another machine resumes
    return {**status, "ok": True, **done}


def _reported_checkpoint(d: Path) -> str | None:
    """The checkpoint the fit in run folder ``d`` reported (``fit.json``), if it is a file of that run."""
    try:
        ckpt = Path(json.loads((d / FIT_REPORT).read_text())["ckpt_path"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    inside = ckpt.resolve().is_relative_to((d / "checkpoints").resolve())
    return str(ckpt) if inside and ckpt.is_file() else None


def run_warmups(
    sweep: Sweep, runs: Sequence[Run], env: dict[str, str], runner: CommandRunner = subprocess_runner
) -> bool:
    """Fill the warm-start cache once per distinct setting, one at a time, before any run starts.

    Each invocation runs them again (a cached warm start only loads, a few seconds), so a
    deleted cache never lets concurrent runs race to write it. Returns False if one failed.
    """
    for key, run in warm_start_groups(runs).items():
        log_path = sweep.out / "_warmup" / f"{key}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("warm start %s (as in %s) ...", key, run.run_id)
        t0 = time.time()
        code = runner(warmup_command(sweep, key, run), log_path, env)
        if code != 0:
            log.error("the warm-start job failed (exit %s); see %s", code, log_path)
            return False
        log.info("warm start %s ready in %.0f s", key, time.time() - t0)
    return True


def run_local(
    sweep: Sweep,
    runs: Sequence[Run],
    jobs: int,
    env: dict[str, str],
    runner: CommandRunner = subprocess_runner,
) -> list[dict]:
    """Run ``runs`` in order, ``jobs`` at a time on this machine; progress bar and one log line per run.

    If a run raises (an interrupt), no further run starts; the ones in progress end with their
    processes, and the exception is raised again here.
    """
    from tqdm.auto import tqdm

    queue, results, errors = list(runs), [], []
    lock, stop = threading.Lock(), threading.Event()
    bar = tqdm(total=len(runs), desc=sweep.name)

    def worker() -> None:
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                run = queue.pop(0)
            try:
                status = execute_run(sweep, run, env, runner)
            except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
                errors.append(err)
                stop.set()
                return
            with lock:
                results.append(status)
                _log_status(status)
                bar.update(1)
                bar.set_postfix(progress_counts(results))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)  # wake up for Ctrl-C
    except BaseException:
        stop.set()
        raise
    finally:
        bar.close()
    if errors:
        raise errors[0]
    return results


def run_submitit(
    sweep: Sweep,
    runs: Sequence[Run],
    env: dict[str, str],
    cluster: str,
    params: dict[str, Any],
    runner: CommandRunner = subprocess_runner,
) -> list[dict]:
    """Submit one job per run through ``submitit`` (SLURM, or ``debug`` to run them here) and wait."""
    if not runs:
        return []
    import submitit  # only needed on a cluster

    executor = submitit.AutoExecutor(folder=str(sweep.out / "_submitit"), cluster=cluster)
    executor.update_parameters(**{**sweep.slurm, **params})
    with executor.batch():
        jobs = [executor.submit(execute_run, sweep, run, env, runner) for run in runs]
    log.info("submitted %d jobs to %s (logs under %s)", len(jobs), cluster, sweep.out / "_submitit")
    results = []
    for job, run in zip(jobs, runs):
        try:
            status = job.result()
        except Exception as err:  # noqa: BLE001 - a failed job is reported, the sweep goes on
            status = {"run_id": run.run_id, "ok": False, "stage": "job", "code": str(err)[:200]}
        results.append(status)
        _log_status(status)
    return results


def progress_counts(results: list[dict]) -> dict[str, int]:
    """The progress bar's counts: runs that failed, and runs left to another sweep process (busy),
    which have not failed; a count is shown once it is non-zero."""
    busy = sum(s.get("stage") == "busy" for s in results)
    failed = sum(not s["ok"] for s in results) - busy
    return {k: v for k, v in (("failed", failed), ("skipped (another sweep runs them)", busy)) if v}


def _log_fit_resumed(run: Run, step: int, fit_log: Path) -> None:
    log.info("%s: its fit was interrupted; resuming from its checkpoint at step %d", run.run_id, step)
    if fit_log.is_file():  # the interrupted part's log stays readable beside the resumed one
        fit_log.rename(fit_log.with_name(f"fit.until_step_{step}.log"))


def _log_status(status: dict) -> None:
    if status["ok"]:
        log.info("%s done (fit %ss, test %ss)", status["run_id"], status["fit_s"], status["test_s"])
    elif status.get("stage") == "busy":
        log.warning(
            "%s skipped: another lightning-rlvr-sweep is running it (lock %s)",
            status["run_id"],
            status["log"],
        )
    else:
        log.warning(
            "%s FAILED in %s (exit %s); see %s",
            status["run_id"],
            status.get("stage"),
            status.get("code"),
            status.get("log"),
        )
