"""The sweep file: grid expansion, run ids, axis overrides, report settings and their errors."""

from __future__ import annotations

import itertools
import re

import pytest

from lightning_rlvr.experiments.sweep import commands as swc
from lightning_rlvr.experiments.sweep import run as sw
from lightning_rlvr.experiments.sweep.checks import SweepError
from lightning_rlvr.experiments.sweep.spec import Run, expand, load_sweep
from tests.conftest import write


def test_grid_is_the_cartesian_product_with_config_file_axes(grid_sweep):
    sweep = load_sweep(grid_sweep)
    runs = expand(sweep)
    assert len(runs) == 2 * 2 * 3
    # beta is listed first; the glob adds alpha and does not repeat beta
    assert [r.configs for r in runs[::6]] == [
        ("base.yaml", "method/beta.yaml"),
        ("base.yaml", "method/alpha.yaml"),
    ]
    combos = {
        (r.configs[-1], dict(r.overrides)["model.lr"], dict(r.overrides)["seed_everything"]) for r in runs
    }
    expected = itertools.product(["method/beta.yaml", "method/alpha.yaml"], [1.0e-4, 5.0e-5], [0, 1, 2])
    assert combos == set(expected)
    assert all(dict(r.overrides)["trainer.max_steps"] == 3 for r in runs)  # fixed overrides on every run
    assert runs[0].run_id == "beta__lr=0.0001__seed=0"
    assert runs[0].cell == (("method", "beta"), ("model.lr", "0.0001"))
    assert runs[0].seed == "0"
    ids = [r.run_id for r in runs]
    assert len(set(ids)) == len(ids)
    assert [r.run_id for r in expand(load_sweep(grid_sweep))] == ids  # stable across invocations


def test_run_ids_stay_unique_when_two_config_files_share_a_stem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a" / "m.yaml", "model: {lr: 1.0e-4}\n")
    write(tmp_path / "b" / "m.yaml", "model: {lr: 2.0e-4}\n")
    path = write(tmp_path / "s.yaml", "grid:\n  config: [a/m.yaml, b/m.yaml]\n  seed_everything: [0]\n")
    ids = [r.run_id for r in expand(load_sweep(path))]
    assert len(set(ids)) == 2 and all(i.startswith("m__seed=0-") for i in ids)
    assert ids == [r.run_id for r in expand(load_sweep(path))]


def test_bad_sweep_file_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "s.yaml", "grid:\n  config: [missing.yaml]\n")
    assert sw.main([str(path), "--dry-run"]) == 2
    assert "missing.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("jobs: two\n", "jobs"),
        ("jobs: 0\n", "jobs"),
        ("jobs: [2]\n", "jobs"),
        ("jobs: true\n", "jobs"),
        ("name: [a]\n", "name"),
        ("out: {a: 1}\n", "out"),
        ("report_dir: 3\n", "report_dir"),
        ("configs: 5\n", "configs"),
        ("configs: [5]\n", "configs"),
        ("overrides: [a, b]\n", "overrides"),
        ("overrides: {5: 1}\n", "overrides"),
        ("test_overrides: abc\n", "test_overrides"),
        ("env: [a]\n", "env"),
        ("env: {A: {b: 1}}\n", "env"),
        ("slurm: abc\n", "slurm"),
        ("seed_key: 5\n", "seed_key"),
        ("grid: [1, 2]\n", "grid"),
        ("grid: {5: [1]}\n", "grid"),
        ("axis_overrides: {method: {alpha: {5: 1}}}\n", "axis_overrides.method.alpha"),
        ("report: {level: high}\n", "report.level"),
        ("report: {power: [0.8]}\n", "report.power"),
        ("report: {target_accuracy: abc}\n", "report.target_accuracy"),
        ("report: {compare: 5}\n", "report.compare"),
        ("report: {compare: []}\n", "report.compare"),
        ("report: {choose: 5}\n", "report.choose"),
        ("report: {choose_by: [a]}\n", "report.choose_by"),
        ("grid: [\n", "not valid YAML (line"),
        ("\x00\x01", "not valid YAML"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_error_line_naming_its_key(grid_sweep, capsys, text, names):
    """Each key of a sweep file checked for type: a traceback (ValueError, TypeError, AttributeError from
    deep in the expansion) used to stand where the key and what it must be belong."""
    base = grid_sweep.read_text()
    replaced = {line.split(":")[0] for line in text.splitlines() if ":" in line and not line.startswith(" ")}
    kept = [blk for blk in re.split(r"\n(?=\S)", base) if blk.split(":")[0] not in replaced]
    path = write(grid_sweep, "\n".join(kept).rstrip("\n") + "\n" + text)
    calls = []
    assert sw.main([str(path), "--dry-run"], runner=lambda *a: calls.append(a) or 0) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0] and "Traceback" not in err[0] and calls == []


