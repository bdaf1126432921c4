"""Every configs/env/*.yaml names a real environment class with arguments its constructor accepts."""

from __future__ import annotations

import importlib
import inspect

import pytest
import yaml

from lightning_rlvr.envs.base import Environment
from tests.conftest import REPO

CONFIGS = sorted((REPO / "configs" / "env").glob("*.yaml"))


def test_both_families_have_a_config():
    assert {p.name for p in CONFIGS} == {"textworld_cooking.yaml", "textarena.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_env_config_matches_the_constructor(path):
    task = yaml.safe_load(path.read_text())["model"]["task"]
    module, name = task["class_path"].rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Environment)
    params = inspect.signature(cls).parameters
    assert set(task["init_args"]) == set(params)  # every knob written out, none unknown
    for key, value in task["init_args"].items():
        default = params[key].default
        assert value == default, f"{path.name}: {key}={value!r} differs from the default {default!r}"
    env = cls(**task["init_args"])  # cheap: nothing is generated before a problem is asked for
    assert env.size("val") == task["init_args"]["val_games"]
