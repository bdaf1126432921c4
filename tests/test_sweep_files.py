"""Every shipped sweep file: each of its runs starts at test scale, a tuning sweep tunes its main sweep
on the same task and evaluation, and a control sweep changes only what it states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_rlvr.experiments.sweep import commands as swc
from lightning_rlvr.experiments.sweep.spec import Run, expand, load_sweep
from tests.conftest import BASE_TEST_SCALE, METHOD_TEST_SCALE, REPO, TINY

SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))


# Overrides that only scale a run (how long, how many, how fast it learns), never whether it starts:
# a run differing from one already started in this session only in these is not started again.
SCALE_KEYS = ("trainer.", "checkpoint.", "data.", "seed_everything", "model.lr", "model.max_new_tokens")
SCALE_KEYS += ("model.task.init_args.digits", "model.warm_start.init_args.min_accuracy")
# Set back to the test scale (its configs' values) after the run's own configs and overrides: the batch
# and evaluation sizes, and an environment's game pool (a sweep that asks for more held-out games would
# otherwise generate them, seconds each).
PINNED = ("data.batch_size", "data.val_size", "data.test_size")
PINNED += tuple(f"model.task.init_args.{split}_games" for split in ("train", "val", "test"))
SCALE_KEYS += PINNED
STARTED: set = set()


def _start_key(run: Run) -> tuple:
    return run.configs, tuple((k, json.dumps(v)) for k, v in run.overrides if not k.startswith(SCALE_KEYS))


def _test_scale(base: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The test-scale configs of the base configs (``BASE_TEST_SCALE``, default tiny.yaml) and the
    ``PINNED`` values they set, as CLI flags."""
    scale = tuple(c for b in base for c in BASE_TEST_SCALE.get(Path(b).stem, ())) or (TINY,)
    merged = swc._merged_config(Run("scale", scale, (), (), None))
    pins = []
    for key in PINNED:
        node = merged
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            pins.append(f"--{key}={swc.cli_value(node)}")
    return scale, pins


@pytest.mark.parametrize("sweep_file", SWEEPS, ids=lambda p: p.stem)
def test_every_sweep_file_starts_each_of_its_runs(sweep_file, run_cli, monkeypatch, tmp_path):
    """Each distinct combination of config files and non-scale overrides in the sweep runs one
    ``fast_dev_run`` step with the run's overrides (once per test session: the lr-tuning sweeps repeat
    their main sweep's runs); the test-scale configs of its base configs (tiny.yaml; for the agent
    quickstart also tiny_textworld.yaml) go right after them, so method files and the sweep's overrides
    still apply over them (HP-RLVR keeps G = 1, the task stays the sweep's), and the batch, evaluation
    and game-pool sizes go back to test scale after the run's overrides."""
    monkeypatch.chdir(REPO)
    sweep = load_sweep(sweep_file, out=tmp_path / "out")
    runs = expand(sweep)
    assert runs and len({r.run_id for r in runs}) == len(runs)
    distinct = {_start_key(r): r for r in runs}
    base = len(sweep.configs)
    scale, pins = _test_scale(tuple(sweep.configs))
    for key, run in distinct.items():
        if key in STARTED:
            continue
        STARTED.add(key)
        configs = (*run.configs[:base], *scale, *run.configs[base:])
        configs += tuple(c for f in configs for c in METHOD_TEST_SCALE.get(Path(f).stem, ()))  # OPD's teacher
        args = swc._override_args(run.overrides) + pins + ["--trainer.fast_dev_run=true"]
        cli = run_cli("fit", *args, configs=configs, root=tmp_path / run.run_id)
        assert cli.model.rl_step == 1, run.run_id
        sizes = {k: v for k, v in (p[2:].split("=", 1) for p in pins)}
        assert sizes.get("data.batch_size") == str(cli.datamodule.batch_size)  # the pins won
        if "model.task.init_args.test_games" in sizes:
            assert sizes["model.task.init_args.test_games"] == str(cli.model.task.size("test"))
        grid_files = Run(run.run_id, run.configs[base:], (), (), None)
        group_size = swc._merged_config(grid_files).get("model", {}).get("group_size")
        if group_size is not None:  # a method file's own G wins over the test scale's
            assert cli.model.group_size == group_size


@pytest.mark.parametrize("tuning", sorted((REPO / "sweeps").glob("lr_tuning_*.yaml")), ids=lambda p: p.stem)
def test_a_tuning_sweep_tunes_its_main_sweep_on_the_same_task_and_evaluation(tuning, monkeypatch):
    """What the lr was chosen on must be what it is used on: same configs, task, warm start and evaluation,
    every method of the main sweep, the lr as the only extra axis, and the report choosing it."""
    monkeypatch.chdir(REPO)
    main = load_sweep(REPO / "sweeps" / tuning.name.replace("lr_tuning_", "methods_"))
    tune = load_sweep(tuning)
    assert tune.configs == main.configs and tune.test_overrides == main.test_overrides
    # tuning may be shorter, and the main sweep may validate more often (a finer time-to-target): how often
    # validation runs does not change training (test_module); everything else is shared
    free = {"trainer.max_steps", "trainer.val_check_interval"}
    assert {k: v for k, v in tune.overrides.items() if k not in free} == {
        k: v for k, v in main.overrides.items() if k not in free
    }
    assert tune.grid["config:method"] == main.grid["config:method"]
    assert set(tune.grid) - set(main.grid) == {"model.lr"} and len(tune.grid["model.lr"]) >= 3
    assert tune.report.choose == "model.lr" and main.report.baseline == {"method": "grpo"}
    assert set(main.axis_overrides) <= {"method"}  # the chosen lrs are keyed to the method axis


@pytest.mark.parametrize("control", sorted((REPO / "sweeps").glob("control_*.yaml")), ids=lambda p: p.stem)
def test_a_control_sweep_reruns_its_main_sweeps_runs_with_only_the_stated_change(control, monkeypatch):
    """A control (control_<main>_<what>.yaml) is read against its main sweep's runs seed by seed, so it
    must be those runs but for what it changes: same configs, task, warm start recipe, horizon and
    evaluation, methods and seeds from the main sweep's grid, and either an lr axis (a rate another
    method of the main sweep runs at) or the main sweep's own lr for each method."""
    monkeypatch.chdir(REPO)
    stem = control.stem.removeprefix("control_")
    (main_file,) = [m for m in (REPO / "sweeps").glob("methods_*.yaml") if stem.startswith(m.stem[8:] + "_")]
    main, ctl = load_sweep(main_file), load_sweep(control)
    assert ctl.configs == main.configs and ctl.test_overrides == main.test_overrides
    assert ctl.overrides == main.overrides
    assert set(ctl.grid) - {"model.lr"} == set(main.grid)
    assert set(ctl.grid["seed_everything"]) <= set(main.grid["seed_everything"])
    assert all(m in main.grid["config:method"] for m in ctl.grid["config:method"])
    chosen = main.axis_overrides["method"]
    if "model.lr" in ctl.grid:
        assert not {v["model.lr"] for v in chosen.values()}.isdisjoint(ctl.grid["model.lr"])
    else:
        assert ctl.axis_overrides["method"] == {m: chosen[m] for m in ctl.axis_overrides["method"]}
    for path in ctl.report.include:  # what it is read against exists, and is the main sweep's
        assert (REPO / path).resolve() == (REPO / main.report_dir / "results.csv").resolve()
        assert (REPO / path).is_file()
