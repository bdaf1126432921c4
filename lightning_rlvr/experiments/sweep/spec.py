"""Sweep files: what a ``sweeps/*.yaml`` may say, and its expansion into a list of runs.

A sweep file names base ``--config`` files, fixed dotted overrides and a grid
whose axes are dotted overrides (``model.lr: [5e-5, 1e-4]``) or config files
(``config: [configs/method/grpo.yaml, "configs/method/*.yaml"]``, optionally
labelled ``config:method``). The cartesian product of the axes is the list of
runs, each with a stable, unique id. ``axis_overrides`` sets overrides that
depend on one axis' value, e.g. each method's own tuned learning rate::

    axis_overrides:
      method:                       # an axis label (``config:method`` -> ``method``)
        grpo: {model.lr: 5.0e-5}    # a value label (a config file's stem, or the value itself)
        shear: {model.lr: 2.0e-4}

They apply after the grid's own overrides; a key that is also a grid axis is an
error (the run would not be the grid point it is named after). ``report`` holds
the settings of the report (``ReportSettings``). Running them is ``lightning_rlvr.experiments.sweep.run``;
reading their results is ``lightning_rlvr.experiments.sweep.report``. Both import what they
share from here (the run directory layout and its marker files), never each other.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks import SweepError, check_types, number, read_yaml, short
from .claims import Claim, parse_claims

CONFIG_AXIS = "config"
DONE = "DONE"  # written last in a run directory: the run and its evaluation completed
FIT_DONE = "fit.done"  # the fit completed (a resumed sweep then only reruns the test)
TEST_METRICS = "test_metrics.json"  # the test metrics of the final checkpoint
SPEC = "spec.json"  # the run's config files and overrides, written when its fit starts
CREDIT_EVAL = "credit_eval.csv"  # optional: lightning-rlvr-credit-eval on the final checkpoint
CREDIT_TABLE = "credit_eval.md"  # its table and paper-claim checks, archived for readers
SWEEP_KEYS = {"name", "out", "report_dir", "configs", "overrides", "grid", "test_overrides", "env", "jobs"}
SWEEP_KEYS |= {"seed_key", "slurm", "axis_overrides", "report"}
REPORT_KEYS = {"baseline", "compare", "target_accuracy", "level", "power", "choose", "choose_by", "include"}
REPORT_KEYS |= {"claims", "budget_hours", "collapse_floor", "tie", "tie_tolerance"}
REPORT_KEYS |= {"step_cost_s"}
TIE_RULES = ("lower", "higher", "first")  # how report.choose breaks a tie (see choice.choose_values)


# ---------------------------------------------------------------------------- the sweep file
@dataclass
class ReportSettings:
    """What the report compares (a sweep file's ``report:`` section).

    Attributes:
        baseline: the cell every other cell is compared with, as {axis label: value label}; a plain
            string names a value of the first axis. Default: the first value of the first axis
            (GRPO in the method sweeps). Other axes are matched, so with a method axis and a
            task axis each method is compared with the baseline method on the same task.
        compare: results.csv columns compared paired by seed (default: test/pass@1).
        target_accuracy: the val pass@1 whose first reach gives the "time to reach" column (None: no
            such column).
        level: confidence level of the intervals (and 1 - alpha of the test).
        power: the power at which the minimum detectable difference is given.
        choose: a tuning sweep's axis (e.g. ``model.lr``) to choose a value of per cell of the other
            axes (e.g. per method): the one with the highest seed-mean ``choose_by``, the first listed
            on a tie. The report then prints the choice as an ``axis_overrides`` block to paste into
            the main sweep file. None: no choice.
        choose_by: the results.csv column that decides (default: the last validation's pass@1).
        include: other sweeps' results.csv files whose cells (those this sweep lacks) are compared
            with this sweep's baseline too, paired by seed and warm start: a baseline rerun (a control)
            gives the main sweep's methods a partner. Their rows join the comparison only.
        claims: papers' claims about cells against the baseline, judged in the report (``claims.Claim``).
        budget_hours: the job time (fit + test seconds, in hours) one claim's test may spend: the
            seeds that decide it, each a run of its cell and one of its baseline at their measured cost.
            A claim whose deciding seeds would cost more reads "not testable within budget"
            (``experiments.verdicts``). The sweep's total is the sum over its arms. None: no budget.
        collapse_floor: an arm whose mean of a fraction metric (pass@k) is below this is collapsed and left
            out of the pooled analysis, as an arm whose runs are all 0 always is. None: only those.
        tie: how ``choose`` breaks a tie between values within ``tie_tolerance`` of the best: ``lower``
            (the smaller value), ``higher`` or ``first`` (first in the grid).
        tie_tolerance: seed means within this of the best tie (in the metric's units: 0.01 = 1 point).
        step_cost_s: seconds one RL step takes with the machine otherwise idle (an idle pilot's), by a value
            of a grid axis (``{grpo: 34.2, hp_rlvr: 41.0}``): time to the target in steps x this cost
            (``rows.IDLE_TO_TARGET``) beside the seconds measured under whatever load the sweep ran with.
    """

    baseline: dict[str, str] = field(default_factory=dict)
    compare: list[str] = field(default_factory=lambda: ["test/pass@1"])
    target_accuracy: float | None = None
    level: float = 0.95
    power: float = 0.8
    choose: str | None = None
    choose_by: str = "val/pass@1_final"
    include: list[Path] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    budget_hours: float | None = None
    collapse_floor: float | None = None
    tie: str = "lower"
    tie_tolerance: float = 0.0
    step_cost_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Sweep:
    """A parsed sweep file. Paths in it are relative to the directory the sweep is run from."""

    name: str
    path: Path
    out: Path
    report_dir: Path
    configs: list[str]
    overrides: dict[str, Any]
    grid: dict[str, list]
    test_overrides: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    jobs: int = 1
    seed_key: str = "seed_everything"
    slurm: dict[str, Any] = field(default_factory=dict)
    axis_overrides: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    report: ReportSettings = field(default_factory=ReportSettings)


@dataclass(frozen=True)
class Run:
    """One point of the grid: its config files (in order) and dotted overrides (in order)."""

    run_id: str
    configs: tuple[str, ...]
    overrides: tuple[tuple[str, Any], ...]
    cell: tuple[tuple[str, str], ...]  # (axis label, value label) of every axis but the seed
    seed: str | None


def run_dir(sweep: Sweep, run: Run) -> Path:
    """Where a run writes everything: ``<out>/<run_id>/``."""
    return sweep.out / run.run_id


def lock_path(sweep: Sweep, run: Run) -> Path:
    """The run's lock, held by whatever runs it (beside the run directory, which a restart removes)."""
    return sweep.out / ".locks" / f"{run.run_id}.lock"


def _is_config_axis(key: str) -> bool:
    return key == CONFIG_AXIS or key.startswith(CONFIG_AXIS + ":")


def axis_label(key: str) -> str:
    """Column name of an axis: ``config:method`` -> ``method``; ``seed_everything`` -> ``seed``."""
    if _is_config_axis(key):
        return key.split(":", 1)[1] if ":" in key else CONFIG_AXIS
    return "seed" if key == "seed_everything" else key


class NamedFiles(tuple):
    """A config-axis value with a name of its own, written ``{NAME: FILES}`` in the grid: those files run
    as a cell called NAME, so one method file can be a second cell (with ``axis_overrides`` for NAME,
    e.g. the method at its own tuned rate beside the cell at the baseline's rate)."""

    name: str

    def __new__(cls, name: str, files: tuple[str, ...]) -> NamedFiles:
        value = super().__new__(cls, files)
        value.name = name
        return value


def _named(key: str, value: dict) -> tuple[str, list]:
    """The name and files of a ``{NAME: FILES}`` grid value, checked."""
    if len(value) != 1:
        raise SweepError(f"grid.{key}: a named value is one NAME: FILES pair, got {short(value)}")
    ((name, files),) = value.items()
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise SweepError(f"grid.{key}: a value's name must be letters, digits, '_', '.' or '-', got {name!r}")
    return name, files if isinstance(files, list) else [files]


def _expand_config_values(key: str, values: list) -> list[tuple[str, ...]]:
    """Each value of a config axis as a tuple of files; a glob string gives one value per match.

    ``[configs/method/grpo.yaml, "configs/method/*.yaml"]`` puts GRPO first, then every other method;
    ``{sc_grpo_own_rate: configs/method/sc_grpo.yaml}`` is SC-GRPO's file under another name.
    """
    out: list[tuple[str, ...]] = []
    for value in values:
        name = None
        if isinstance(value, dict):
            name, value = _named(key, value)
        if isinstance(value, str) and any(c in value for c in "*?[") and name is None:
            matches = sorted(glob.glob(value))
            if not matches:
                raise SweepError(f"grid.{key}: {value!r} matches no file (run from the repository root)")
            out += [(m,) for m in matches]
        else:
            files = tuple(value) if isinstance(value, list) else (value,)
            for f in files:
                if not isinstance(f, str) or not Path(f).is_file():
                    raise SweepError(
                        f"grid.{key}: config file {f!r} not found (run from the repository root)"
                    )
            out.append(files if name is None else NamedFiles(name, files))
    # a file listed and also matched by a glob runs once, first place; a named value is its own cell
    unique = list({(_value_label(v), v): v for v in out}.values())
    labels = [_value_label(v) for v in unique]
    clash = sorted({v.name for v in unique if isinstance(v, NamedFiles) and labels.count(v.name) > 1})
    if clash:
        raise SweepError(f"grid.{key}: two values are called {clash}; give the named one another name")
    return unique


def load_sweep(path: str | Path, out: str | Path | None = None) -> Sweep:
    """Read and check a sweep file; ``out`` overrides its output directory."""
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: expected a mapping at the top level")
    unknown = set(raw) - SWEEP_KEYS
    if unknown:
        raise SweepError(f"{path}: unknown keys {sorted(unknown, key=str)}; allowed: {sorted(SWEEP_KEYS)}")
    check_types(path, raw)
    grid = raw.get("grid") or {}  # a mapping: check_types
    grid = {k: v if isinstance(v, list) else [v] for k, v in grid.items()}
    for key, values in grid.items():
        if not values:
            raise SweepError(f"{path}: grid.{key} is empty")
        if _is_config_axis(key):
            grid[key] = _expand_config_values(key, values)
    configs = raw.get("configs") or []
    configs = [configs] if isinstance(configs, str) else list(configs)
    for c in configs:
        if not Path(c).is_file():
            raise SweepError(f"{path}: config file {c!r} not found (run from the repository root)")
    seed_key = raw.get("seed_key") or "seed_everything"
    axis_overrides = _check_axis_overrides(path, raw.get("axis_overrides") or {}, grid, seed_key)
    report = _report_settings(path, raw.get("report") or {}, grid, seed_key)
    name = raw.get("name") or path.stem
    out_dir = Path(out or raw.get("out") or Path("runs") / "sweeps" / name)
    return Sweep(
        name=name,
        path=path,
        out=out_dir,
        report_dir=Path(raw.get("report_dir") or out_dir),
        configs=configs,
        overrides=dict(raw.get("overrides") or {}),
        grid=grid,
        test_overrides=dict(raw.get("test_overrides") or {}),
        env={k: str(v) for k, v in (raw.get("env") or {}).items()},
        jobs=int(raw.get("jobs") or 1),
        seed_key=seed_key,
        slurm=dict(raw.get("slurm") or {}),
        axis_overrides=axis_overrides,
        report=report,
    )


def _axis_values(grid: dict[str, list], seed_key: str) -> dict[str, tuple[str, list[str]]]:
    """{axis label: (grid key, value labels)} of every axis but the seed."""
    return {axis_label(k): (k, [_value_label(v) for v in vs]) for k, vs in grid.items() if k != seed_key}


def _check_axis_overrides(path: Path, raw: Any, grid: dict[str, list], seed_key: str) -> dict:
    """``axis_overrides`` as {axis label: {value label: {dotted key: value}}}, every name checked."""
    axes = _axis_values(grid, seed_key)
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: axis_overrides must map an axis label to {{value label: {{key: value}}}}")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for axis, per_value in raw.items():
        if axis not in axes:
            raise SweepError(f"{path}: axis_overrides.{axis}: no such grid axis; the axes are {sorted(axes)}")
        if not isinstance(per_value, dict):
            raise SweepError(f"{path}: axis_overrides.{axis} must map a value label to {{key: value}}")
        labels = axes[axis][1]
        for value, sets in per_value.items():
            value = _value_label(value) if not isinstance(value, str) else value
            if value not in labels:
                raise SweepError(
                    f"{path}: axis_overrides.{axis}.{value}: not a value of that axis ({labels})"
                )
            if not isinstance(sets, dict) or not all(isinstance(k, str) for k in sets):
                raise SweepError(f"{path}: axis_overrides.{axis}.{value} must map dotted keys to values")
            clash = sorted(set(sets) & set(grid))
            if clash:
                raise SweepError(
                    f"{path}: axis_overrides.{axis}.{value} sets {clash}, which is also a grid axis; "
                    "drop one of the two"
                )
            out.setdefault(axis, {})[value] = dict(sets)
    return out


def _report_settings(path: Path, raw: Any, grid: dict[str, list], seed_key: str) -> ReportSettings:
    """The ``report:`` section, its baseline resolved to {axis label: value label} and checked."""
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: report must be a mapping with keys {sorted(REPORT_KEYS)}")
    unknown = set(raw) - REPORT_KEYS
    if unknown:
        raise SweepError(f"{path}: unknown report keys {sorted(unknown)}; allowed: {sorted(REPORT_KEYS)}")
    axes = _axis_values(grid, seed_key)
    baseline = raw.get("baseline")
    if baseline is None:
        baseline = {a: labels[0] for a, (_, labels) in list(axes.items())[:1]}
    elif not isinstance(baseline, dict):
        if not axes:
            raise SweepError(f"{path}: report.baseline needs a grid axis besides the seed")
        baseline = {next(iter(axes)): baseline}
    baseline = {str(a): _value_label(v) if not isinstance(v, str) else v for a, v in baseline.items()}
    for axis, value in baseline.items():
        if axis not in axes:
            raise SweepError(f"{path}: report.baseline: no grid axis {axis!r}; the axes are {sorted(axes)}")
        if value not in axes[axis][1]:
            raise SweepError(f"{path}: report.baseline: {value!r} is not a value of {axis} ({axes[axis][1]})")
    compare = raw.get("compare", ["test/pass@1"])
    compare = [compare] if isinstance(compare, str) else compare
    if not isinstance(compare, list) or not compare or not all(isinstance(c, str) for c in compare):
        raise SweepError(
            f"{path}: report.compare must be a results.csv column or a list of them, got {compare!r}"
        )
    for key in ("choose", "choose_by"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise SweepError(f"{path}: report.{key} must be a string, got {repr(raw[key])}")
    target = raw.get("target_accuracy")
    target = None if target is None else number(path, "target_accuracy", target)
    level, power = (
        number(path, "level", raw.get("level", 0.95)),
        number(path, "power", raw.get("power", 0.8)),
    )
    if target is not None and not 0 < target <= 1:
        raise SweepError(f"{path}: report.target_accuracy must be in (0, 1], got {target}")
    if not (0 < level < 1 and 0 < power < 1):
        raise SweepError(f"{path}: report.level and report.power must be in (0, 1)")
    choose = raw.get("choose")
    if choose is not None and (choose not in axes or len(axes) < 2):
        raise SweepError(
            f"{path}: report.choose: {choose!r} must be one of the grid axes {sorted(axes)}, with another "
            "axis to choose per (e.g. choose: model.lr with a method axis)"
        )
    target = None if target is None else float(target)
    by = str(raw.get("choose_by", "val/pass@1_final"))
    include = raw.get("include", [])
    include = [include] if isinstance(include, str) else include
    if not isinstance(include, list) or not all(isinstance(f, str) for f in include):
        raise SweepError(f"{path}: report.include must be a list of results.csv paths, got {include!r}")
    try:
        claims = parse_claims(raw.get("claims", []), {a: labels for a, (_, labels) in axes.items()}, compare)
    except ValueError as err:
        raise SweepError(f"{path}: report.{err}") from None
    budget, floor = (
        None if raw.get(key) is None else number(path, key, raw[key])
        for key in ("budget_hours", "collapse_floor")
    )
    if budget is not None and not 0 < budget < float("inf"):
        raise SweepError(
            f"{path}: report.budget_hours must be a positive number of hours, got {raw['budget_hours']!r}"
        )
    tie = raw.get("tie", "lower")
    if tie not in TIE_RULES:
        raise SweepError(f"{path}: report.tie must be one of {list(TIE_RULES)}, got {short(tie)}")
    tolerance = number(path, "tie_tolerance", raw.get("tie_tolerance", 0.0))
    if not 0 <= tolerance < float("inf"):
        raise SweepError(f"{path}: report.tie_tolerance must be a number >= 0, got {raw['tie_tolerance']!r}")
    return ReportSettings(
        baseline,
        compare,
        target,
        level,
        power,
        choose,
        by,
        [Path(f) for f in include],
        claims,
        budget,
        floor,
        tie,
        tolerance,
        step_cost_s=_step_costs(path, raw.get("step_cost_s"), axes),
    )


def _step_costs(path: Path, raw: Any, axes: dict[str, tuple[str, list[str]]]) -> dict[str, float]:
    """``report.step_cost_s`` as {value label: seconds}, each key a value of a grid axis."""
    values = sorted({label for _, labels in axes.values() for label in labels})
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SweepError(
            f"{path}: report.step_cost_s must map a grid value to seconds per step, got {short(raw)}"
        )
    out = {}
    for key, value in raw.items():
        if str(key) not in values:
            raise SweepError(
                f"{path}: report.step_cost_s: {key!r} is not a grid value; the values are {values}"
            )
        seconds = number(path, f"step_cost_s.{key}", value)
        if not 0 < seconds < float("inf"):
            raise SweepError(
                f"{path}: report.step_cost_s.{key} must be a positive number of seconds, got {value!r}"
            )
        out[str(key)] = seconds
    return out


# ---------------------------------------------------------------------------- grid expansion
def _value_label(value: Any) -> str:
    if isinstance(value, NamedFiles):
        return value.name
    if isinstance(value, tuple):  # config files
        return "+".join(Path(f).stem for f in value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", text)


def _spec_hash(run: Run) -> str:
    blob = json.dumps([list(run.configs), [[k, v] for k, v in run.overrides]], default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:8]


def expand(sweep: Sweep) -> list[Run]:
    """The cartesian product of the grid axes, in file order (last axis fastest).

    A run id names every axis, e.g. ``grpo__lr=5e-05__seed=0`` (config axes by their
    files' stems, dotted keys by their last component unless two axes share it), so
    it is stable across invocations and grows no hash; ids that would still collide
    (two files with one stem) get a short hash of the run's full specification.
    """
    keys = list(sweep.grid)
    short = {k: k.rsplit(".", 1)[-1] for k in keys if not _is_config_axis(k)}
    short = {k: (s if list(short.values()).count(s) == 1 else k) for k, s in short.items()}
    short = {k: ("seed" if k == sweep.seed_key else s) for k, s in short.items()}
    runs = []
    for combo in itertools.product(*(sweep.grid[k] for k in keys)):
        configs, overrides, parts, cell, seed = list(sweep.configs), dict(sweep.overrides), [], [], None
        for key, value in zip(keys, combo):
            label = _value_label(value)
            if _is_config_axis(key):
                configs += list(value)
                parts.append(label)
            else:
                overrides[key] = value
                parts.append(f"{short[key]}={label}")
            if key == sweep.seed_key:
                seed = label
            else:
                cell.append((axis_label(key), label))
        for axis, value in cell:  # overrides that depend on an axis' value, after the grid's own
            overrides.update(sweep.axis_overrides.get(axis, {}).get(value, {}))
        runs.append(
            Run(
                run_id=_safe("__".join(parts) or "run"),
                configs=tuple(configs),
                overrides=tuple(overrides.items()),
                cell=tuple(cell),
                seed=seed,
            )
        )
    ids = [r.run_id for r in runs]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        runs = [
            Run(f"{r.run_id}-{_spec_hash(r)}", r.configs, r.overrides, r.cell, r.seed)
            if r.run_id in dupes
            else r
            for r in runs
        ]
    return runs
