"""Sweep files: what a ``sweeps/*.yaml`` may say, and its expansion into a list of runs.

A sweep file names base ``--config`` files, fixed dotted overrides and a grid
whose axes are dotted overrides (``model.lr: [5e-5, 1e-4]``) or config files
(``config: [configs/method/grpo.yaml, "configs/method/*.yaml"]``, optionally
labelled ``config:method``). The cartesian product of the axes is the list of
runs, each with a stable, unique id. Running them is ``lightning_rlvr.sweep``;
reading their results is ``lightning_rlvr.sweep_report``. Both import what they
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

import yaml

CONFIG_AXIS = "config"
DONE = "DONE"  # written last in a run directory: the run and its evaluation completed
FIT_DONE = "fit.done"  # the fit completed (a resumed sweep then only reruns the test)
TEST_METRICS = "test_metrics.json"  # the test metrics of the final checkpoint
SWEEP_KEYS = {"name", "out", "report_dir", "configs", "overrides", "grid", "test_overrides", "env", "jobs"}
SWEEP_KEYS |= {"seed_key", "slurm"}


class SweepError(ValueError):
    """A malformed sweep file (reported as one line, not a traceback)."""


# ---------------------------------------------------------------------------- the sweep file
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


def _is_config_axis(key: str) -> bool:
    return key == CONFIG_AXIS or key.startswith(CONFIG_AXIS + ":")


def axis_label(key: str) -> str:
    """Column name of an axis: ``config:method`` -> ``method``; ``seed_everything`` -> ``seed``."""
    if _is_config_axis(key):
        return key.split(":", 1)[1] if ":" in key else CONFIG_AXIS
    return "seed" if key == "seed_everything" else key


def _expand_config_values(key: str, values: list) -> list[tuple[str, ...]]:
    """Each value of a config axis as a tuple of files; a glob string gives one value per match.

    ``[configs/method/grpo.yaml, "configs/method/*.yaml"]`` puts GRPO first, then every other method.
    """
    out: list[tuple[str, ...]] = []
    for value in values:
        if isinstance(value, str) and any(c in value for c in "*?["):
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
            out.append(files)
    return list(dict.fromkeys(out))  # a file listed and also matched by a glob runs once, first place


def load_sweep(path: str | Path, out: str | Path | None = None) -> Sweep:
    """Read and check a sweep file; ``out`` overrides its output directory."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise SweepError(f"{path}: {err}") from None
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: expected a mapping at the top level")
    unknown = set(raw) - SWEEP_KEYS
    if unknown:
        raise SweepError(f"{path}: unknown keys {sorted(unknown)}; allowed: {sorted(SWEEP_KEYS)}")
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict):
        raise SweepError(f"{path}: grid must map an axis to a list of values")
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
        seed_key=raw.get("seed_key") or "seed_everything",
        slurm=dict(raw.get("slurm") or {}),
    )


# ---------------------------------------------------------------------------- grid expansion
def _value_label(value: Any) -> str:
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
