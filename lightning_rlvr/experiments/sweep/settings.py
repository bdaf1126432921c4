"""Whether a finished run trained with the settings its sweep would use now, read from resolved configs.

Layer: experiments (imports ``sweep/commands.py`` and ``sweep/spec.py``). A config file rewritten without
changing what it sets (a default no longer restated, keys reordered) changes its YAML digest but not the
run. So when the digests differ, the run's own resolved config (``logs/fit/config.yaml``, which the CLI
saves when a fit starts) is compared with what ``--print_config`` resolves for the sweep's command now.

A setting the run's config lacks is an option added to the code since it ran: it matches only where its
value now is the code's default (the run ran before the option existed, so it ran the default's
behaviour only if new options default to the old behaviour, which this project's options do). Anything
else that differs means the run is another run.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from .commands import fit_command
from .config_history import config_digest, earlier_content
from .spec import Run, Sweep, run_dir

RESOLVED = Path("logs") / "fit" / "config.yaml"  # what the CLI saved when the run's fit started
NOT_SETTINGS = ("ckpt_path", "weights_only", "config")  # how a fit was started, not what it trains
SECTIONS = {  # the class behind each top-level section, for the defaults of options added since
    "model": "lightning_rlvr.module.RLVRModule",
    "data": "lightning_rlvr.data.RLVRDataModule",
    "trainer": "lightning.pytorch.Trainer",
}
MISSING = object()


def _print_config(args: tuple[str, ...]) -> dict | None:
    """``lightning-rlvr fit ARGS --print_config`` as a dict, or None if the CLI refuses the arguments."""
    files = tuple(args[i + 1] for i, a in enumerate(args[:-1]) if a == "--config")
    return _resolve(args, tuple(Path(f).read_bytes() if Path(f).is_file() else b"" for f in files))


@functools.lru_cache(maxsize=256)
def _resolve(args: tuple[str, ...], contents: tuple[bytes, ...]) -> dict | None:
    """``_print_config`` once per command and content of its config files."""
    command = [sys.executable, "-m", "lightning_rlvr.cli", *args, "--print_config"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return None
    return yaml.safe_load(done.stdout)


def _default(owner: str | None, name: str) -> Any:
    """The default of parameter ``name`` of class ``owner`` (a dotted path), or MISSING if it has none."""
    if owner is None:
        return MISSING
    module, _, cls = owner.rpartition(".")
    try:
        parameter = inspect.signature(getattr(importlib.import_module(module), cls)).parameters.get(name)
    except (ImportError, AttributeError, ValueError, TypeError):
        return MISSING
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return MISSING
    return parameter.default


def differences(ran: Any, now: Any, owner: str | None = None, where: str = "") -> list[str]:
    """The dotted settings in which ``now`` differs from ``ran`` (empty: the same run).

    ``owner`` is the class whose arguments the mapping holds, to read the default of an option ``ran``
    lacks."""
    if not (isinstance(ran, dict) and isinstance(now, dict)):
        return [] if ran == now else [where or "(root)"]
    if "class_path" in now and ran.get("class_path") != now["class_path"]:
        return [f"{where}.class_path".lstrip(".")]
    owner = now.get("class_path", owner)
    found = []
    for key in sorted(set(ran) | set(now)):
        if not where and key in NOT_SETTINGS:
            continue
        here = f"{where}.{key}".lstrip(".")
        child_owner = SECTIONS.get(key, owner) if not where else owner
        if key == "init_args":
            child_owner = owner
        if key not in ran:  # an option added since the run: the same only at its default
            if now[key] != _default(owner, key):
                found.append(here)
        elif key not in now:  # an option removed since: the run used something the code no longer has
            found.append(here)
        else:
            found += differences(ran[key], now[key], child_owner, here)
    return found


def resolved_differences(sweep: Sweep, run: Run) -> list[str] | None:
    """Settings in which ``run``'s saved config differs from what its command resolves to now.

    None when that cannot be said: the run saved no config, or the CLI refuses the command now."""
    saved = run_dir(sweep, run) / RESOLVED
    if not saved.is_file():
        return None
    try:
        ran = yaml.safe_load(saved.read_text())
    except yaml.YAMLError:
        return None
    now = _print_config(tuple(fit_command(sweep, run)))
    if not isinstance(ran, dict) or now is None:
        return None
    return differences(ran, now)


def differences_at_recorded_configs(sweep: Sweep, run: Run, digests: dict[str, str]) -> list[str] | None:
    """Settings in which ``run``'s command resolves differently with each config file as the run read it
    (the committed version with the digest it recorded, ``config_history``) than with the files now.

    For a run that kept no resolved config. None when that cannot be said: a changed file has no
    committed version with the recorded digest, or the CLI refuses either command."""
    args = list(fit_command(sweep, run))
    with tempfile.TemporaryDirectory() as scratch:
        then = list(args)
        for i, arg in enumerate(args[:-1]):
            path = args[i + 1]
            if arg != "--config" or path not in digests or digests[path] == config_digest(path):
                continue
            content = earlier_content(path, digests[path])
            if content is None:
                return None
            # named like the current file (the CLI records the name); paths inside resolve from the cwd
            earlier = Path(scratch) / f"{i}" / Path(path).name
            earlier.parent.mkdir()
            earlier.write_bytes(content)
            then[i + 1] = str(earlier)
        ran, now = _print_config(tuple(then)), _print_config(tuple(args))
    if ran is None or now is None:
        return None
    return differences(ran, now)
