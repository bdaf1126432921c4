"""Policy losses on numbers computed by hand, and the loss chosen by YAML alone."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from lightning.pytorch import Trainer

from lightning_rlvr import AdditionTask, RLVRDataModule, RLVRModule, TinyPolicy
from lightning_rlvr.core.objectives import loss_weights
from lightning_rlvr.losses import CISPO, GSPO, PPOClip, tis_weights
from lightning_rlvr.scoring.scorer import Scorer
from tests.conftest import QUICKSTART, REPO, TINY

LOSSES = sorted((REPO / "configs" / "loss").glob("*.yaml"))


def _leaf(values: list[float]) -> torch.Tensor:
    return torch.tensor(values).requires_grad_(True)


def test_ppo_clip_uses_separate_low_and_high_ranges():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5]]))  # ratios 1.5, 1.5, 0.5, 0.5
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    loss, stats = PPOClip(eps_low=0.2, eps_high=0.28)(logp, old, adv, torch.ones(1, 4))
    # A>0, rho=1.5: min(1.5, 1.28) = 1.28 -> loss -1.28 (clipped)
    # A<0, rho=1.5: min(-1.5, -1.28) = -1.5 -> loss 1.5 (not clipped)
    # A>0, rho=0.5: min(0.5, 0.8) = 0.5 -> loss -0.5 (not clipped)
    # A<0, rho=0.5: min(-0.5, -0.8) = -0.8 -> loss 0.8 (clipped)
    torch.testing.assert_close(loss, torch.tensor([[-1.28, 1.5, -0.5, 0.8]]))
    assert stats["clip_frac"].tolist() == [[1.0, 0.0, 0.0, 1.0]]
    assert set(stats) == {"clip_frac"}  # no KL, no engine statistics when not asked for


def test_dual_clip_bounds_the_loss_of_negative_advantages_only():
    ratios = [4.0, 2.5, 4.0, 0.5]
    logp = _leaf([math.log(r) for r in ratios])
    adv = torch.tensor([-1.0, -1.0, 1.0, -2.0])
    loss, stats = PPOClip(eps_low=0.2, eps_high=0.2, dual_clip=3.0)(logp, torch.zeros(4), adv, torch.ones(4))
    # rho=4, A=-1: PPO 4.0 > 3 -> bounded at 3 (dual); rho=2.5, A=-1: 2.5 < 3 kept;
    # rho=4, A=+1: -1.2 (clipped from above, dual clip only acts on A < 0); rho=0.5, A=-2: 1.6 (lower clip)
    torch.testing.assert_close(loss, torch.tensor([3.0, 2.5, -1.2, 1.6]))
    assert stats["clip_frac"].tolist() == [1.0, 0.0, 1.0, 1.0]
    loss.sum().backward()
    # d(-rho*A)/dlogp = -rho*A where unclipped: only token 1 has a gradient (2.5)
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, 2.5, 0.0, 0.0]))
    with pytest.raises(ValueError):
        PPOClip(dual_clip=1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_sequence_ratio_is_the_geometric_mean_of_token_ratios(seed):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 5, generator=gen)
    logp = (old + 0.3 * torch.randn(3, 5, generator=gen)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]).float()
    adv = torch.tensor([1.0, -0.5, 2.0])[:, None].expand(3, 5)
    loss, _ = GSPO(eps_low=10.0, eps_high=10.0)(logp, old, adv, mask)  # wide range: nothing clipped
    for i in range(3):
        n = int(mask[i].sum())
        ratios = torch.exp(logp[i, :n] - old[i, :n]).detach()
        geo = float(ratios.prod() ** (1.0 / n))  # the geometric mean of the token ratios
        torch.testing.assert_close(loss[i, :n].detach(), torch.full((n,), -geo * float(adv[i, 0])))
    # seq_mean of the token loss: each row's gradient is -s_i A_i / |o_i| per token, as d(-s_i A_i)/dlogp
    (loss * loss_weights(mask, "seq_mean", 5)).sum().backward()
    for i in range(3):
        n = int(mask[i].sum())
        s = float(torch.exp(((logp[i, :n] - old[i, :n]).detach()).mean()))
        expected = torch.full((n,), -s * float(adv[i, 0]) / n / 3)
        torch.testing.assert_close(logp.grad[i, :n], expected)
        assert (logp.grad[i, n:] == 0).all()


def test_gspo_clips_whole_sequences():
    old = torch.zeros(2, 2)
    # row 0: token ratios 2 and 0.5 -> s = 1 (inside the range, although each token ratio is far out);
    # row 1: token ratios 1.5 and 1.5 -> s = 1.5 (above 1 + eps_high: every token clipped)
    logp = _leaf([[math.log(2.0), math.log(0.5)], [math.log(1.5), math.log(1.5)]])
    loss, stats = GSPO(eps_low=0.2, eps_high=0.2)(logp, old, torch.ones(2, 2), torch.ones(2, 2))
    torch.testing.assert_close(loss.detach(), torch.tensor([[-1.0, -1.0], [-1.2, -1.2]]))
    assert stats["clip_frac"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    loss.sum().backward()
    assert (logp.grad[0] != 0).all() and (logp.grad[1] == 0).all()


def test_cispo_weight_is_clipped_and_detached():
    ratios = [1.5, 0.5, 1.1, 1.5]
    logp = _leaf([math.log(r) for r in ratios])
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    loss, stats = CISPO(eps_low=0.2, eps_high=0.28)(logp, torch.zeros(4), adv, torch.ones(4))
    weight = torch.tensor([1.28, 0.8, 1.1, 1.28])  # clip(rho, 0.8, 1.28)
    torch.testing.assert_close(loss.detach(), -weight * adv * logp.detach())
    assert stats["clip_frac"].tolist() == [1.0, 1.0, 0.0, 1.0]
    loss.sum().backward()
    # the weight is a constant: the gradient is -w * A on every token, clipped ones included
    torch.testing.assert_close(logp.grad, -weight * adv)


def test_kl_term_is_beta_times_k3_and_only_with_a_reference():
    logp, old = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    adv, mask = torch.zeros(1, 2), torch.ones(1, 2)
    loss, stats = PPOClip(kl_beta=0.1)(logp, old, adv, mask, ref_logp=ref)
    d = ref - logp
    k3 = torch.exp(d) - d - 1
    torch.testing.assert_close(loss, 0.1 * k3)  # A = 0: only the KL term
    torch.testing.assert_close(stats["kl"], k3)
    assert PPOClip(kl_beta=0.1).uses_reference and not PPOClip().uses_reference
    assert "kl" not in PPOClip()(logp, old, adv, mask, ref_logp=ref)[1]


def test_tis_weights_on_hand_made_logprobs():
    old = torch.log(torch.tensor([[0.2, 0.3, 0.6, 0.5]]))
    engine = torch.log(torch.tensor([[0.4, 0.2, 0.2, 0.5]]))
    # exp(old - engine) = 0.5, 1.5, 3.0, 1.0 -> capped at 2: 0.5, 1.5, 2.0, 1.0
    w = torch.tensor([[0.5, 1.5, 2.0, 1.0]])
    torch.testing.assert_close(tis_weights(old - engine, 2.0), w)
    logp = old.clone().requires_grad_(True)
    adv, mask = torch.tensor([[1.0, -1.0, 2.0, 1.0]]), torch.ones(1, 4)
    plain, _ = PPOClip(tis_cap=None)(logp, old, adv, mask)
    loss, stats = PPOClip(tis_cap=2.0)(logp, old, adv, mask, engine_logp=engine)
    torch.testing.assert_close(loss, plain * w)  # each token's PG term times its weight
    assert stats["tis_clip_frac"].tolist() == [[0.0, 0.0, 1.0, 0.0]]
    r = torch.tensor([[0.5, 1.5, 3.0, 1.0]])
    torch.testing.assert_close(stats["engine_kl"], r - 1 - r.log())  # k3 of KL(engine || trainer)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, -adv * w)  # the weight is a constant (ratio 1 here)
    # no engine log-probs: no weight, no statistics; tis_cap None: statistics but no weight
    assert "engine_kl" not in PPOClip()(logp, old, adv, mask)[1]
    off, off_stats = PPOClip(tis_cap=None)(logp, old, adv, mask, engine_logp=engine)
    torch.testing.assert_close(off, plain)
    assert "engine_kl" in off_stats and "tis_clip_frac" not in off_stats
    assert PPOClip().needs_old_logp(engine) and not PPOClip().needs_old_logp(None)


@pytest.mark.parametrize("loss_cls", [PPOClip, GSPO, CISPO])
def test_every_loss_validates_its_knobs_and_aggregates_by_name(loss_cls):
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).float()
    total = lambda x: x  # noqa: E731 -- one rank
    for agg in ("seq_mean", "token_mean", "constant"):
        torch.testing.assert_close(loss_cls(loss_agg=agg).weights(mask, 3, total), loss_weights(mask, agg, 3))
    for bad in ({"loss_agg": "mean"}, {"eps_low": -0.1}, {"kl_beta": -1.0}, {"tis_cap": 0.0}):
        with pytest.raises(ValueError):
            loss_cls(**bad)


def _printed_config(run_cli, capsys, *configs: str) -> dict:
    with pytest.raises(SystemExit):
        run_cli(
            "fit", "--print_config", configs=(QUICKSTART, str(REPO / "configs/method/grpo.yaml"), *configs)
        )
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("loss", LOSSES, ids=lambda p: p.stem)
def test_switching_the_loss_by_yaml_changes_nothing_else(loss, run_cli, capsys):
    base = _printed_config(run_cli, capsys)
    other = _printed_config(run_cli, capsys, str(loss))
    assert base["model"].pop("loss") != other["model"].pop("loss")
    assert base == other


@pytest.mark.parametrize("loss", [p for p in LOSSES if p.stem != "ppo_clip"], ids=lambda p: p.stem)
def test_each_loss_fits_at_test_scale(loss, run_cli):
    cli = run_cli("fit", configs=(QUICKSTART, str(loss), TINY))
    assert (
        type(cli.model.loss).__name__
        == yaml.safe_load(loss.read_text())["model"]["loss"]["class_path"].rsplit(".", 1)[1]
    )
    metrics = cli.trainer.callback_metrics
    assert float(metrics["train/skipped_updates"]) == 0.0
    assert torch.isfinite(metrics["train/grad_norm"])


# ---------------------------------------------------------------------------- the module's side of the seam
class Recording(RLVRModule):
    """Records the rollout-time log-probs the update receives; optionally attaches engine log-probs."""

    engine_logp_value: float | None = None

    def collect(self, problems):
        collected, stats = super().collect(problems)
        rollout = collected.rollout
        # what a rollout engine reporting its log-probs fills; None: an engine that reports none (the
        # default engine, FastEngine, reports its own, which would switch TIS on)
        rollout.engine_logp = (
            None
            if self.engine_logp_value is None
            else torch.full(rollout.completion_ids.shape, self.engine_logp_value)
        )
        return collected, stats

    def update(self, rollout, credit, old_logp, ref_logp, forwards=None):
        self.old_logp = old_logp
        self.fresh_logp = (
            Scorer(self.model, rollout, micro_batch_size=8).policy().logp
        )  # weights not yet moved
        self.stats = super().update(rollout, credit, old_logp, ref_logp, forwards)
        return self.stats


def _one_step(tmp_path, engine: float | None = None, **kwargs) -> Recording:
    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    module = Recording(
        task=AdditionTask(digits=1),
        policy=policy,
        group_size=4,
        max_new_tokens=12,
        micro_batch_size=8,
        validate_at_start=False,
        **kwargs,
    )
    module.engine_logp_value = engine
    Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    ).fit(module, RLVRDataModule(batch_size=2, val_size=2))
    return module


def test_the_module_obtains_rollout_time_logprobs_exactly_when_the_update_needs_them(tmp_path):
    plain = _one_step(tmp_path)  # one epoch, one minibatch, no engine log-probs: ratio 1, no extra pass
    assert plain.old_logp is None and "engine_kl" not in plain.stats
    for kwargs in ({"ppo_epochs": 2}, {"minibatches": 2}):  # the policy moves between updates of one rollout
        module = _one_step(tmp_path, **kwargs)
        assert module.old_logp is not None
        torch.testing.assert_close(module.old_logp, module.fresh_logp)
        assert module.stats["skipped_updates"] == 0.0


def test_engine_logprobs_switch_on_tis_and_its_statistics(tmp_path, monkeypatch):
    torch.manual_seed(0)
    module = _one_step(tmp_path, engine=math.log(0.3))
    assert module.old_logp is None  # one update, no dropout: the update's own log-probs are the rollout's
    assert module.stats["engine_kl"] > 0
    assert 0.0 <= module.stats["tis_clip_frac"] <= 1.0
    # A model with dropout gets the separate no-grad pass; on this dropout-free model it gives the same
    monkeypatch.setattr("lightning_rlvr.module.train_mode_matches_eval", lambda model: False)
    torch.manual_seed(0)
    passed = _one_step(tmp_path, engine=math.log(0.3))
    assert passed.old_logp is not None
    torch.testing.assert_close(passed.old_logp, passed.fresh_logp)
    for key in ("engine_kl", "tis_clip_frac", "loss", "grad_norm"):
        assert passed.stats[key] == pytest.approx(module.stats[key], rel=1e-5, abs=1e-7), key
    off = _one_step(tmp_path, engine=math.log(0.3), loss=PPOClip(tis_cap=None))
    assert "tis_clip_frac" not in off.stats and off.stats["engine_kl"] > 0
