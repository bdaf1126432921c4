"""The command line end to end at test scale: fit, test from a checkpoint, resume, configs, errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from tests.conftest import METHOD_TEST_SCALE, QUICKSTART, REPO, TINY

CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))


def metrics_rows(root: Path) -> list[dict]:
    (path,) = root.glob("runs/**/metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


def test_fit_two_steps_from_yaml_logs_the_metrics(run_cli, tmp_path):
    cli = run_cli("fit")
    assert cli.trainer.global_step == 2
    assert cli.model.rl_step == 2
    rows = metrics_rows(tmp_path)
    columns = set(rows[0])
    for name in [
        "train/reward_mean",
        "train/reward_std",
        "train/frac_zero_std",
        "train/completion_len",
        "train/clip_frac",
        "train/entropy",
        "train/grad_norm",
        "time/rollout_s",
        "time/score_s",
        "time/credit_s",
        "time/update_s",
        "perf/tokens_per_s",
        "val/pass@1",
    ]:
        assert name in columns, name
    train = [r for r in rows if r["train/reward_mean"]]
    assert len(train) == 2
    val = [float(r["val/pass@1"]) for r in rows if r["val/pass@1"]]
    assert len(val) == 2  # before RL and at step 2
    assert all(0.0 <= v <= 1.0 for v in val)
    assert (tmp_path / "runs" / "quickstart").is_dir()


def test_test_from_checkpoint_needs_no_config(run_cli, tmp_path):
    fit = run_cli("fit", "--model.credit.init_args.scale_by_std", "false")
    ckpt = Path(fit.trainer.checkpoint_callback.last_model_path)
    assert ckpt.is_file()
    cli = run_cli(
        "test", "--ckpt_path", str(ckpt), "--data.test_size", "8", configs=(), root=tmp_path / "eval"
    )
    assert cli.model.credit.scale_by_std is False  # the method came back from the checkpoint
    assert cli.model.task.digits == 1  # so did the task
    metrics = cli.trainer.callback_metrics
    assert {"test/pass@1", "test/pass@2", "test/maj@2"} <= set(metrics)
    assert 0.0 <= float(metrics["test/pass@1"]) <= float(metrics["test/pass@2"]) <= 1.0
    assert 0.0 <= float(metrics["test/maj@2"]) <= float(metrics["test/pass@2"])  # a vote needs one right
    # 8 test prompts x eval_samples: pass@1 x samples is a whole number of successes
    samples = float(metrics["test/samples"])
    assert samples == 8 * cli.model.eval_samples
    successes = float(metrics["test/pass@1"]) * samples
    assert successes == pytest.approx(round(successes))
    trained = torch.load(ckpt, weights_only=True)["state_dict"]
    for name, value in cli.model.state_dict().items():
        if name in trained:
            assert torch.equal(value, trained[name]), name


def test_resume_matches_an_uninterrupted_run(run_cli, tmp_path):
    straight = run_cli("fit", "--trainer.max_steps", "4", root=tmp_path / "straight")
    first = run_cli("fit", "--trainer.max_steps", "2", root=tmp_path / "resumed")
    ckpt = first.trainer.checkpoint_callback.last_model_path
    resumed = run_cli("fit", "--trainer.max_steps", "4", "--ckpt_path", ckpt, root=tmp_path / "resumed2")
    assert resumed.model.rl_step == 4
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    opt_a = straight.trainer.optimizers[0].state_dict()["state"]
    opt_b = resumed.trainer.optimizers[0].state_dict()["state"]
    for k in opt_a:
        torch.testing.assert_close(opt_a[k]["exp_avg"], opt_b[k]["exp_avg"], rtol=0, atol=0)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_matches_the_code_signatures(config, run_cli, capsys):
    configs = (str(config),) if config.name.startswith("quickstart") else (QUICKSTART, str(config))
    if config.parent.name == "agent":  # a method's episode settings: after the agent quickstart and method
        agent, method = REPO / "configs" / "quickstart_agent.yaml", REPO / "configs" / "method" / config.name
        configs = (str(agent), str(method), str(config))
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--print_config", configs=configs)
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "model:" in printed and "credit:" in printed


def test_malformed_yaml_is_one_clear_error(run_cli, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  group_size: [unclosed\n")
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", configs=(QUICKSTART, str(bad)))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err.lower() and "Traceback" not in err


def test_unknown_class_path_is_one_clear_error(run_cli, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--model.credit", "lightning_rlvr.credit.NoSuchCredit")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "NoSuchCredit" in err and "Traceback" not in err


def test_wrong_value_type_is_one_clear_error(run_cli, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--model.loss.init_args.loss_agg", "sequence_average")
    assert exit_info.value.code == 2
    assert "loss_agg" in capsys.readouterr().err


def test_row_without_answer_is_one_clear_error(run_cli, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2"}\n')
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            "fit",
            "--model.task.init_args.train_file",
            str(data),
            "--model.task.init_args.test_file",
            str(data),
            "--model.warm_start",
            "null",
            configs=(QUICKSTART, TINY, str(REPO / "configs/task/jsonl.yaml")),
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "train.jsonl: row 1 has no 'answer'" in err and "Traceback" not in err


METHODS = sorted((REPO / "configs" / "method").glob("*.yaml"))


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_every_method_fits_at_test_scale(method, run_cli, tmp_path):
    cli = run_cli("fit", configs=(QUICKSTART, str(method), TINY, *METHOD_TEST_SCALE.get(method.stem, ())))
    assert cli.model.rl_step == 2
    rows = [r for r in metrics_rows(tmp_path) if r.get("train/reward_mean")]
    assert len(rows) == 2
    for r in rows:
        assert float(r["train/skipped_updates"]) == 0.0
        assert torch.isfinite(torch.tensor(float(r["train/grad_norm"])))


def test_flags_given_with_a_checkpoint_win_over_its_hyperparameters(run_cli, tmp_path):
    """``test --ckpt_path`` rebuilds the module from the checkpoint; a --model flag on the same command
    line (top-level or nested, ``--k v`` or ``--k=v``) changes what it says, everything else stays."""
    fit = run_cli("fit", "--model.credit.init_args.scale_by_std", "false")
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    assert fit.model.eval_samples == 2
    cli = run_cli(
        "test",
        "--ckpt_path",
        ckpt,
        "--data.test_size",
        "4",
        "--model.eval_samples",
        "4",
        "--model.credit.init_args.scale_by_std=true",
        configs=(),
        root=tmp_path / "eval",
    )
    assert cli.model.eval_samples == 4 and "test/pass@4" in cli.trainer.callback_metrics
    assert cli.model.credit.scale_by_std is True
    assert cli.model.task.digits == 1 and cli.model.group_size == fit.model.group_size  # the checkpoint's
    resumed = run_cli("fit", "--ckpt_path", ckpt, "--trainer.max_steps", "3", "--model.lr", "1.0e-5")
    assert resumed.model.lr == 1.0e-5 and resumed.model.credit.scale_by_std is False


def test_lora_fit_after_warm_start_and_test_from_its_checkpoint(run_cli, tmp_path):
    lora = str(REPO / "configs" / "peft" / "lora.yaml")
    fit = run_cli("fit", "--model.loss.init_args.kl_beta", "0.05", configs=(QUICKSTART, TINY, lora))
    assert hasattr(fit.model.model, "disable_adapter")  # adapters on top of the warm-started base
    assert "train/kl" in fit.trainer.callback_metrics
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    cli = run_cli("test", "--ckpt_path", ckpt, "--data.test_size", "4", configs=(), root=tmp_path / "eval")
    trained = torch.load(ckpt, weights_only=True)["state_dict"]
    assert any("lora_" in k for k in trained)
    for name, value in cli.model.state_dict().items():
        assert torch.equal(value, trained[name]), name


def test_activation_checkpointing_and_bf16_mixed_fit(run_cli):
    cli = run_cli("fit", "--model.gradient_checkpointing", "true", "--trainer.precision", "bf16-mixed")
    assert cli.model.model.is_gradient_checkpointing
    assert cli.trainer.precision == "bf16-mixed" and cli.model.rl_step == 2
    assert torch.isfinite(cli.trainer.callback_metrics["train/entropy"])


def test_a_damaged_warm_start_cache_is_rebuilt(run_cli, tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path / "cache"))
    first = run_cli("fit", "--trainer.max_steps", "1", root=tmp_path / "a")
    (entry,) = (tmp_path / "cache" / "warmstart").iterdir()
    for f in entry.glob("*.safetensors"):
        os.remove(f)  # what an interrupted or foreign write leaves behind
    again = run_cli("fit", "--trainer.max_steps", "1", root=tmp_path / "b")
    assert again.model.warm_start_summary["cached"] is False
    assert any(entry.glob("*.safetensors"))
    assert first.model.warm_start_summary["steps"] == again.model.warm_start_summary["steps"]
