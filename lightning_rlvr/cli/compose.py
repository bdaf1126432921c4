"""Config files compose in any order: two ``--config`` files that set one loss setting differently stop.

A method file (``configs/method/*.yaml``) and a loss file (``configs/loss/*.yaml``) each state only what
differs from the code's defaults, so composing them gives the same result in either order, except when
both set the same ``model.loss`` setting (DAPO's ``eps_high`` and GSPO's, say): then the later file would
silently win, and the CLI stops with one line naming the setting and both files instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..core.errors import RLVRError


def config_files(args: list[str]) -> list[str]:
    """The ``--config`` / ``-c`` / ``--config=`` file paths of a command line, in order (files that exist)."""
    out = []
    for i, arg in enumerate(args):
        value = args[i + 1] if arg in ("--config", "-c") and i + 1 < len(args) else None
        value = arg.split("=", 1)[1] if arg.startswith("--config=") else value
        if value and Path(value).is_file():
            out.append(value)
    return out


def loss_settings(data: Any) -> dict[str, Any]:
    """A parsed config's ``model.loss.init_args`` (empty when it sets none)."""
    node: Any = data
    for key in ("model", "loss", "init_args"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def check_loss_settings_agree(args: list[str]) -> None:
    """One ``RLVRError`` when two ``--config`` files set a ``model.loss.init_args`` key to two values."""
    seen: dict[str, tuple[str, Any]] = {}  # setting -> (file, value)
    for path in config_files(args):
        for key, value in loss_settings(yaml.safe_load(Path(path).read_text())).items():
            if key in seen and seen[key][1] != value:
                first, before = seen[key]
                raise RLVRError(
                    f"model.loss.init_args.{key} is set by both {first} ({before!r}) and {path} ({value!r}), "
                    "so their order would decide it; compose only one of them, or a copy of one without "
                    "that setting"
                )
            seen[key] = (path, value)
