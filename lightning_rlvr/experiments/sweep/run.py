"""``lightning-rlvr-sweep``: expand a sweep file into ``lightning-rlvr`` runs, run them, evaluate, report.

A sweep file (``sweeps/*.yaml``, parsed and expanded by ``sweep_spec``) gives a
grid of runs; each run is two ``lightning-rlvr`` subprocesses:

1. ``fit`` with its own logger, checkpoint and root directory ``<out>/<run_id>/``;
2. ``test --ckpt_path <the checkpoint the fit reports>`` (``<out>/<run_id>/checkpoints/last.ckpt``;
   the fit writes its path to ``fit.json``, so no file is picked by name), whose metrics are
   copied to ``<out>/<run_id>/test_metrics.json``.

Each run's lock (``<out>/.locks/<run_id>.lock``) is held by the runner *and* by the ``lightning-rlvr``
processes it starts (they inherit the locked file), and those processes die with the runner
(``core.process``): a killed sweep leaves no writer behind, and a rerun never deletes or writes
a run folder while any process of an earlier invocation still holds its lock.

Only after both succeed is ``<out>/<run_id>/DONE`` written, so an interrupted
sweep resumes where it stopped: finished runs are skipped (also on another machine:
``sweep_archive`` keeps each finished run's small files next to the report), a run whose fit
finished but whose test did not only reruns the test, anything else restarts
from an empty run directory (its seed makes the rerun identical). Each run records
its configs and overrides in ``spec.json``; a run finished under other ones than the
sweep file gives now (a per-method lr changed after tuning) is run again. Before the
runs, one warm-start-only fit (``trainer.max_steps=0``) per distinct warm-start
setting fills the on-disk warm-start cache, so concurrent runs never race on
writing it. Then ``sweep_report`` writes ``results.csv``, ``results.md`` and
``curves.png``.

Runs execute locally, ``--jobs N`` at a time, or on SLURM through ``submitit``
(imported only then): a thin launcher that submits each run as a job from the
login node, with no cluster runtime (as Ray would need) to stand up.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from ...core.files import write_text
from ...core.process import FIT_REPORT_ENV, child_env, locked
from .archive import archive_run, restore_runs
from .report import write_report
from .spec import (  # noqa: F401 - re-exported: the sweep API in one place
    CONFIG_AXIS,
    DONE,
    FIT_DONE,
    SPEC,
    TEST_METRICS,
    ReportSettings,
    Run,
    Sweep,
    SweepError,
    axis_label,
    expand,
    is_finished,
    load_sweep,
    lock_path,
    run_dir,
    run_spec,
)

log = logging.getLogger("lightning_rlvr.experiments.sweep.run")

PROGRAM = "lightning-rlvr"  # how commands are printed; they run as ``python -m lightning_rlvr.cli``
CLI_MODULE = "lightning_rlvr.cli"  # what ``subprocess_runner`` runs (the fault tests put a stand-in here)
# what the warm start depends on (it samples through the engine, on formatted prompts)
WARM_START_KEYS = (
    "model.policy",
    "model.task",
    "model.warm_start",
    "model.lora",
    "model.engine",
    "model.prompt_format",
)

FIT_REPORT = "fit.json"  # {"ckpt_path": the fit's last checkpoint, "global_step": ...}
LOCK_FD_ENV = "LIGHTNING_RLVR_RUN_LOCK_FD"  # the run lock's descriptor, passed on to the run's processes
LOCK_WAIT_S = 10.0  # a rerun right after a kill waits this long for the killed run's processes to end

# Runs ``lightning-rlvr <argv>``: (argv, log file, variables to set) -> exit code. Tests pass a fake one.
CommandRunner = Callable[[list[str], Path, dict[str, str]], int]


# ---------------------------------------------------------------------------- commands
def cli_value(value: Any) -> str:
    """A YAML value as one command-line token jsonargparse parses back to it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _override_args(overrides) -> list[str]:
    items = overrides.items() if isinstance(overrides, dict) else overrides
    return [tok for key, value in items for tok in (f"--{key}", cli_value(value))]


def _output_args(d: Path, version: str) -> list[str]:
    """Root, logger and progress-bar flags that keep a command's output in run directory ``d``."""
    return _override_args(
        {
            "trainer.default_root_dir": str(d),
            "trainer.logger.init_args.save_dir": str(d),
            "trainer.logger.init_args.name": "logs",
            "trainer.logger.init_args.version": version,  # logs/fit/metrics.csv, logs/test/metrics.csv
            "trainer.enable_progress_bar": False,  # the log is a file; the sweep shows the progress
        }
    )


def _config_args(run: Run) -> list[str]:
    return [tok for c in run.configs for tok in ("--config", c)] + _override_args(run.overrides)


