"""Two processes on CPU (gloo): FSDP2 training, checkpoints, and the same update as one process.

These launch real processes with ``torch.distributed.run``, so each takes tens
of seconds; they are the only tests that do.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.losses import PPOClip
from lightning_rlvr.scoring.scorer import Scorer
from tests.conftest import QUICKSTART, REPO, TINY
from tests.rollouts import sample

SCRIPT = REPO / "tests" / "scripts" / "update_equivalence.py"


def _run(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank: a hung collective must not linger
        out, _ = proc.communicate()
        raise AssertionError("distributed run timed out:\n" + out[-3000:]) from None
    assert proc.returncode == 0, out[-3000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(n: int) -> list[str]:
    port = str(_free_port())  # a fixed port would collide with concurrent runs; 0 is not passed through
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n), "--master_port", port]


def test_two_ranks_with_half_the_prompts_make_the_update_of_one_rank(tmp_path):
    _run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "one.pt")], tmp_path)
    _run(_torchrun(2) + [str(SCRIPT), "--out", str(tmp_path / "two.pt")], tmp_path)
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    init = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64).load()[0].state_dict()
    for agg in ("seq_mean", "token_mean", "constant"):
        for name, grad in one[agg]["grads"].items():
            torch.testing.assert_close(
                two[agg]["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=f"{agg} {name}"
            )
        moved = max((p - init[k]).abs().max().item() for k, p in one[agg]["params"].items())
        assert moved > 1e-3, "the update must move the weights for the comparison to mean anything"
        for name, param in one[agg]["params"].items():
            torch.testing.assert_close(two[agg]["params"][name], param, rtol=1e-4, atol=1e-5)


def test_fsdp2_fit_checkpoint_and_test_in_a_fresh_process(tmp_path, run_cli):
    ckpts = tmp_path / "ckpt"
    fit = [
        "-m",
        "lightning_rlvr.cli",
        "fit",
        "--config",
        QUICKSTART,
        "--config",
        TINY,
        "--config",
        str(REPO / "configs/strategy/fsdp2.yaml"),
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--checkpoint.dirpath",
        str(ckpts),
    ]
    _run(_torchrun(2) + fit, tmp_path)
    ckpt = ckpts / "last.ckpt"
    assert ckpt.is_file()  # one consolidated file, not a sharded directory
    state = torch.load(ckpt, weights_only=True)
    assert state["global_step"] == 2 and state["rlvr"]["rl_step"] == 2
    cli = run_cli(
        "test", "--ckpt_path", str(ckpt), "--data.test_size", "8", configs=(), root=tmp_path / "eval"
    )
    assert "test/pass@1" in cli.trainer.callback_metrics
    for name, value in cli.model.state_dict().items():
        if name in state["state_dict"]:
            assert torch.equal(value, state["state_dict"][name]), name


def test_nonfinite_loss_on_one_rank_skips_everywhere_and_each_rank_resumes_its_own_credit_state(tmp_path):
    script = REPO / "tests" / "scripts" / "rank_state.py"
    _run(_torchrun(2) + [str(script), "--ckpt", str(tmp_path / "state.ckpt")], tmp_path)


@pytest.mark.parametrize("cache", ["cached", "uncached"])
def test_a_teacher_method_with_views_on_one_rank_only_keeps_the_ranks_in_step(tmp_path, cache):
    script = REPO / "tests" / "scripts" / "teacher_lockstep.py"
    _run(_torchrun(2) + [str(script)] + (["--uncached"] if cache == "uncached" else []), tmp_path)


def test_credit_state_entry_of_a_checkpoint_is_per_rank_and_old_entries_pass_through():
    from lightning_rlvr.credit.base import rank_state
    from lightning_rlvr.credit.hsd import HSDCredit

    credit = HSDCredit(seed=3)
    checkpoint = {"callbacks": {credit.state_key: credit.state_dict()}}
    credit.on_save_checkpoint(None, None, checkpoint)  # one process: a list of one state
    entry = checkpoint["callbacks"][credit.state_key]
    assert list(entry) == ["per_rank"] and len(entry["per_rank"]) == 1
    expected = torch.randint(100, (5,), generator=credit.peers.generator)  # what the saved state draws next
    other = HSDCredit(seed=99)
    credit.on_load_checkpoint(None, None, checkpoint)
    other.load_state_dict(checkpoint["callbacks"][credit.state_key])
    assert torch.equal(torch.randint(100, (5,), generator=other.peers.generator), expected)
    plain = {"peer_rng": other.peers.state_dict()}
    assert rank_state(plain) is plain  # a checkpoint written before per-rank state loads as before


def test_gather_values_and_sums_across_two_ranks(tmp_path):
    _run(_torchrun(2) + [str(REPO / "tests" / "scripts" / "gather_values.py")], tmp_path)


def test_lora_reference_is_the_base_model_and_only_adapters_train(tmp_path):
    from lightning.pytorch import Trainer

    from lightning_rlvr.data import RLVRDataModule

    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    module = RLVRModule(
        task=AdditionTask(digits=1),
        policy=policy,
        lora={"r": 4, "lora_alpha": 8, "init_lora_weights": False},  # adapters change outputs from step 0
        loss=PPOClip(kl_beta=0.1),
        group_size=4,
        max_new_tokens=12,
        lr=1e-2,
        validate_at_start=False,
    )
    module.configure_model()  # what Lightning calls before training: adds the adapters
    base, _ = policy.load()
    torch.manual_seed(0)
    rollout = sample(module.model, module.tokenizer, [AdditionTask(digits=1).problem("train", 0)], 4, 12)
    base_logp = Scorer(base, rollout).policy().logp
    torch.testing.assert_close(module.reference_logprobs(rollout), base_logp)
    assert not torch.allclose(Scorer(module.model, rollout).policy().logp, base_logp)  # adapters are live
    before = {k: v.clone() for k, v in module.model.state_dict().items()}
    Trainer(
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0
    ).fit(module, RLVRDataModule(batch_size=2))
    changed = {k for k, v in module.model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    assert module._reference == []  # no second copy of the weights
