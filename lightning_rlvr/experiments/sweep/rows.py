"""A finished run as a row: its metrics read back from the files it wrote (``results.csv``'s rows).

Layer: ``experiments`` (reads files only, so a report can be rewritten while a sweep still runs).
A row has ``run_id``, one column per grid axis, ``seed``, test pass@k from the final checkpoint, val
pass@1 before RL and at the last validation, the train reward averaged over the last ``TAIL`` steps, the
RL steps to the report's target accuracy, those steps x the cell's idle per-step cost (``report.step_cost_s``)
and the training seconds as measured under the sweep's own load (each also at the last validation, for a
run that never reached it), the fit time, and the credit lab's columns when the run has a
``credit_eval.csv``. A cell (a combination of axis values) is named by ``cell_label``.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from ...core.files import atomic_file
from ..stats import time_to_reach
from .identity import is_finished
from .spec import CREDIT_EVAL, DONE, TEST_METRICS, Run, Sweep, run_dir

TAIL = 10  # steps averaged for the final train reward
STEP_TIME_KEYS = ("time/rollout_s", "time/score_s", "time/credit_s", "time/update_s")  # one RL step
REWARD = "train/reward_mean"  # logged once per RL step: its rows count the steps
# credit_eval.csv metrics (``experiments.credit_lab.evaluate.write_csv`` writes each as ``<name>_mean`` etc.)
CREDIT_COLUMNS = ("spearman", "localisation", "sign")
TIME_TO_TARGET = "time_to_target_s"  # loaded seconds: what else the machine ran is in them
TIME_CAP = "train_s_at_last_val"  # a run that never reached the target: its training seconds at its end
# RL steps to the target: what wall time measures, without the load of whatever else the machine ran
STEPS_TO_TARGET = "steps_to_target"
STEPS_CAP = "steps_at_last_val"
# the steps x the cell's per-step cost measured alone on the machine (report.step_cost_s)
IDLE_TO_TARGET = "idle_time_to_target_s"
IDLE_CAP = "idle_s_at_last_val"
# each to-target metric: its cap, in the order the report shows them
TO_TARGET = {STEPS_TO_TARGET: STEPS_CAP, IDLE_TO_TARGET: IDLE_CAP, TIME_TO_TARGET: TIME_CAP}
TO_TARGET_TITLES = {STEPS_TO_TARGET: "RL steps", IDLE_TO_TARGET: "idle s", TIME_TO_TARGET: "loaded s"}
START = "val/pass@1_start"  # val pass@1 before RL: which warm start a run began from
# (results.csv column, table header, decimals); test/pass@k columns are added as found
SUMMARY = [
    ("val/pass@1_final", "val pass@1 (last)", 3),
    ("train/reward_last", f"train reward (last {TAIL} steps)", 3),
    *((f"credit_eval/{c}", f"credit {c}", 3) for c in CREDIT_COLUMNS),
    ("fit_s", "fit time (s)", 0),
]


def read_fit_metrics(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every logged metric of the run's fit as (step, value) pairs, in logging order."""
    series: dict[str, list[tuple[int, float]]] = {}
    for path in sorted((directory / "logs" / "fit").rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                step = int(float(row.get("step") or 0))
                for key, value in row.items():
                    if key not in ("step", "epoch") and value not in ("", None):
                        series.setdefault(key, []).append((step, float(value)))
    return series


def training_curve(directory: Path) -> list[tuple[float, int, float]]:
    """(training seconds so far, RL steps so far, val pass@1) at each validation of the run's fit, in
    logging order.

    The seconds are the summed step times (``STEP_TIME_KEYS``) of the RL steps logged before the
    validation's row; the steps count the rows with a ``REWARD``. File order, not the step column,
    decides: Lightning logs a validation after steps 0..s at step s, the same step as the last training
    row, and the one before RL at step 0.
    """
    out, total, steps = [], 0.0, 0
    for path in sorted((directory / "logs" / "fit").rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                total += sum(float(row[k]) for k in STEP_TIME_KEYS if row.get(k) not in ("", None))
                steps += row.get(REWARD) not in ("", None)
                if row.get("val/pass@1") not in ("", None):
                    out.append((total, steps, float(row["val/pass@1"])))
    return out


def read_credit_eval(directory: Path, method: str | None = None) -> dict[str, float]:
    """``credit_eval/<column>``: the mean over rows of each ``CREDIT_COLUMNS`` metric's ``<column>_mean``
    in the run's credit_eval.csv (as ``lightning-rlvr-credit-eval`` writes it).

    Rows whose ``method`` column names ``method`` are used when there are any (a file that evaluated
    several methods on the checkpoint), else all rows. Empty when the file or the columns are absent.
    """
    path = directory / CREDIT_EVAL
    if not path.is_file():
        return {}
    with open(path) as f:
        rows = list(csv.DictReader(f))
    mine = [r for r in rows if method is not None and r.get("method") == method]
    rows = mine or rows
    out = {}
    for column in CREDIT_COLUMNS:
        values = []
        for r in rows:
            try:
                values.append(float(r.get(f"{column}_mean") or "nan"))
            except ValueError:
                continue
        values = [v for v in values if math.isfinite(v)]
        if values:
            out[f"credit_eval/{column}"] = sum(values) / len(values)
    return out


def run_row(sweep: Sweep, run: Run) -> dict | None:
    """The results.csv row of a finished run (None if it has not finished)."""
    d = run_dir(sweep, run)
    if not is_finished(sweep, run):  # not finished, or finished with other overrides than the sweep's now
        return None
    done = json.loads((d / DONE).read_text())
    series = read_fit_metrics(d)
    val = series.get("val/pass@1", [])
    reward = [v for _, v in series.get(REWARD, [])]
    row = {"run_id": run.run_id, **dict(run.cell), "seed": run.seed if run.seed is not None else ""}
    row.update(json.loads((d / TEST_METRICS).read_text()))
    row[START] = val[0][1] if val and val[0][0] == 0 else ""
    row["val/pass@1_final"] = val[-1][1] if val else ""
    row["train/reward_last"] = sum(reward[-TAIL:]) / len(reward[-TAIL:]) if reward else ""
    row["steps"] = len(reward)
    target = sweep.report.target_accuracy
    if target is not None:
        curve = training_curve(d)
        for i, metric in ((1, STEPS_TO_TARGET), (0, TIME_TO_TARGET)):  # whole steps, seconds to a tenth
            reached = time_to_reach([(c[i], c[2]) for c in curve], target)
            row[metric] = "" if math.isnan(reached) else round(reached, 1) if i == 0 else int(reached)
            row[TO_TARGET[metric]] = round(curve[-1][i], 1) if curve else ""
        cost = step_cost(sweep.report.step_cost_s, run)
        if cost is not None:  # steps x the idle per-step cost, reached or capped
            for metric, steps in ((IDLE_TO_TARGET, STEPS_TO_TARGET), (IDLE_CAP, STEPS_CAP)):
                row[metric] = "" if row[steps] == "" else round(float(row[steps]) * cost, 1)
    row.update(read_credit_eval(d, dict(run.cell).get("method")))
    row["fit_s"] = done.get("fit_s", "")
    row["test_s"] = done.get("test_s", "")
    return row


def step_cost(costs: dict[str, float], run: Run) -> float | None:
    """The idle seconds per RL step ``report.step_cost_s`` gives the run's cell: the cost of the first of
    its axis values that has one (None when none has)."""
    return next((costs[value] for _, value in run.cell if value in costs), None)


def _value_or_cap(row: dict, metric: str) -> tuple[float, bool] | None:
    """(seconds or steps to the target, True), or (those at the last validation, False) if never."""
    for key, reached in ((metric, True), (TO_TARGET[metric], False)):
        if row.get(key) not in ("", None):
            return float(row[key]), reached
    return None


def to_target(
    cell: dict[str, dict], base: dict[str, dict], metric: str = TIME_TO_TARGET
) -> tuple[dict, dict, int]:
    """Training seconds (or steps: ``metric``, a ``TO_TARGET`` key) to the target by seed, for a cell's
    runs and the baseline's ({seed: row} each).

    A run that never reached the target counts its training seconds at its last validation: a lower
    bound on its time, so a pair holding one can only understate that run's deficit (censored at the
    run's end, as a restricted mean time does). Leaving such seeds out instead would compare a method
    only on the seeds where it succeeded. Seeds where neither run reached it say nothing about speed and
    are left out. Returns (the cell's values, the baseline's, how many pairs hold a capped one).
    """
    x: dict[str, float] = {}
    y: dict[str, float] = {}
    capped = 0
    for seed in [s for s in cell if s in base]:
        a, b = _value_or_cap(cell[seed], metric), _value_or_cap(base[seed], metric)
        if a is None or b is None or not (a[1] or b[1]):
            continue
        x[seed], y[seed] = a[0], b[0]
        capped += not (a[1] and b[1])
    return x, y, capped


def duration(seconds: float) -> str:
    """Seconds as a reader wants them: "75 s", "42 min", "9.8 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def job_seconds(row: dict) -> float:
    """A finished run's job time: its fit and test seconds (its ``DONE``)."""
    return sum(float(row[k]) for k in ("fit_s", "test_s") if row.get(k) not in ("", None))


def compute_line(rows: list[dict], runs: Sequence[Run] = ()) -> str:
    """What the finished runs cost (their fit and test seconds, summed) and, while ``runs`` has some not
    finished, what those would cost at the mean job time of their cell's finished runs (of all finished
    runs where their cell has none). "If run": a rate rule may never ask for some of them."""
    fit, test = (sum(float(r[k]) for r in rows if r.get(k) not in ("", None)) for k in ("fit_s", "test_s"))
    text = (
        f"Compute: {duration(fit + test)} of job time over {len(rows)} finished runs (fit {duration(fit)}, "
        f"test {duration(test)}; wall-clock, so it includes waiting on whatever else the machine ran)."
    )
    finished = {r["run_id"]: job_seconds(r) for r in rows}
    left = [run for run in runs if run.run_id not in finished]
    if left and finished:
        cells: dict[tuple, list[float]] = {}
        for run in runs:
            if run.run_id in finished:
                cells.setdefault(run.cell, []).append(finished[run.run_id])
        overall = statistics.fmean(finished.values())
        more = sum(statistics.fmean(cells[run.cell]) if run.cell in cells else overall for run in left)
        text += (
            f" The {len(left)} run{'' if len(left) == 1 else 's'} not finished would take about "
            f"{duration(more)} more if run, at the mean job time so far of their cell's finished runs."
        )
    return text + "\n"


def write_results_csv(rows: list[dict], path: Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with atomic_file(path, "w", newline="") as f:  # a killed report leaves the previous results.csv
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_results_csv(path: Path) -> tuple[list[str], list[dict]]:
    """(axis columns, rows); the axis columns are those between ``run_id`` and ``seed``."""
    with open(path) as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = list(reader)
    start = columns.index("run_id") + 1 if "run_id" in columns else 0
    return columns[start : columns.index("seed")], rows


# ---------------------------------------------------------------------------- cells
def cell_key(axes: list[str], row: dict) -> tuple[str, ...]:
    """A row's cell as its axis values in ``axes`` order: what rows of one cell share."""
    return tuple(str(row[a]) for a in axes)


def rows_by_cell(axes: list[str], rows: list[dict]) -> dict[tuple[str, ...], list[dict]]:
    """{cell key: its rows}, cells in first-seen order."""
    out: dict[tuple[str, ...], list[dict]] = {}
    for row in rows:
        out.setdefault(cell_key(axes, row), []).append(row)
    return out


def rows_by_cell_and_seed(axes: list[str], rows: list[dict]) -> dict[tuple[str, ...], dict[str, dict]]:
    """{cell key: {seed: row}}, cells in first-seen order."""
    out: dict[tuple[str, ...], dict[str, dict]] = {}
    for row in rows:
        out.setdefault(cell_key(axes, row), {})[str(row.get("seed", ""))] = row
    return out


def baseline_key(axes: list[str], key: tuple[str, ...], baseline: dict[str, str]) -> tuple[str, ...]:
    """The cell ``key`` is compared with: the baseline's values on its axes, ``key``'s own elsewhere
    (with a method axis and a task axis, the baseline method on the same task)."""
    return tuple(baseline.get(a, value) for a, value in zip(axes, key))


# ---------------------------------------------------------------------------- the table


def display_value(value: str) -> str:
    """An axis value as tables and curves name it: a list of config files joined by ``+`` with a repeated
    stem names it once (``hp_rlvr+hp_rlvr``, from ``method/hp_rlvr.yaml`` + ``agent/hp_rlvr.yaml``, reads
    ``hp_rlvr``). Run ids, ``results.csv`` and a sweep file's ``axis_overrides`` keep the full value."""
    return "+".join(dict.fromkeys(str(value).split("+")))


def display_names(axes: list[str], rows: list[dict]) -> dict[str, dict[str, str]]:
    """{axis: {value: shown name}}: ``display_value`` unless two of an axis's values would read the same."""
    out: dict[str, dict[str, str]] = {}
    for a in axes:
        values = list(dict.fromkeys(str(r[a]) for r in rows))
        shown = [display_value(v) for v in values]
        out[a] = {v: (s if shown.count(s) == 1 else v) for v, s in zip(values, shown)}
    return out


def cell_label(axes: list[str], row: dict, names: dict[str, dict[str, str]] | None = None) -> str:
    """A cell's name in curves and messages; ``names`` (``display_names``) shortens its values."""
    shown = {a: (names or {}).get(a, {}).get(str(row[a]), str(row[a])) for a in axes}
    if len(axes) == 1:
        return shown[axes[0]]
    return ", ".join(f"{a}={shown[a]}" for a in axes)
