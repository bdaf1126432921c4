"""An interrupted run's fit continues from its newest intact checkpoint instead of starting over.

Layer: experiments (imports ``checkpoint_files`` and ``core``). A real-model run takes 20-70 minutes, so a
sweep stopped by the end of a working session (or a kill, or a reboot) would otherwise lose up to one
run per job. ``runner._execute_run`` asks ``interrupted_fit`` whether a run folder (same spec, fit not
done) holds a loadable checkpoint past step 0; if so it calls ``set_aside_logs`` and runs the fit with
``--ckpt_path`` that file, which resumes exactly (weights, optimiser, RNG and data stream state).

The logs. Lightning's CSV logger deletes the ``metrics.csv`` it finds, so the interrupted part's file is
moved to ``logs/fit/0_until_step_<s>/metrics.csv`` first, keeping only rows logged at steps before the
checkpoint's global step s (Lightning logs train step k, 0-based, at step k, and the validation after
it at step k too; the resumed fit logs steps s, s+1, ...). Readers take ``logs/fit/**/metrics.csv``
in sorted order, and ``0_...`` sorts before ``metrics.csv``, so curves read in training order.
A fit resumed from step s and killed again before its next checkpoint finds the part for s already
there: its rows stay (the resumed part's rows are all at s or later, and are dropped).

The clock. ``fit_s`` of a resumed run is the seconds the interrupted part needed to reach its
checkpoint (the checkpoint's time minus the run's start, summed over resumptions in ``FIT_BEFORE``)
plus the resumed part's; work after the checkpoint is lost and done again, so it is not counted.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import torch

from ...checkpoint_files import checkpoint_problem
from ...core.files import write_text

FIT_BEFORE = "fit_before.json"  # {"seconds": ..., "resumed_at": [steps]}: earlier parts of an interrupted fit
PART = "0_until_step_{step:07d}"  # sorts before the live metrics.csv and in step order among parts


def interrupted_fit(directory: Path) -> tuple[Path, int] | None:
    """The newest loadable checkpoint of an interrupted fit in ``directory`` and its global step, or None
    (no checkpoint, none loadable, or only step 0: nothing to gain over starting again)."""
    folder = directory / "checkpoints"
    if not folder.is_dir():
        return None
    files = sorted(
        (p for p in folder.iterdir() if p.suffix == ".ckpt" and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in files:
        if checkpoint_problem(path) is None:
            ckpt = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
            step = int(ckpt.get("global_step", 0))
            return (path, step) if step > 0 else None
    return None


def set_aside_logs(directory: Path, checkpoint: Path, step: int, started: float) -> None:
    """Move the interrupted part's fit metrics out of the logger's way (rows before ``step`` only) and
    add its seconds up to ``checkpoint`` (the run started at ``started``, a timestamp) to ``FIT_BEFORE``."""
    live = directory / "logs" / "fit" / "metrics.csv"
    if live.is_file():
        part = live.parent / PART.format(step=step) / "metrics.csv"
        # a part for this step is already there when a resumed fit was killed before its next checkpoint:
        # its rows stay, and the resumed part adds its rows before the step (none, normally)
        fields, rows = _read_rows(part) if part.is_file() else ([], [])
        new_fields, new_rows = _read_rows(live)
        fields += [k for k in new_fields if k not in fields]
        seen = {_row_key(r) for r in rows}  # a kill between writing the part and removing the live file
        rows += [r for r in new_rows if int(float(r.get("step") or 0)) < step and _row_key(r) not in seen]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n", restval="")
        writer.writeheader()
        writer.writerows(rows)
        part.parent.mkdir(parents=True, exist_ok=True)
        write_text(part, out.getvalue())
        live.unlink()
    before = fit_seconds_before(directory)
    resumed = json.loads((directory / FIT_BEFORE).read_text())["resumed_at"] if before else []
    seconds = before + max(0.0, checkpoint.stat().st_mtime - started)
    record = {"seconds": round(seconds, 1), "resumed_at": [*resumed, step]}
    (directory / FIT_BEFORE).write_text(json.dumps(record))


def _read_rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _row_key(row: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in row.items() if v not in ("", None)))


def fit_seconds_before(directory: Path) -> float:
    """Seconds the earlier, interrupted parts of this run's fit spent up to their checkpoints (0: none)."""
    path = directory / FIT_BEFORE
    return float(json.loads(path.read_text())["seconds"]) if path.is_file() else 0.0
