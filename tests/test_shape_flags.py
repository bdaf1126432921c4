"""A setting that changes a parameter's shape against a checkpoint is one error line, exit 2, nothing written.

Width, layers, vocabulary and LoRA rank, through ``fit --ckpt_path``, ``test`` and ``validate`` (the flag is
named with the checkpoint's value); ``export`` and the credit lab, which take no model flags, refuse a
checkpoint whose settings no longer build its weights the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import QUICKSTART, REPO, TINY

from lightning_rlvr.cli import run as cli_run

LORA = str(REPO / "configs" / "peft" / "lora.yaml")
ENV = str(REPO / "tests" / "configs" / "tiny_env.yaml")
GRPO = str(REPO / "configs" / "method" / "grpo.yaml")
NO_WARM = ("--model.warm_start", "null", "--trainer.max_steps", "1")
# name: (the configs the checkpoint was trained with, the flag that changes a shape, the checkpoint's value)
CASES = {
    "width": ((), ("--model.policy.init_args.hidden", "64"), "32"),
    "layers": ((), ("--model.policy.init_args.layers", "2"), "1"),
    "mlp width": ((), ("--model.policy.init_args.intermediate", "128"), "64"),
    "vocabulary": ((GRPO, ENV), ("--model.policy.init_args.max_vocab", "40"), "4096"),
    "LoRA rank": ((LORA,), ("--model.lora.r", "4"), "8"),
    "LoRA added": ((), ("--model.lora", '{"r": 4}'), "null"),
    "LoRA removed": ((LORA,), ("--model.lora", "null"), '{"r": 8'),
}


def _fit(root: Path, configs: tuple[str, ...]) -> Path:
    args = [
        "fit",
        "--config",
        QUICKSTART,
        *[a for c in configs[:1] for a in ("--config", c)],
        "--config",
        TINY,
    ]
    args += [a for c in configs[1:] for a in ("--config", c)]
    args += [*NO_WARM, "--trainer.default_root_dir", str(root)]
    args += ["--trainer.logger.init_args.save_dir", str(root / "runs")]
    return Path(cli_run(args).trainer.checkpoint_callback.last_model_path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[tuple[str, ...], Path]:
    """One 1-step checkpoint for each set of training configs the cases use."""
    root = tmp_path_factory.mktemp("shapes")
    kinds = {configs for configs, _, _ in CASES.values()}
    return {configs: _fit(root / str(i), configs) for i, configs in enumerate(sorted(kinds))}


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize("subcommand", ["fit", "test", "validate"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_shape_changing_flag_is_one_line_naming_it_and_the_checkpoints_value(
    checkpoints, case, subcommand, tmp_path, capsys
):
    configs, flag, saved = CASES[case]
    ckpt = checkpoints[configs]
    before = _files(ckpt.parent.parent.parent)
    args = [subcommand, "--config", QUICKSTART, *[a for c in configs[:1] for a in ("--config", c)]]
    args += ["--config", TINY, *[a for c in configs[1:] for a in ("--config", c)], *NO_WARM]
    args += ["--trainer.default_root_dir", str(tmp_path / "out"), "--ckpt_path", str(ckpt), *flag]
    args += ["--model.eval_samples", "1"]  # a flag that changes no shape is not named
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli_run(args)
    assert exit_info.value.code == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("lightning-rlvr: error:")]
    assert len(lines) == 1, lines
    line = lines[0]
    named = f"{flag[0]} {flag[1]}"
    assert f"{named} (the checkpoint's: {saved}" in line, line
    assert "changes the shape of the checkpoint's weights" in line and "eval_samples" not in line
    assert "drop it" in line and "start a new run" in line
    assert not (tmp_path / "out").exists()  # nothing written: no log folder, no checkpoint
    assert _files(ckpt.parent.parent.parent) == before


@pytest.mark.parametrize("configs", [True, False], ids=["with its configs", "checkpoint alone"])
def test_several_shape_flags_are_named_together_and_a_harmless_flag_still_runs(
    checkpoints, configs, tmp_path, capsys
):
    ckpt = checkpoints[()]
    base = [
        "test",
        *(["--config", QUICKSTART, "--config", TINY] if configs else []),
        "--ckpt_path",
        str(ckpt),
    ]
    base += ["--trainer.default_root_dir", str(tmp_path)]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli_run([*base, "--model.policy.init_args.hidden=64", "--model.policy.init_args.layers", "3"])
    err = capsys.readouterr().err
    assert "--model.policy.init_args.hidden 64 (the checkpoint's: 32)" in err
    assert "--model.policy.init_args.layers 3 (the checkpoint's: 1)" in err and "change the shape" in err
    # a policy setting that changes no shape (its seed) and the checkpoint's own width both load
    ok = cli_run([*base, "--model.policy.init_args.hidden", "32", "--model.policy.init_args.seed", "5"])
    assert ok.model.model.config.hidden_size == 32 and ok.model.policy_source.seed == 5


def _edit_hparams(ckpt: Path, out: Path, **policy_args: int) -> Path:
    """A copy of ``ckpt`` whose settings build another shape than its weights (a policy source changed)."""
    checkpoint = torch.load(ckpt, weights_only=True, map_location="cpu")
    checkpoint["hyper_parameters"]["policy"]["init_args"].update(policy_args)
    torch.save(checkpoint, out)
    return out


@pytest.mark.parametrize("change", [{"hidden": 64}, {"layers": 2}])
def test_export_and_the_credit_lab_refuse_weights_their_settings_do_not_build(
    checkpoints, change, tmp_path, capsys
):
    from lightning_rlvr.cli import main as cli_main
    from lightning_rlvr.experiments.credit_lab import evaluate as credit_lab

    ckpt = _edit_hparams(checkpoints[()], tmp_path / "edited.ckpt", **change)
    for program, call in (
        (
            "lightning-rlvr",
            lambda: cli_main(["export", "--ckpt_path", str(ckpt), "--out", str(tmp_path / "x")]),
        ),
        (
            "lightning-rlvr-credit-eval",
            lambda: credit_lab.main(["--ckpt_path", str(ckpt), "--out", str(tmp_path / "y")]),
        ),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            call()
        assert exit_info.value.code == 2
        lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith(f"{program}: error:")]
        assert len(lines) == 1 and "the checkpoint's weights do not fit the model" in lines[0], lines
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
