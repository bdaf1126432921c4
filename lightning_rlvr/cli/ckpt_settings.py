"""How a command line's model settings meet a checkpoint's (``--ckpt_path``): which wins, and what cannot.

- ``--model.*`` flags win over the checkpoint's hyperparameters (``--model.eval_samples 8`` tests with 8).
- A class swap (a flag or a ``--config`` file naming another ``class_path`` for a model setting, such as
  another task at test time) replaces that setting whole: the checkpoint's ``init_args`` are not merged
  into the new class, and the command line's own ``init_args`` for it apply.
- Any other ``--config`` model setting is replaced by the checkpoint's, with one warning line naming each.
- A flag or swap that changes a parameter's shape (width, layers, vocabulary, LoRA rank) cannot load the
  checkpoint's weights: one error line names it, the checkpoint's value and what to do, before the run
  builds or writes anything. Only the settings that build weights (``SHAPE_SECTIONS``) are checked, by
  building the module they describe once and comparing its state dict with the checkpoint's.
"""

from __future__ import annotations

import copy
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..checkpoint_files import warn
from ..checkpoint_state import weight_mismatches
from ..core.errors import RLVRError
from .compose import config_files

# the model settings that build weights: the policy source, its LoRA adapters, and the task (a TextPolicy
# reads its vocabulary from it); every other setting leaves the checkpoint's parameters as they are
SHAPE_SECTIONS = ("policy", "lora", "task")
_MISSING = object()


@dataclass(frozen=True)
class Change:
    """One command-line model setting that differs from the checkpoint's: a flag, or a --config's swap."""

    path: tuple[str, ...]  # under ``model.``
    value: Any
    source: str  # "" for a flag, else the --config file

    def label(self) -> str:
        key = f"model.{'.'.join(self.path)}"
        value = self.value.get("class_path") if isinstance(self.value, dict) and self.source else self.value
        return (
            f"--config {self.source}'s {key}: {_shown(value)}" if self.source else f"--{key} {_shown(value)}"
        )


def merge_with_checkpoint(hparams: dict, argv: list[str], saved_state: dict | None = None) -> dict:
    """The checkpoint's model ``hparams`` with the command line applied (see the module docstring).

    ``saved_state``: the checkpoint's state dict; when given, a change of a parameter's shape is an
    ``RLVRError`` naming the settings that cause it."""
    saved = copy.deepcopy(hparams)
    merged = copy.deepcopy(hparams)
    changes: list[Change] = []
    tree = config_model_tree(argv)
    for path, node in _class_nodes(tree):  # --config files that swap a setting's class replace it
        if not same_class(node["class_path"], _get(saved, path)):
            _set_path(merged, list(path), copy.deepcopy(node))
            changes.append(Change(path, node, _config_naming(argv, path)))
    swapped = [c.path for c in changes]
    flags = model_flags(argv)
    for path, value in sorted(flags, key=lambda f: f[0][-1:] != ["class_path"]):  # swaps first
        if path[-1:] == ["class_path"] and not same_class(value, _get(merged, tuple(path[:-1]))):
            _set_path(merged, path[:-1], {"class_path": value})  # a new class: none of the old init_args
        else:
            _set_path(merged, path, value)
        if _get(saved, tuple(path)) != value:
            changes.append(Change(tuple(path), value, ""))
    flagged = {tuple(p) for p, _ in flags}
    report_replaced_settings(tree, merged, flagged, swapped)
    if saved_state is not None:
        check_shapes(saved, merged, changes, saved_state)
    return merged


def checkpoint_classes_as_defaults(parser: Any, argv: list[str]) -> None:
    """Make a ``--ckpt_path`` file's classes (task, policy, ...) the subcommand's defaults before parsing,
    so ``test --ckpt_path c --model.policy.init_args.hidden 64`` parses against the checkpoint's policy
    class, as it applies to it, rather than failing on the empty default. Anything unreadable is left to
    the checkpoint's own checks after parsing."""
    from ..checkpoint_files import read_checkpoint

    subcommands = getattr(parser, "_subcommands_action", None)
    sub = subcommands._name_parser_map.get(argv[0]) if subcommands and argv else None
    path = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--ckpt_path"), None)
    path = next((a.split("=", 1)[1] for a in argv if a.startswith("--ckpt_path=")), path)
    if sub is None or not path or path in ("last", "best", "hpc", "registry") or path.startswith("registry:"):
        return
    try:
        hparams = read_checkpoint(path).get("hyper_parameters") or {}
    except Exception:  # noqa: BLE001 - reported with its reason once the arguments are parsed
        return
    classes = {
        k: v for k, v in hparams.items() if isinstance(v, dict) and isinstance(v.get("class_path"), str)
    }
    if classes:
        sub.set_defaults({f"model.{k}": copy.deepcopy(v) for k, v in classes.items()})


def check_shapes(saved: dict, merged: dict, changes: list[Change], state: dict) -> None:
    """One ``RLVRError`` line when the settings that build weights no longer fit the checkpoint's."""
    suspects = [c for c in changes if c.path[0] in SHAPE_SECTIONS]
    if not suspects:
        return
    problems = _mismatches(merged, state)
    if not problems:
        return
    culprits = [c for c in suspects if _mismatches(_with(saved, c), state)] or suspects
    named = ", ".join(f"{c.label()} (the checkpoint's: {_checkpoint_value(saved, c)})" for c in culprits)
    it = "it" if len(culprits) == 1 else "them"
    raise RLVRError(
        f"--ckpt_path: {named} {'changes' if len(culprits) == 1 else 'change'} the shape of the "
        f"checkpoint's weights ({problems[0]}); drop {it} to use the checkpoint as it was trained, or "
        f"start a new run with {it} (fit without --ckpt_path)"
    )


