"""A sweep file's values checked for type before they are used: a wrong type is one error line.

Layer: experiments (imports ``core`` only). ``spec.load_sweep`` reads the file with
``read_yaml``, checks its top-level keys with ``check_types`` and its report's numbers with ``number``;
every problem is a ``SweepError``, which the command line prints as one line (exit status 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ...core.errors import yaml_problem


class SweepError(ValueError):
    """A malformed sweep file (reported as one line, not a traceback)."""


# what each top-level key must hold (None counts as absent): (types, how the error names it)
SWEEP_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a string"),
    "out": ((str,), "a directory path"),
    "report_dir": ((str,), "a directory path"),
    "configs": ((str, list), "a config file or a list of them"),
    "overrides": ((dict,), "a mapping of dotted keys (strings) to values"),
    "grid": ((dict,), "a mapping of axes to lists of values"),
    "test_overrides": ((dict,), "a mapping of dotted keys (strings) to values"),
    "env": ((dict,), "a mapping of variable names to strings or numbers"),
    "jobs": ((int,), "a whole number >= 1"),
    "seed_key": ((str,), "a dotted key"),
    "slurm": ((dict,), "a mapping of submitit parameters"),
}


def read_yaml(path: Path) -> dict:
    """The sweep file's top level (``{}`` for an empty file); unreadable or invalid YAML is one error line."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise SweepError(f"{path}: not valid YAML{yaml_problem(err)}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SweepError(f"{path}: cannot read it as a YAML text file ({err})") from None
    return raw


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_types(path: Path, raw: dict) -> None:
    """Each top-level key holds what ``SWEEP_TYPES`` says."""
    for key, (types, what) in SWEEP_TYPES.items():
        value = raw.get(key)
        if value is None:
            continue
        ok = isinstance(value, types) and not isinstance(value, bool)
        if ok and key == "configs" and isinstance(value, list):
            ok = all(isinstance(c, str) for c in value)
        if ok and key == "jobs":
            ok = value >= 1
        if ok and isinstance(value, dict):  # dotted keys, variable names: strings
            ok = all(isinstance(k, str) for k in value)
        if ok and key == "env":  # a variable's value is one word of text
            ok = all(isinstance(v, (str, int, float)) for v in value.values())
        if not ok:
            raise SweepError(f"{path}: {key} must be {what}, got {short(value)}")


def number(path: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SweepError(f"{path}: report.{key} must be a number, got {short(value)}")
    return float(value)
