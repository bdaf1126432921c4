"""A finished run survives a config file rewritten without changing its settings, and only that."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from lightning_rlvr.experiments.sweep import identity, settings
from lightning_rlvr.experiments.sweep.commands import fit_command
from lightning_rlvr.experiments.sweep.spec import DONE, SPEC, Run, Sweep, expand, load_sweep, run_dir

REPO = Path(__file__).resolve().parents[1]


def test_differences_names_each_changed_setting_and_skips_how_the_fit_started() -> None:
    ran = {"model": {"lr": 1e-4, "loss": {"class_path": "a.B", "init_args": {"x": 1}}}, "ckpt_path": "a"}
    assert settings.differences(ran, {**ran, "ckpt_path": None}) == []
    now = {"model": {"lr": 2e-4, "loss": {"class_path": "a.B", "init_args": {"x": 2}}}}
    assert settings.differences(ran, now) == ["model.loss.init_args.x", "model.lr"]
    swapped = {"model": {"lr": 1e-4, "loss": {"class_path": "a.C", "init_args": {"x": 1}}}}
    assert settings.differences(ran, swapped) == ["model.loss.class_path"]
    assert settings.differences(ran, {"model": {"lr": 1e-4}}) == ["model.loss"]  # removed since


def test_an_option_added_since_the_run_matches_only_at_the_codes_default() -> None:
    ran = {"model": {"lr": 1e-4}}
    assert settings.differences(ran, {"model": {"lr": 1e-4, "group_size": 8}}) == []  # RLVRModule's default
    assert settings.differences(ran, {"model": {"lr": 1e-4, "group_size": 4}}) == ["model.group_size"]
    unknown = {"model": {"lr": 1e-4, "no_such_option": 1}}
    assert settings.differences(ran, unknown) == ["model.no_such_option"]  # no default to compare with
    loss = {"class_path": "lightning_rlvr.losses.PPOClip", "init_args": {"eps_low": 0.2}}
    grown = {"class_path": loss["class_path"], "init_args": {"eps_low": 0.2, "eps_high": 0.2}}
    assert settings.differences({"model": {"loss": loss}}, {"model": {"loss": grown}}) == []


def test_a_run_sampled_from_the_stream_is_not_the_run_of_a_sweep_that_now_samples_keyed(
    tmp_path: Path,
) -> None:
    # set in a config file: the resolved settings differ (also for a run saved before the option existed)
    stream, keyed = ({"model": {"lr": 1e-4, "sampling_key": k}} for k in ("stream", "keyed"))
    assert settings.differences(stream, keyed) == ["model.sampling_key"]
    assert settings.differences({"model": {"lr": 1e-4}}, keyed) == ["model.sampling_key"]
    assert settings.differences({"model": {"lr": 1e-4}}, stream) == []  # the default: what it ran
    # set in the sweep file's overrides: the run's recorded spec differs (no config is resolved)
    sweep_file = tmp_path / "s.yaml"

    def sweep_run(key: str) -> tuple[Sweep, Run]:
        where = f"out: {tmp_path / 'out'}\nreport_dir: {tmp_path / 'r'}\nconfigs: []\n"
        sweep_file.write_text(where + f"overrides: {{model.sampling_key: {key}}}\n")
        sweep = load_sweep(sweep_file)
        (run,) = expand(sweep)
        return sweep, run

    sweep, run = sweep_run("stream")
    d = run_dir(sweep, run)
    d.mkdir(parents=True)
    (d / SPEC).write_text(json.dumps(identity.run_spec(run)))
    (d / DONE).write_text("{}")
    assert identity.is_finished(sweep, run)
    sweep, run = sweep_run("keyed")
    assert run_dir(sweep, run) == d and not identity.is_finished(sweep, run)


def test_a_rewritten_config_keeps_its_run_and_a_changed_value_does_not(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    method = tmp_path / "method.yaml"
    method.write_text("model:\n  credit:\n    class_path: lightning_rlvr.credit.GRPOCredit\n")
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(
        f"out: {tmp_path / 'out'}\nreport_dir: {tmp_path / 'report'}\n"
        f"configs: [configs/quickstart.yaml, {method}]\ngrid:\n  seed_everything: [0]\n"
    )
    sweep = load_sweep(sweep_file)
    (run,) = expand(sweep)
    d = run_dir(sweep, run)
    saved = d / settings.RESOLVED
    saved.parent.mkdir(parents=True)
    saved.write_text(yaml.safe_dump(settings._print_config(tuple(fit_command(sweep, run)))))
    (d / SPEC).write_text(json.dumps(identity.run_spec(run)))
    (d / DONE).write_text("{}")
    assert identity.is_finished(sweep, run)

    # the method file now restates a default (another digest, the same settings): still finished
    method.write_text(method.read_text() + "    init_args:\n      scale_by_std: true\n")
    assert identity.stale_configs(sweep, run) == [str(method)]
    assert identity.is_finished(sweep, run)
    assert identity.stale_configs(sweep, run) == []  # re-recorded: the check runs once

    # a value changed: another run
    method.write_text(method.read_text().replace("true", "false"))
    assert not identity.is_finished(sweep, run)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_a_run_archived_without_its_resolved_config_is_judged_by_the_committed_file_it_read(
    tmp_path: Path, monkeypatch
) -> None:
    """Archives made before resolved configs were kept hold only each file's digest: the version of the
    file with that digest is found in git and resolved beside the file now, so a rewrite that sets the
    same values keeps the run, and a changed value or a version git never saw does not."""
    monkeypatch.chdir(tmp_path)
    _git(tmp_path, "init", "-q")
    method = Path("method.yaml")
    method.write_text("model:\n  credit:\n    class_path: lightning_rlvr.credit.GRPOCredit\n")
    _git(tmp_path, "add", "method.yaml")
    _git(tmp_path, "commit", "-q", "-m", "the file as the run read it")
    Path("s.yaml").write_text(
        f"out: out\nreport_dir: report\nconfigs: [{REPO / 'configs/quickstart.yaml'}, method.yaml]\n"
        "grid:\n  seed_everything: [0]\n"
    )
    sweep = load_sweep(Path("s.yaml"))
    (run,) = expand(sweep)
    d = run_dir(sweep, run)
    d.mkdir(parents=True)
    recorded = identity.run_spec(run)
    (d / DONE).write_text("{}")

    def finished_after(text: str, spec: dict = recorded) -> bool:
        method.write_text(text)
        (d / SPEC).write_text(json.dumps(spec))
        return identity.is_finished(sweep, run)

    base = "model:\n  credit:\n    class_path: lightning_rlvr.credit.GRPOCredit\n"
    assert not (d / settings.RESOLVED).exists()
    assert finished_after(base + "    init_args:\n      scale_by_std: true\n")  # a default restated
    assert identity.stale_configs(sweep, run) == []  # re-recorded with the digest of the file now
    assert not finished_after(base + "    init_args:\n      scale_by_std: false\n")  # a value changed
    unknown = {**recorded, "config_digests": {**recorded["config_digests"], "method.yaml": "0" * 16}}
    assert not finished_after(base + "    init_args:\n      scale_by_std: true\n", unknown)  # never committed
