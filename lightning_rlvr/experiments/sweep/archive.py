"""A sweep's finished runs, kept small next to its report so a sweep resumes on another machine.

A run directory under ``out`` (ignored by git) holds checkpoints and logs, tens of MB a run.
What the report reads is much smaller: the run's ``spec.json``, its ``fit.done`` and ``DONE``
markers, ``test_metrics.json``, the fit's ``metrics.csv`` files, every evaluation's per-prompt results
(``logs/*/per_prompt/*.csv.gz``: the report's prompt-level section reads them) and, once the credit lab
has scored the final checkpoint, ``credit_eval.csv``. ``archive_run`` copies exactly those into
``<report_dir>/runs/<run_id>/`` once a run is done, and again whenever the report is written (so a
later ``credit_eval.csv`` is kept too); committed with the report, they let
a sweep interrupted by the end of a session continue on a fresh clone: ``restore_runs`` copies an
archived run back into an empty run directory before the sweep decides what is left to run, so it
counts as done (its recorded spec still has to match the sweep file's, as for any finished run).

What is lost is what needs the checkpoint: a restored run cannot be re-tested or scored by the
credit lab. Its report row keeps the metrics recorded when it ran.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from ...core.files import atomic_dir, write_bytes
from ...core.per_prompt import FOLDER, SUFFIX
from ...core.process import LOCK_NAME, is_locked
from .settings import RESOLVED
from .spec import (
    CREDIT_EVAL,
    CREDIT_TABLE,
    DONE,
    FIT_DONE,
    SPEC,
    TEST_METRICS,
    Run,
    Sweep,
    lock_path,
    run_dir,
)

ARCHIVE = "runs"  # under the sweep's report_dir
# DONE is copied last: a half-copied run is not done
MARKERS = (SPEC, FIT_DONE, TEST_METRICS, CREDIT_EVAL, CREDIT_TABLE)


def archive_dir(sweep: Sweep, run: Run) -> Path:
    return sweep.report_dir / ARCHIVE / run.run_id


def _kept_files(directory: Path) -> list[Path]:
    """The files of a run directory the report reads (and the credit lab's readable table, the
    per-prompt results, and the resolved config that tells a rewritten config file from a changed
    run), relative to it (``DONE`` last)."""
    files = [Path(name) for name in MARKERS if (directory / name).is_file()]
    files += sorted(p.relative_to(directory) for p in (directory / "logs" / "fit").rglob("metrics.csv"))
    files += [RESOLVED] if (directory / RESOLVED).is_file() else []  # the settings it ran with
    files += sorted(p.relative_to(directory) for p in (directory / "logs").glob(f"*/{FOLDER}/*{SUFFIX}"))
    return files + ([Path(DONE)] if (directory / DONE).is_file() else [])


def _copy(src: Path, dst: Path, files: Iterable[Path]) -> None:
    for rel in files:  # each file whole (atomic), DONE last
        write_bytes(dst / rel, (src / rel).read_bytes())


def archive_run(sweep: Sweep, run: Run) -> Path:
    """Copy a done run's report files to ``<report_dir>/runs/<run_id>/``, replacing an older copy in one
    rename (a killed archive leaves the old copy or the new one)."""
    src, dst = run_dir(sweep, run), archive_dir(sweep, run)
    with atomic_dir(dst) as tmp:
        _copy(src, tmp, _kept_files(src))
    return dst


def not_in_sweep(sweep: Sweep, runs: Iterable[Run]) -> list[str]:
    """Archived finished runs whose id names no run of ``runs`` (a grid value or file renamed since):
    the report cannot show them, and the archive keeps them."""
    ids = {run.run_id for run in runs}
    archived = (sweep.report_dir / ARCHIVE).glob(f"*/{DONE}")
    return sorted(p.parent.name for p in archived if p.parent.name not in ids)


def restore_runs(sweep: Sweep, runs: Iterable[Run]) -> list[str]:
    """Copy archived runs into run directories that lack a finished run; returns their ids.

    A run directory that already holds a finished run (``DONE``) is left alone; one holding an
    unfinished fit is replaced by the archived, finished run.
    """
    restored = []
    for run in runs:
        src, dst = archive_dir(sweep, run), run_dir(sweep, run)
        if not (src / DONE).is_file() or (dst / DONE).is_file():
            continue
        if is_locked(lock_path(sweep, run)) or is_locked(dst / "checkpoints" / LOCK_NAME):
            continue  # another invocation is running it: never delete a folder a live process holds
        if dst.exists():
            shutil.rmtree(dst)
        _copy(src, dst, _kept_files(src))
        restored.append(run.run_id)
    return restored