def fit_command(sweep: Sweep, run: Run) -> list[str]:
    """``fit`` with the run's configs and overrides, writing only under the run directory."""
    d = run_dir(sweep, run)
    return [
        "fit",
        *_config_args(run),
        *_output_args(d, "fit"),
        "--checkpoint.dirpath",
        str(d / "checkpoints"),
    ]


def test_command(sweep: Sweep, run: Run, ckpt_path: str | None = None) -> list[str]:
    """``test`` of ``ckpt_path``, the checkpoint the run's fit reported (by default, where it will be)."""
    d = run_dir(sweep, run)
    ckpt = ["--ckpt_path", ckpt_path or str(d / "checkpoints" / "last.ckpt")]
    return ["test", *ckpt, *_override_args(sweep.test_overrides), *_output_args(d, "test")]


def _merged_config(run: Run) -> dict:
    """The run's config files merged left to right, then its dotted overrides (no class defaults)."""
    merged: dict = {}

    def merge(dst: dict, src: dict) -> None:
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = copy.deepcopy(v)

    for c in run.configs:
        merge(merged, yaml.safe_load(Path(c).read_text()) or {})
    for key, value in run.overrides:
        *parents, last = key.split(".")
        node = merged
        for k, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                section = ".".join(parents[: k + 1])
                raise SweepError(
                    f"run {run.run_id}: override {key} needs {section} to be a section, but the configs "
                    f"set {section}: {node!r}; override {section} itself or make it a mapping"
                )
        node[last] = value
    return merged


def check_overrides(runs: Sequence[Run]) -> None:
    """Raise ``SweepError`` if some run's dotted override lands under a non-mapping value."""
    for run in runs:
        _merged_config(run)


def warm_start_groups(runs: Sequence[Run]) -> dict[str, Run]:
    """One representative run per distinct warm-start setting (policy, task, warm start, LoRA).

    Runs whose merged YAML agrees on those sections load the same cached warm start;
    a run with ``model.warm_start: null`` (or none) needs none.
    """
    groups: dict[str, Run] = {}
    for run in runs:
        cfg = _merged_config(run)
        sections = []
        for dotted in WARM_START_KEYS:
            node: Any = cfg
            for p in dotted.split("."):
                node = node.get(p) if isinstance(node, dict) else None
            sections.append(node)
        if sections[2] is None:  # model.warm_start
            continue
        key = hashlib.sha1(json.dumps(sections, sort_keys=True, default=str).encode()).hexdigest()[:12]
        groups.setdefault(key, run)
    return groups


def warmup_command(sweep: Sweep, key: str, run: Run) -> list[str]:
    """A fit that stops before the first RL step: it only runs (and caches) the warm start."""
    d = sweep.out / "_warmup" / key
    no_output = {
        "trainer.logger": False,
        "trainer.enable_progress_bar": False,
        "trainer.default_root_dir": str(d),
    }
    no_output["checkpoint.dirpath"] = str(d / "checkpoints")
    return ["fit", *_config_args(run), "--trainer.max_steps", "0", *_override_args(no_output)]


def run_env(sweep: Sweep, jobs: int) -> dict[str, str]:
    """Variables set for every run on top of the environment it starts in: the sweep's ``env``,
    and unless given there or already set, one thread per run's share of the cores."""
    env = {}
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(jobs, 1)))
    return {**env, **sweep.env}


def shell_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + " ".join(shlex.quote(a) for a in [PROGRAM, *argv])


# ---------------------------------------------------------------------------- execution
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
    """The runs not done yet, in execution order: seed by seed, so a partial sweep covers every cell."""
    todo = [r for r in runs if not is_done(sweep, r)]
    seeds = list(dict.fromkeys(r.seed for r in todo))
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
    stale = (d / SPEC).is_file() and json.loads((d / SPEC).read_text()) != run_spec(run)
    if stale or not (d / FIT_DONE).is_file():
        if d.exists():  # an interrupted fit restarts from nothing (same seed, same result), and a run
            shutil.rmtree(d)  # done with other overrides than the sweep file's now is run again
        d.mkdir(parents=True)
        write_text(d / SPEC, json.dumps(run_spec(run), indent=1))
        code = runner(fit_command(sweep, run), d / "fit.log", {**env, FIT_REPORT_ENV: str(d / FIT_REPORT)})
        ckpt = _reported_checkpoint(d)
        if code != 0 or ckpt is None:
            return {**status, "stage": "fit", "code": code, "log": str(d / "fit.log")}
        write_text(d / FIT_DONE, json.dumps({"fit_s": round(time.time() - t0, 1), "ckpt_path": ckpt}))
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
                bar.set_postfix(failed=sum(not s["ok"] for s in results))

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


