"""No YAML under configs/ sets a value equal to the code default of the key it sets (issue 49.3).

The default of a key is what the CLI resolves when the file does not set it: a constructor's default,
for a subclass the default of the class it names (``class_path``), and the CLI's own defaults
(``RLVRCLI.add_arguments_to_parser``). ``ALLOWED`` lists the few defaults a file must restate to override
what a quickstart sets before it, each with its reason.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import inspect
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from jsonargparse import Namespace

from tests.conftest import REPO

CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml"))
MISSING = object()
ALLOWED = [  # (file pattern under configs/, key, why the file sets the key to its default)
    (
        "task/*.yaml",
        "model.warm_start",
        "null undoes the warm start of configs/quickstart.yaml, which a task file is composed after: it "
        "needs worked solutions in the tiny model's vocabulary",
    ),
]


class _Parser(BaseException):
    """Carries the CLI's parser out of ``run`` before it parses anything (past ``except Exception``)."""


@pytest.fixture(scope="module")
def parser():
    return cli_parser()


def cli_parser():
    """The ``lightning-rlvr`` parser itself: ``fit --print_config`` without its ~0.5 s setup."""
    from lightning_rlvr.cli import app

    def hand_out(self, parser, args):
        raise _Parser(parser)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(_Parser) as caught:
        patch.setattr(app.RLVRCLI, "parse_arguments", hand_out)
        app.run(["fit"])
    return caught.value.args[0]


def resolve(parser, data: dict) -> Namespace | None:
    """The fit config the CLI resolves from ``data`` alone (a Namespace), or None if it refuses it."""
    try:
        return parser.parse_args(["fit", "--config", yaml.safe_dump(data)])["fit"]
    except Exception:  # a removed class_path can leave init_args that fit no class: the key was needed
        return None


def class_paths_only(data: Any) -> Any:
    """``data`` with every value removed but the ``class_path`` keys and the arguments a class requires:
    each other key at its default."""
    if isinstance(data, list):
        return [class_paths_only(v) for v in data] if all(_is_class(v) for v in data) else None
    if not isinstance(data, dict):
        return None
    kept = {k: class_paths_only(v) for k, v in data.items() if k != "class_path"}
    kept = {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if "class_path" not in data:
        return kept
    given = data.get("init_args") or {}
    needed = {k: given[k] for k in required(data["class_path"]) if k in given and not _is_class(given[k])}
    kept["init_args"] = {**kept.get("init_args", {}), **needed}
    return {"class_path": data["class_path"], **{k: v for k, v in kept.items() if v}}


def required(class_path: str) -> set[str]:
    """The constructor arguments of ``class_path`` that have no default (no default to restate; a class
    given to one has its own arguments, compared as any class's)."""
    module, _, name = class_path.rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module), name)).parameters.values()
    return {
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _is_class(value: Any) -> bool:
    return isinstance(value, dict) and "class_path" in value


def settings(
    data: dict, full: Any, bare: Any, where: str = "", skip: set[str] | None = None
) -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, resolved value, value at the default) of each option ``data`` sets, class paths and
    required arguments (``skip``) aside.

    Descends the file along the parser's own groups (Namespaces), so a dict-valued option (a task's
    ``config``, ``lora``) is one setting, compared whole."""
    for key, value in data.items():
        if key == "class_path" or (key in (skip or ()) and not _is_class(value)):
            continue
        here = f"{where}.{key}" if where else key
        got, default = _get(full, key), _get(bare, key)
        if key == "init_args" and "class_path" in data:
            yield from settings(value, got, default, here, required(data["class_path"]))
        elif isinstance(value, dict) and isinstance(got, Namespace):
            yield from settings(value, got, default, here)
        elif isinstance(value, list) and all(_is_class(v) for v in value) and isinstance(got, list):
            defaults = (
                default if isinstance(default, list) and len(default) == len(got) else [None] * len(got)
            )
            for i, (item, item_got, item_default) in enumerate(zip(value, got, defaults)):
                yield from settings(item, item_got, item_default, f"{here}[{i}]")
        else:
            yield here, got, default


def _get(node: Any, key: str) -> Any:
    return node[key] if isinstance(node, Namespace) and key in node else MISSING


def class_path_keys(data: Any, where: tuple = ()) -> Iterator[tuple]:
    """The path (keys and list indices) of each ``class_path`` in ``data``."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        if key == "class_path":
            yield (*where, key)
        else:
            yield from class_path_keys(value, (*where, key))


def without(data: dict, path: tuple) -> dict:
    """``data`` without the key at ``path``, and without the mappings that leaves empty."""
    data = copy.deepcopy(data)
    nodes = [data]
    for key in path[:-1]:
        nodes.append(nodes[-1][key])
    del nodes[-1][path[-1]]
    for parent, node, key in zip(nodes[-2::-1], nodes[:0:-1], path[-2::-1]):
        if node == {}:
            del parent[key]
    return data


