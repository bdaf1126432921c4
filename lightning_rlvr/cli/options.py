"""What ``lightning-rlvr`` adds around LightningCLI's parsing (``cli/app.py`` uses these).

Layer: ``cli`` (above ``checkpoint_files``; it reads configs and checkpoint dicts).

- The help layout: a short usage line and a description per subcommand naming this project's own
  options (``RLVRCLI`` adds the model, data and checkpoint groups before Lightning's trainer flags).
- ``import_plugins``: every plug-in class is listed in ``--help``.
- ``log_beside_run`` / ``checkpoint_callback_settings``: ``test --ckpt_path RUN/.../last.ckpt`` logs
  beside that run and declares the checkpoint's ``ModelCheckpoint`` as it was.
- ``set_threads`` / ``threads_line``: a run uses ``DEFAULT_THREADS`` torch threads unless
  ``OMP_NUM_THREADS`` says otherwise, and says so in its first lines (docs/operations.md#threads).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import os
import pkgutil
import re
from pathlib import Path
from typing import Any

import torch

from ..checkpoint_files import loggers
from ..core.errors import RLVRError

# torch's own default is one thread per core; on a machine shared with other jobs those threads wait on
# each other (docs/operations.md#threads has the measurement), and a run's numbers should not depend on
# how many cores happen to be free. OMP_NUM_THREADS=N gives a run N.
DEFAULT_THREADS = 1
THREADS_ENV = "OMP_NUM_THREADS"


def set_threads() -> None:
    """Give torch ``OMP_NUM_THREADS`` intra-op threads when it is set, else ``DEFAULT_THREADS``."""
    given = os.environ.get(THREADS_ENV, "").strip()
    if not given:
        torch.set_num_threads(DEFAULT_THREADS)
        return
    if not given.isdigit() or int(given) < 1:
        raise RLVRError(f"{THREADS_ENV}={given!r}: not a whole number of threads >= 1; set one, or unset it")
    torch.set_num_threads(int(given))


def threads_line() -> str:
    """How many threads this run computes with, and why (one of the run's first lines)."""
    n, given = torch.get_num_threads(), os.environ.get(THREADS_ENV, "").strip()
    if given:
        return f"threads: {n} ({THREADS_ENV}={given})"
    return (
        f"threads: {n} of {os.cpu_count()} cores (the default: more threads slow a run on a shared machine; "
        f"{THREADS_ENV}=N gives it N)"
    )


_VERSION_DIR = re.compile(r"version_\d+")


def run_log_location(ckpt_path: str) -> tuple[Path, str]:
    """(save_dir, name) of the run a checkpoint belongs to, for a logger that writes beside it.

    ``<save_dir>/<name>/version_N/checkpoints/x.ckpt`` (Lightning's layout) and
    ``<save_dir>/<name>/checkpoints/x.ckpt`` (one ``checkpoint.dirpath`` across versions, as in the
    quickstart) give that save_dir and name; a checkpoint anywhere else gives its own folder, no name."""
    folder = Path(ckpt_path).parent
    if folder.name != "checkpoints":
        return folder, ""
    run_dir = folder.parent
    if _VERSION_DIR.fullmatch(run_dir.name):
        run_dir = run_dir.parent
    return run_dir.parent, run_dir.name


def log_beside_run(config: Any, ckpt_path: str, argv: list[str]) -> None:
    """Point ``test``/``validate``'s logger (and ``default_root_dir``) at the checkpoint's run, so its
    metrics land in a new version folder beside the run's own (``run_log_location``), unless the command
    line names a logger or a root dir itself."""
    explicit = ("--trainer.logger", "--trainer.default_root_dir", "--trainer=")
    if any(a == "--trainer" or a.startswith(explicit) for a in argv):
        return
    found = loggers(config["trainer"])
    if not found or config.get("trainer.logger") is False:
        return
    save_dir, name = run_log_location(ckpt_path)
    for logger in found:
        args = logger["init_args"]
        if "save_dir" in args:
            args["save_dir"] = str(save_dir)
        if "name" in args:
            args["name"] = name
    config["trainer.default_root_dir"] = str(save_dir)


def checkpoint_callback_settings(checkpoint: dict) -> dict[str, Any]:
    """The settings of the ``ModelCheckpoint`` a checkpoint was written with: those in its state key
    (``ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 1, ...}``) and its folder.

    ``test`` and ``validate`` declare the same callback, so Lightning restores its state instead of
    warning that the checkpoint's callbacks must be provided (or, for another folder, that the state
    cannot be reloaded); nothing is written there. {} when there is not exactly one, or its key holds
    a value that is not a literal (a ``train_time_interval``)."""
    states = checkpoint.get("callbacks") or {}
    keys = [k for k in states if isinstance(k, str) and k.startswith("ModelCheckpoint{")]
    if len(keys) != 1:
        return {}
    try:
        settings = ast.literal_eval(keys[0][len("ModelCheckpoint") :])
    except (ValueError, SyntaxError):
        return {}
    if not isinstance(settings, dict):
        return {}
    dirpath = (states[keys[0]] or {}).get("dirpath")
    return {**settings, "dirpath": dirpath} if dirpath else settings


def import_plugins() -> None:
    """Import every module of the plug-in packages, so ``--help`` lists every plug-in class among a
    setting's known subclasses (jsonargparse lists the imported ones: ``envs.vocab.TextPolicy``,
    ``engines.fast.FastEngine`` were missing) and a class that needs a missing optional library is
    left out instead of failing."""
    for name in PLUGIN_PACKAGES:
        package = importlib.import_module(f"lightning_rlvr.{name}")
        for info in pkgutil.walk_packages(getattr(package, "__path__", []), f"{package.__name__}."):
            if info.name not in NOT_PLUGINS:
                with contextlib.suppress(ImportError):
                    importlib.import_module(info.name)


PLUGIN_PACKAGES = ("tasks", "models", "credit", "losses", "engines", "envs", "rewards", "collapse_guard")
NOT_PLUGINS = {"lightning_rlvr.rewards.sandbox_harness"}  # a standalone script: it reads stdin on import
_OWN = "--model.* (task, policy, method as model.credit, loss, engine), --data.* and --checkpoint.*"
_PLUGIN_HELP = (
    "A plug-in's own options: --model.credit.help GRPOCredit (likewise .task, .policy, .loss, .engine)"
)
SUBCOMMAND_HELP = {
    "fit": f"Train a policy with RL. This project's options come first: {_OWN}; Lightning's --trainer.* "
    f"flags follow them. {_PLUGIN_HELP}.",
    "validate": f"Validate a checkpoint (--ckpt_path). This project's options come first: {_OWN}; then "
    f"Lightning's --trainer.* flags. {_PLUGIN_HELP}.",
    "test": "Test a checkpoint (--ckpt_path; the module is rebuilt from it, metrics land beside its run). "
    f"This project's options come first: {_OWN}; then Lightning's --trainer.* flags. {_PLUGIN_HELP}.",
}
USAGE = (
    "%(prog)s [-c CONFIG] [--model.KEY VALUE] [--data.KEY VALUE] [--checkpoint.KEY VALUE] "
    "[--trainer.KEY VALUE] [--ckpt_path CKPT_PATH]"
)