# ---------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightning-rlvr-sweep",
        description=(
            "Expand a sweep file (base configs + a grid of config files and dotted overrides) into\n"
            "`lightning-rlvr fit` runs, each in <out>/<run_id>/; evaluate each final checkpoint with\n"
            "`lightning-rlvr test`; write results.csv, results.md (mean and 95% t-interval over seeds)\n"
            "and curves.png. Finished runs (a DONE marker) are skipped, so rerunning resumes."
        ),
        epilog=(
            "examples:\n"
            "  lightning-rlvr-sweep sweeps/methods_quickstart.yaml --dry-run\n"
            "  lightning-rlvr-sweep sweeps/methods_quickstart.yaml --jobs 2\n"
            "  lightning-rlvr-sweep sweeps/methods_quickstart.yaml --launcher slurm "
            "--slurm slurm_partition=gpu --slurm timeout_min=120\n"
            "  lightning-rlvr-sweep sweeps/methods_quickstart.yaml --report-only"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sweep", help="sweep file (YAML); relative paths in it are relative to the current directory"
    )
    dry = "print the commands of the runs not yet done, one per line, and run nothing"
    p.add_argument("--dry-run", action="store_true", help=dry)
    p.add_argument(
        "--jobs", "-j", type=int, default=None, help="runs at once locally (default: the file's jobs)"
    )
    p.add_argument(
        "--out", default=None, help="output directory (default: the file's out, or runs/sweeps/<name>)"
    )
    launcher = "local subprocesses, or submitit on SLURM (debug: submitit, in this process)"
    p.add_argument("--launcher", choices=["local", "slurm", "debug"], default="local", help=launcher)
    slurm = (
        "a submitit parameter over the file's slurm: section, repeatable (timeout_min=60, slurm_partition=x)"
    )
    p.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE", help=slurm)
    p.add_argument("--only", default=None, metavar="REGEX", help="only runs whose id matches this regex")
    p.add_argument("--report-only", action="store_true", help="only (re)write the report from finished runs")
    return p


def main(argv: list[str] | None = None, runner: CommandRunner = subprocess_runner) -> int:
    """Console entry point; returns 0 when every run finished, 1 when some failed, 2 on a bad sweep file.

    ``runner`` runs each ``lightning-rlvr`` command locally (tests pass a fake one).
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        sweep = load_sweep(args.sweep, args.out)
        all_runs = expand(sweep)
        check_overrides(all_runs)
    except SweepError as err:
        sys.stderr.write(f"lightning-rlvr-sweep: error: {err}\n")
        return 2
    runs = [r for r in all_runs if re.search(args.only, r.run_id)] if args.only else all_runs
    jobs = args.jobs or sweep.jobs
    restored = restore_runs(sweep, runs)  # runs finished elsewhere, committed with the report
    if restored:
        log.info("%d finished runs restored from %s", len(restored), sweep.report_dir / "runs")
    if args.dry_run:  # what a real invocation would run now: finished runs are left out
        env, todo = run_env(sweep, jobs), pending(sweep, runs)
        if len(todo) < len(runs):
            sys.stderr.write(f"{len(runs) - len(todo)} of {len(runs)} runs already done; not shown\n")
        for key, run in warm_start_groups(todo).items():
            print(shell_line(warmup_command(sweep, key, run), env))
        for run in todo:
            print(shell_line(fit_command(sweep, run), env))
            print(shell_line(test_command(sweep, run), env))
        return 0
    if not args.report_only:
        todo = pending(sweep, runs)
        done = len(runs) - len(todo)
        log.info(
            "sweep %s: %d runs, %d done, %d to run in %s", sweep.name, len(runs), done, len(todo), sweep.out
        )
        env = run_env(sweep, jobs)
        sweep.out.mkdir(parents=True, exist_ok=True)
        if todo and args.launcher == "local":
            if not run_warmups(sweep, todo, env, runner):
                return 1
            run_local(sweep, todo, jobs, env, runner)
        elif todo:
            params = dict(kv.split("=", 1) for kv in args.slurm)
            params = {k: yaml.safe_load(v) for k, v in params.items()}
            first = list(warm_start_groups(todo).values())  # these fill the warm-start cache first
            run_submitit(sweep, first, env, args.launcher, params, runner)
            run_submitit(sweep, [r for r in todo if r not in first], env, args.launcher, params, runner)
    for run in all_runs:  # files added to a done run since (a credit_eval.csv) join its archive
        if is_done(sweep, run):
            archive_run(sweep, run)
    paths = write_report(sweep, all_runs)
    for p in paths:
        log.info("wrote %s", p)
    failed = [r.run_id for r in runs if not is_done(sweep, r)]
    if failed:
        log.warning("%d of %d runs not finished: %s", len(failed), len(runs), ", ".join(failed[:10]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