def dotted(path: tuple) -> str:
    """``("model", "reward_shaping", 0, "class_path")`` -> ``model.reward_shaping[0].class_path``."""
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def restated_defaults(parser, data: dict, name: str = "") -> list[str]:
    """The keys ``data`` (the file ``name`` under configs/) sets to the value they have without it,
    ``ALLOWED`` aside."""
    full = resolve(parser, data)
    assert full is not None, f"{name or data} does not parse"
    bare = resolve(parser, class_paths_only(data))
    found = [where for where, got, default in settings(data, full, bare) if got == default]
    for key in class_path_keys(data):
        if resolve(parser, without(data, key)) == full:  # the class the key would have anyway
            found.append(dotted(key))
    return [w for w in found if not any(fnmatch.fnmatch(name, f) and w == key for f, key, _ in ALLOWED)]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO / "configs")))
def test_a_config_states_only_what_differs_from_the_code_defaults(parser, path):
    found = restated_defaults(
        parser, yaml.safe_load(path.read_text()), str(path.relative_to(REPO / "configs"))
    )
    assert not found, f"{path.relative_to(REPO)} restates the default of {', '.join(found)}: remove it"


@pytest.mark.parametrize(
    "text, restated",
    [
        ("model: {group_size: 8, lr: 1.0e-4}", ["model.group_size"]),  # a module argument
        ("model: {lr: 0.00005}", ["model.lr"]),  # written another way than the code
        ("trainer: {log_every_n_steps: 1, max_steps: 3}", ["trainer.log_every_n_steps"]),  # the CLI's default
        ("checkpoint: {save_last: true}", ["checkpoint.save_last"]),
        (
            "model: {task: {class_path: lightning_rlvr.tasks.AdditionTask, init_args: {seed: 0}}}",
            ["model.task.init_args.seed"],
        ),  # a class's argument
        (
            "model: {credit: {class_path: lightning_rlvr.credit.opd.OPDCredit, init_args: {teacher: "
            "{class_path: lightning_rlvr.models.TinyPolicy, init_args: {layers: 2, hidden: 64}}}}}",
            ["model.credit.init_args.teacher.init_args.layers"],
        ),  # a class inside a class
        (
            "model: {reward_shaping: [{class_path: lightning_rlvr.rewards.OverlongPenalty, "
            "init_args: {cache: 8}}]}",
            ["model.reward_shaping[0].init_args.cache"],
        ),  # an item of a list of classes
        (
            "trainer: {logger: {class_path: lightning.pytorch.loggers.CSVLogger, init_args: {name: x}}}",
            ["trainer.logger.class_path"],
        ),  # the class the CLI names by default
        (
            "model: {task: {class_path: lightning_rlvr.tasks.ReasoningGymTask, init_args: {name: chain_sum, "
            "config: {}}}}",
            [],
        ),  # a required argument has no default; an empty dict is not None
        (
            "model: {credit: {class_path: lightning_rlvr.credit.GRPOCredit}, warm_start: null}",
            ["model.warm_start"],
        ),  # the module builds GRPO from None, but None is what the CLI resolves
    ],
)
def test_a_restated_default_is_found_and_nothing_else(parser, text, restated):
    assert restated_defaults(parser, yaml.safe_load(text)) == restated


def test_a_run_of_a_config_that_leaves_lr_at_its_default_reports_that_rate(tmp_path, monkeypatch):
    """A sweep's rates section reads a run's ``model.lr`` from its config files: one that no longer restates
    the default (``configs/quickstart.yaml``) still reads as the rate the run ran, and only an unreadable
    file leaves it unknown."""
    from lightning_rlvr.experiments.sweep.plan import lr_of_spec
    from lightning_rlvr.module import RLVRModule

    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.yaml").write_text("model:\n  group_size: 4\n")
    default = inspect.signature(RLVRModule).parameters["lr"].default
    for configs, overrides, rate in (
        (["base.yaml"], [], f"{default:g}"),
        (["base.yaml"], [["model.lr", 2.0e-4]], "0.0002"),
        (["base.yaml", "missing.yaml"], [], None),
    ):
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"configs": configs, "overrides": overrides}))
        assert lr_of_spec(spec) == rate, (configs, overrides)


@pytest.mark.parametrize("pattern, key, why", ALLOWED)
def test_each_allowed_default_is_still_set_by_a_file_it_names(pattern, key, why):
    """An entry no file needs any more goes: the list holds only what the configs restate on purpose."""
    names = [str(p.relative_to(REPO / "configs")) for p in CONFIGS]
    files = [REPO / "configs" / n for n in names if fnmatch.fnmatch(n, pattern)]
    assert any(sets(yaml.safe_load(f.read_text()), key.split(".")) for f in files), (pattern, key)


def sets(data: Any, keys: list[str]) -> bool:
    """Whether the YAML mapping ``data`` sets the dotted key ``keys``."""
    return not keys or (isinstance(data, dict) and keys[0] in data and sets(data[keys[0]], keys[1:]))