@pytest.mark.parametrize(
    ("config", "override"),
    [
        ("model:\n  lr: 1.0e-4\n", "model.lr.value"),  # a number where a section is needed
        ("model:\n  warm_start: null\n", "model.warm_start.steps"),  # null
        ("model:\n  credit: lightning_rlvr.credit.GRPOCredit\n", "model.credit.init_args.scale_by_std"),
        ("trainer:\n  logger: false\n", "trainer.logger.init_args.save_dir"),  # two levels down
        ("model:\n  tags: [a, b]\n", "model.tags.first"),  # a list
    ],
)
def test_override_under_a_non_mapping_is_one_clear_error(tmp_path, monkeypatch, capsys, config, override):
    """It used to be written into a throwaway dict and silently dropped."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "base.yaml", config)
    path = write(tmp_path / "s.yaml", f"configs: [base.yaml]\ngrid:\n  {override}: [1, 2]\n")
    calls = []
    assert sw.main([str(path), "--dry-run"], runner=lambda *a: calls.append(a) or 0) == 2
    err = capsys.readouterr().err.strip()
    section = ".".join(override.split(".")[:2])
    assert len(err.splitlines()) == 1 and override in err and f"{section}:" in err
    assert calls == []
    # the same override in the fixed overrides is caught too
    path = write(tmp_path / "f.yaml", f"configs: [base.yaml]\noverrides: {{{override}: 3}}\n")
    assert sw.main([str(path), "--dry-run"]) == 2


def test_axis_overrides_give_each_method_its_own_lr(grid_sweep):
    text = grid_sweep.read_text().replace("  model.lr: [1.0e-4, 5.0e-5]\n", "")
    write(
        grid_sweep, text + "axis_overrides:\n  method:\n    alpha: {model.lr: 2.0e-4, model.group_size: 2}\n"
    )
    runs = expand(load_sweep(grid_sweep))
    lr = {r.run_id: dict(r.overrides).get("model.lr") for r in runs}
    assert lr == {
        f"{m}__seed={s}": (2.0e-4 if m == "alpha" else None) for m in ("beta", "alpha") for s in range(3)
    }
    alpha = next(r for r in runs if r.run_id == "alpha__seed=0")
    assert swc._merged_config(alpha)["model"] == {
        "group_size": 2,
        "loss": {"init_args": {"loss_agg": "seq_mean"}},
        "lr": 2.0e-4,
    }
    assert ("--model.lr", "0.0002") in zip(
        swc.fit_command(load_sweep(grid_sweep), alpha)[:-1],
        swc.fit_command(load_sweep(grid_sweep), alpha)[1:],
    )


def test_axis_overrides_keyed_by_a_numeric_axis_value(grid_sweep):
    write(
        grid_sweep,
        grid_sweep.read_text() + "axis_overrides:\n  model.lr:\n    5.0e-5: {model.group_size: 16}\n",
    )
    runs = expand(load_sweep(grid_sweep))
    assert {r.run_id for r in runs if dict(r.overrides).get("model.group_size") == 16} == {
        f"{m}__lr=5e-05__seed={s}" for m in ("beta", "alpha") for s in range(3)
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("axis_overrides:\n  optimiser: {alpha: {model.lr: 1}}\n", "no such grid axis"),
        ("axis_overrides:\n  method: {gamma: {model.lr: 1}}\n", "not a value of that axis"),
        ("axis_overrides:\n  method: {alpha: {model.lr: 1}}\n", "also a grid axis"),
        ("axis_overrides:\n  method: {alpha: 3}\n", "must map dotted keys"),
        ("report: {baseline: gamma}\n", "is not a value of method"),
        ("report: {baseline: {task: x}}\n", "no grid axis 'task'"),
        ("report: {target_accuracy: 30}\n", "target_accuracy must be in (0, 1]"),
        ("report: {treshold: 0.3}\n", "unknown report keys ['treshold']"),
    ],
)
def test_bad_axis_overrides_and_report_settings_are_one_clear_error(grid_sweep, extra, message):
    write(grid_sweep, grid_sweep.read_text() + extra)
    with pytest.raises(SweepError, match=re.escape(message)):
        load_sweep(grid_sweep)


def test_report_baseline_defaults_to_the_first_axis_value_and_accepts_a_plain_value(grid_sweep):
    assert load_sweep(grid_sweep).report.baseline == {"method": "beta"}
    write(grid_sweep, grid_sweep.read_text() + "report: {baseline: alpha, compare: val/pass@1_final}\n")
    report = load_sweep(grid_sweep).report
    assert report.baseline == {"method": "alpha"} and report.compare == ["val/pass@1_final"]


def test_nested_overrides_into_mappings_and_new_sections_are_merged():
    run = Run(
        run_id="r",
        configs=(),
        overrides=(("model.credit.init_args.window", 8), ("model.lora.r", 4), ("model.lr", 0.1)),
        cell=(),
        seed=None,
    )
    assert swc._merged_config(run) == {
        "model": {"credit": {"init_args": {"window": 8}}, "lora": {"r": 4}, "lr": 0.1}
    }


def test_no_sweep_module_imports_the_entry_point():
    """``sweep/run.py`` is the command line: every other sweep module works without it (cycles inside a
    floor are ``tests/test_layers.py``'s)."""
    from tests.test_layers import import_graph

    graph = import_graph()
    sweep = [m for m in graph if m.startswith("lightning_rlvr.experiments.sweep.")]
    assert len(sweep) > 5
    importers = [m for m in sweep if "lightning_rlvr.experiments.sweep.run" in graph[m]]
    assert importers == [], importers


def test_a_named_config_value_is_a_cell_of_its_own_with_its_own_overrides(tmp_path, monkeypatch):
    """``{NAME: FILES}`` runs a method file a second time as cell NAME (the method at its own rate beside
    the cell at the baseline's), with axis_overrides keyed to NAME; a bad name or a clash is one error."""
    monkeypatch.chdir(tmp_path)
    for name in ("grpo", "sc_grpo"):
        (tmp_path / f"{name}.yaml").write_text("model: {}\n")

    def sweep(values: str) -> list:
        (tmp_path / "s.yaml").write_text(
            f'out: out\noverrides: {{model.lr: 0.0004}}\ngrid:\n  "config:method": {values}\n'
            "  seed_everything: [1]\naxis_overrides:\n  method:\n    own_rate: {model.lr: 0.0008}\n"
        )
        return expand(load_sweep(tmp_path / "s.yaml"))

    runs = sweep("[grpo.yaml, sc_grpo.yaml, {own_rate: sc_grpo.yaml}]")
    assert [r.run_id for r in runs] == ["grpo__seed=1", "sc_grpo__seed=1", "own_rate__seed=1"]
    assert [dict(r.cell)["method"] for r in runs] == ["grpo", "sc_grpo", "own_rate"]
    assert runs[1].configs == runs[2].configs == ("sc_grpo.yaml",)
    assert [dict(r.overrides)["model.lr"] for r in runs] == [0.0004, 0.0004, 0.0008]
    for bad, said in [
        ("[grpo.yaml, {own_rate: sc_grpo.yaml, other: grpo.yaml}]", "one NAME: FILES pair"),
        ("[grpo.yaml, {own rate: sc_grpo.yaml}]", "letters, digits"),
        ("[grpo.yaml, {grpo: sc_grpo.yaml}]", "two values are called ['grpo']"),
        ("[grpo.yaml, {own_rate: missing.yaml}]", "not found"),
    ]:
        with pytest.raises(SweepError, match=re.escape(said)):
            sweep(bad)
