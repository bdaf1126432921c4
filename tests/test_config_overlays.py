"""No test-scale overlay under tests/configs sets a key to the value that the configs it is composed after
already give it: one place for each value, the rule test_config_defaults holds configs/ to.

An overlay is composed after different configs by different tests (tiny.yaml after each base config and
after each method file); a key is restated only when it changes nothing after every one of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from jsonargparse import Namespace

from tests.conftest import (
    BASE_TEST_SCALE,
    METHOD_TEST_SCALE,
    QUICKSTART,
    REPO,
    TEXTWORLD_AFTER_QUICKSTART,
    TINY,
)
from tests.test_config_defaults import cli_parser, dotted, without
from tests.test_env_training import env_configs

METHODS = sorted((REPO / "configs" / "method").glob("*.yaml"))
OVERLAYS = REPO / "tests" / "configs"


def composed_after() -> dict[str, list[tuple[str, ...]]]:
    """Each overlay's path and the config chains the tests compose it after, read from where the tests
    compose them: the sweeps' (a base, then its test scale), TextWorld's on the arithmetic quickstart,
    the CLI tests' (quickstart, a method file, tiny.yaml, the method's own scale) and the environment
    tests' (``env_configs``)."""
    compositions = [(str(REPO / "configs" / f"{b}.yaml"), *scale) for b, scale in BASE_TEST_SCALE.items()]
    compositions.append(TEXTWORLD_AFTER_QUICKSTART)  # test_textworld_env's
    for method in METHODS:  # the CLI tests' order, then the environment tests'
        compositions.append((QUICKSTART, str(method), TINY, *METHOD_TEST_SCALE.get(method.stem, ())))
        compositions.append(env_configs(method))
    chains: dict[str, list[tuple[str, ...]]] = {}
    for composition in compositions:
        for i, config in enumerate(composition):
            if Path(config).parent == OVERLAYS and composition[:i] not in chains.get(config, []):
                chains.setdefault(config, []).append(composition[:i])
    return chains


COMPOSED_AFTER = composed_after()


@pytest.fixture(scope="module")
def parser():
    return cli_parser()


def leaves(data: dict, where: tuple = ()) -> Iterator[tuple]:
    """The path of each value ``data`` sets: a mapping's keys, down to values that are not mappings."""
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*where, key))
        else:
            yield (*where, key)


def resolve_after(parser, chain: tuple[str, ...], data: dict) -> Namespace | None:
    """The fit config the CLI resolves from the files of ``chain`` and then ``data``, or None if refused."""
    args = ["fit"]
    for config in chain:
        args += ["--config", config]
    try:
        return parser.parse_args([*args, "--config", yaml.safe_dump(data)])["fit"]
    except Exception:  # a key whose removal leaves init_args that fit no class was needed
        return None


def restated(parser, data: dict, chains: list[tuple[str, ...]]) -> list[str]:
    """The keys of ``data`` whose removal changes the resolved config after none of ``chains``."""
    candidates = list(leaves(data))
    for chain in chains:
        full = resolve_after(parser, chain, data)
        assert full is not None, f"{data} does not parse after {[Path(c).name for c in chain]}"
        candidates = [k for k in candidates if resolve_after(parser, chain, without(data, k)) == full]
    return [dotted(k) for k in candidates]


def test_every_overlay_is_composed_after_something():
    """Each YAML under tests/configs is named by the tables this test reads: none is checked against
    nothing, and a new overlay is held to the rule once a test composes it."""
    overlays = {str(p) for p in OVERLAYS.glob("*.yaml")}
    assert overlays == set(COMPOSED_AFTER), overlays ^ set(COMPOSED_AFTER)


@pytest.mark.parametrize("overlay", sorted(COMPOSED_AFTER), ids=lambda p: Path(p).name)
def test_an_overlay_states_only_what_its_chain_does_not_already_give(parser, overlay):
    found = restated(parser, yaml.safe_load(Path(overlay).read_text()), COMPOSED_AFTER[overlay])
    where = Path(overlay).relative_to(REPO)
    assert not found, f"{where} restates what the configs before it already give: {', '.join(found)}"


def test_a_restated_key_is_found_only_when_every_chain_gives_it(parser):
    """A value quickstart.yaml sets is restated after it, a changed one is not, and a value that only one of
    two chains gives is needed after the other; a class an earlier file names is restated too."""
    samples = yaml.safe_load(Path(QUICKSTART).read_text())["model"]["eval_samples"]
    same = {"model": {"eval_samples": samples, "group_size": 3}, "data": {"val_size": 5}}
    assert restated(parser, same, [(QUICKSTART,)]) == ["model.eval_samples"]
    assert restated(parser, {"model": {"eval_samples": samples + 1}}, [(QUICKSTART,)]) == []
    tiny_groups = yaml.safe_load(Path(TINY).read_text())["model"]["group_size"]
    after_tiny = {"model": {"group_size": tiny_groups}}
    assert restated(parser, after_tiny, [(QUICKSTART, TINY)]) == ["model.group_size"]
    assert restated(parser, after_tiny, [(QUICKSTART,)]) == []  # quickstart.yaml leaves the default
    assert restated(parser, after_tiny, [(QUICKSTART, TINY), (QUICKSTART,)]) == []
    policy = {"class_path": "lightning_rlvr.models.TinyPolicy", "init_args": {"layers": 3}}
    assert restated(parser, {"model": {"policy": policy}}, [(QUICKSTART,)]) == ["model.policy.class_path"]
