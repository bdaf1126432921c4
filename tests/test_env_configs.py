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
    init_args = task.get("init_args") or {}
    params = inspect.signature(cls).parameters
    assert set(init_args) <= set(params)  # none unknown (defaults are not restated: test_config_defaults.py)
    env = cls(**init_args)  # cheap: nothing is generated before a problem is asked for
    val_games = init_args.get("val_games", params["val_games"].default)
    assert env.size("val") == val_games
