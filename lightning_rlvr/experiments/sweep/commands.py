"""The ``lightning-rlvr`` command lines of a sweep's runs, and what they depend on.

Layer: experiments (imports ``core`` and ``sweep/spec.py``). ``fit_command``, ``test_command`` and
``warmup_command`` build a run's ``lightning-rlvr`` arguments from its configs and dotted overrides
(each command writes only under its run directory); ``_merged_config`` merges a run's YAML as the CLI
will, which ``check_overrides`` and ``warm_start_groups`` (one warm-start fit per distinct setting) read;
``run_env`` and ``shell_line`` give the variables and the printed line. ``sweep/runner.py`` runs them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .spec import Run, Sweep, SweepError, run_dir

PROGRAM = "lightning-rlvr"  # how commands are printed; they run as ``python -m lightning_rlvr.cli``
# what the warm start depends on (it samples through the engine, on formatted prompts)
WARM_START_KEYS = (
    "model.policy",
    "model.task",
    "model.warm_start",
    "model.lora",
    "model.engine",
    "model.prompt_format",
)


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