def _mismatches(hparams: dict, state: dict) -> list[str]:
    """``weight_mismatches`` of the module ``hparams`` build ([] if they build none: the run says why)."""
    from lightning.pytorch.cli import instantiate_module

    from ..module import RLVRModule

    try:
        module = instantiate_module(RLVRModule, copy.deepcopy(hparams))
        module.configure_model()  # LoRA adapters, as Lightning applies them before restoring
    except Exception:  # noqa: BLE001 - settings that build nothing are the run's own error to report
        return []
    built = module.state_dict()
    allowed = set(module.frozen_base_keys())  # a LoRA checkpoint leaves its frozen base out
    return weight_mismatches({k: v for k, v in built.items() if k not in allowed or k in state}, state)


def _with(saved: dict, change: Change) -> dict:
    """The checkpoint's settings with ``change`` alone applied."""
    out = copy.deepcopy(saved)
    path = list(change.path)
    if change.source or path[-1:] != ["class_path"]:
        _set_path(out, path, copy.deepcopy(change.value))
    else:
        _set_path(out, path[:-1], {"class_path": change.value})
    return out


def _checkpoint_value(saved: dict, change: Change) -> str:
    path = (*change.path, "class_path") if change.source else change.path
    value = _get(saved, path)
    return "unset" if value is _MISSING else _shown(value)


def _shown(value: Any) -> str:
    """A setting's value as it is typed on a command line (YAML flow: null, {"r": 8})."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


# ---------------------------------------------------------------------------- reading the command line
def _model_section(file: str) -> dict:
    data = yaml.safe_load(Path(file).read_text()) or {}
    return data["model"] if isinstance(data, dict) and isinstance(data.get("model"), dict) else {}


def config_model_tree(argv: list[str]) -> dict:
    """The ``model:`` sections of a command line's ``--config`` files merged left to right (a later file's
    other ``class_path`` for a setting replaces the earlier file's setting)."""

    def merge(into: dict, new: dict) -> None:
        for key, value in new.items():
            old = into.get(key)
            if isinstance(value, dict) and isinstance(old, dict):
                if "class_path" in value and value["class_path"] != old.get("class_path"):
                    into[key] = copy.deepcopy(value)
                else:
                    merge(old, value)
            else:
                into[key] = copy.deepcopy(value)

    tree: dict = {}
    for file in config_files(argv):
        merge(tree, _model_section(file))
    return tree


def _config_naming(argv: list[str], path: tuple[str, ...]) -> str:
    """The last --config file that sets the ``class_path`` at ``path``."""
    files = [f for f in config_files(argv) if isinstance(_get(_model_section(f), (*path, "class_path")), str)]
    return files[-1] if files else "?"


def _class_nodes(tree: dict, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict]]:
    """The settings of ``tree`` that name a class (top-level ones: a swap replaces everything inside)."""
    out = []
    for key, value in tree.items():
        if isinstance(value, dict):
            if isinstance(value.get("class_path"), str):
                out.append(((*path, key), value))
            else:
                out += _class_nodes(value, (*path, key))
    return out


def model_flags(argv: list[str]) -> list[tuple[list[str], Any]]:
    """The ``--model.a.b value`` / ``--model.a.b=value`` flags of a command line, values parsed as YAML
    (as the parser reads a flag's value)."""
    out = []
    for i, token in enumerate(argv):
        if not token.startswith("--model."):
            continue
        key, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 >= len(argv):
                continue  # the parser has already rejected a flag without a value
            value = argv[i + 1]
        out.append((key.split(".")[1:], yaml.safe_load(value)))
    return out


def report_replaced_settings(
    tree: dict, hparams: dict, flagged: set[tuple[str, ...]], swapped: list[tuple[str, ...]]
) -> None:
    """One warning line naming the ``--config`` model settings the checkpoint's settings replace."""
    replaced = []
    for path, value in _leaves(tree):
        if not path or path in flagged or any(path[: len(s)] == s for s in swapped):
            continue
        node = _get(hparams, path)
        if node is not _MISSING and node != value:
            replaced.append(f"model.{'.'.join(path)} ({value!r} -> {node!r})")
    if replaced:
        warn(
            f"--ckpt_path: the checkpoint's model settings replace the --config's {', '.join(replaced)}; "
            "pass --model.KEY VALUE on the command line to override the checkpoint"
        )


# ---------------------------------------------------------------------------- nested settings
def same_class(class_path: Any, node: Any) -> bool:
    """Whether ``class_path`` names the class of the setting ``node`` (a dict with its own class_path)."""
    other = node.get("class_path") if isinstance(node, dict) else None
    return other is not None and (class_path == other or _resolve(class_path) is _resolve(other) is not None)


def _resolve(class_path: Any) -> Any:
    if not isinstance(class_path, str) or "." not in class_path:
        return None
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, str(key)))]
    return [(path, node)]


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree.get(key, _MISSING) if isinstance(tree, dict) else _MISSING
    return tree


def _set_path(tree: dict, path: list[str], value: Any) -> None:
    """``tree[a][b]... = value`` for ``path`` [a, b, ...], making the dicts on the way."""
    for key in path[:-1]:
        if not isinstance(tree.get(key), dict):
            tree[key] = {}
        tree = tree[key]
    tree[path[-1]] = value
