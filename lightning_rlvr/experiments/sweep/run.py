"""``lightning-rlvr-sweep``: expand a sweep file into ``lightning-rlvr`` runs, run them, evaluate, report.

A sweep file (``sweeps/*.yaml``, parsed and expanded by ``sweep/spec.py``) gives a
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
``sweep/archive.py`` keeps each finished run's small files next to the report), a run whose fit
finished but whose test did not only reruns the test, anything else restarts
from an empty run directory (its seed makes the rerun identical). Each run records
its configs and overrides in ``spec.json``; a run finished under other ones than the
sweep file gives now (a per-method lr changed after tuning) is run again. Before the
runs, one warm-start-only fit (``trainer.max_steps=0``) per distinct warm-start
setting fills the on-disk warm-start cache, so concurrent runs never race on
writing it. Then ``sweep/report.py`` writes ``results.csv``, ``results.md`` and
``curves.png``.

Runs execute locally, ``--jobs N`` at a time, or on SLURM through ``submitit``
(imported only then): a thin launcher that submits each run as a job from the
login node, with no cluster runtime (as Ray would need) to stand up.

Layer: experiments. This module is the command line (``build_parser``, ``main``); the command lines of
the runs are built in ``sweep/commands.py`` and run in ``sweep/runner.py``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import re
import sys
from pathlib import Path

import yaml

from .archive import archive_run, not_in_sweep, restore_runs
from .checks import SweepError
from .commands import (
    check_overrides,
    fit_command,
    run_env,
    shell_line,
    test_command,
    warm_start_groups,
    warmup_command,
)
from .comparison import compare_to_baseline
from .identity import stale_configs
from .plan import Evidence, check_pilot, plan_text, read_rates
from .report import write_report
from .rows import read_results_csv
from .runner import (
    CommandRunner,
    is_done,
    pending,
    run_local,
    run_submitit,
    run_warmups,
    subprocess_runner,
)
from .spec import DONE, Sweep, expand, load_sweep, run_dir

log = logging.getLogger("lightning_rlvr.experiments.sweep.run")


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
            "  lightning-rlvr-sweep sweeps/methods_quickstart.yaml --report-only\n"
            "  lightning-rlvr-sweep sweeps/methods_real.yaml --plan --pilot sweeps/results/pilot/results.csv"
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
    plan = (
        "print, per claim and comparison, the verdict, the seeds that would decide at the report's power and "
        "their job time against report.budget_hours, from a pilot's results (--pilot) or this sweep's; "
        "runs nothing"
    )
    p.add_argument("--plan", action="store_true", help=plan)
    pilot = "a pilot's or finished sweep's results.csv for --plan (default: this sweep's report_dir)"
    p.add_argument("--pilot", default=None, metavar="RESULTS_CSV", help=pilot)
    return p


def console() -> int:
    """``lightning-rlvr-sweep``: ``main``, with Ctrl-C (or SIGINT from a scheduler) as one line and exit 130.

    The runs in flight die with the sweep (their fits hold no lock after it); finished runs are marked
    ``DONE``, and an interrupted fit resumes from its newest checkpoint when the sweep is run again.
    """
    try:
        return main()
    except KeyboardInterrupt:
        sys.stderr.write(
            "lightning-rlvr-sweep: interrupted; finished runs are kept, and running the same command again "
            "resumes the others (an interrupted fit from its newest checkpoint)\n"
        )
        return 130


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
    if args.pilot and not args.plan:
        sys.stderr.write("lightning-rlvr-sweep: error: --pilot is read by --plan only: add --plan\n")
        return 2
    if args.plan:
        return print_plan(sweep, args.pilot)
    runs = [r for r in all_runs if re.search(args.only, r.run_id)] if args.only else all_runs
    jobs = args.jobs or sweep.jobs
    # runs finished elsewhere, committed with the report: all of them, as the report covers every run
    # (with --only, restoring just the selected ones rewrote the committed report without the others)
    restored = restore_runs(sweep, all_runs)
    if restored:
        log.info("%d finished runs restored from %s", len(restored), sweep.report_dir / "runs")
    for run in runs:  # finished, but its overrides or config files say something else now: it runs again
        if (run_dir(sweep, run) / DONE).is_file() and not is_done(sweep, run):
            changed = stale_configs(sweep, run)
            what = (
                f"other contents of {', '.join(changed)}" if changed else "other overrides than the sweep's"
            )
            log.warning(
                "%s finished with %s: it runs again (the report leaves it out until then)", run.run_id, what
            )
    orphans = not_in_sweep(sweep, all_runs)
    if orphans:  # said once, so a rewritten report that lists fewer runs than the committed one says why
        log.warning(
            "%d archived runs in %s are no run of the sweep file now (a grid value or file renamed?); the "
            "report leaves them out, the archive keeps them: %s",
            len(orphans),
            sweep.report_dir / "runs",
            ", ".join(orphans[:10]) + (" ..." * (len(orphans) > 10)),
        )
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


def print_plan(sweep: Sweep, pilot: str | None) -> int:
    """``--plan``: the plan's text on stdout (0), or one error line on stderr (2)."""
    path = Path(pilot) if pilot else sweep.report_dir / "results.csv"
    try:
        if not path.is_file():
            raise ValueError("not found (give a results.csv with --pilot, or run the sweep first)")
        try:
            axes, rows = read_results_csv(path)
            columns = list(rows[0]) if rows else []
        except (OSError, UnicodeDecodeError, ValueError, csv.Error) as err:
            raise ValueError(f"not a results.csv ({err})") from None
        dirs = [path.parent / "runs", sweep.out, sweep.report_dir / "runs"]
        evidence = Evidence(axes, rows, sweep.report, read_rates(rows, dirs), sweep=sweep)
        check_pilot(axes, columns, rows, sweep.report, evidence)
        entries = compare_to_baseline(axes, rows, sweep.report)
    except ValueError as err:
        sys.stderr.write(f"lightning-rlvr-sweep: error: pilot {path}: {err}\n")
        return 2
    sys.stdout.write(plan_text(entries, evidence, f"`{path}` ({len(rows)} runs)", sweep.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
