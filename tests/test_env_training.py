"""Training on multi-turn environments: every method fits on episodes, loss and credit see only the
policy's tokens, the env metrics are logged, and a resumed fit matches an uninterrupted one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

from lightning_rlvr import AdditionTask, RLVRModule
from lightning_rlvr.collect import CollectedRollout, roll_out
from lightning_rlvr.credit import Credit, GRPOCredit
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.credit.rredcot import RREDCoTCredit
from lightning_rlvr.envs.vocab import TextPolicy
from lightning_rlvr.scoring.scorer import Scorer
from tests.conftest import AGENT_CONFIGS, METHOD_TEST_SCALE, QUICKSTART, REPO, TINY
from tests.toy_env import EchoWords

TINY_ENV = str(REPO / "tests" / "configs" / "tiny_env.yaml")
# a method's own test scale on environments (after TINY_ENV): OPD's teacher shares the word vocabulary
ENV_SCALE = {"opd": (str(REPO / "tests" / "configs" / "tiny_env_opd.yaml"),)}
METHODS = sorted((REPO / "configs" / "method").glob("*.yaml"))
ENV_METRICS = ("train/success", "train/turns", "train/invalid_actions", "train/zero_grad_frac")


def metrics_rows(root: Path) -> list[dict]:
    (path,) = root.glob("runs/**/metrics.csv")
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("train/reward_mean")]


def env_configs(method: Path) -> tuple[str, ...]:
    """The method file, its settings for episodes (``configs/agent/<stem>.yaml``, as the agent sweeps
    compose them), then the test scale."""
    stem = method.stem
    agent = AGENT_CONFIGS / method.name
    return (
        QUICKSTART,
        str(method),
        *((str(agent),) if agent.is_file() else ()),
        TINY,
        *METHOD_TEST_SCALE.get(stem, ()),
        TINY_ENV,
        *ENV_SCALE.get(stem, ()),
    )


# Credits with no privileged text on a game (OPSD's reference answer and RREDCoT's answer cue: the answer
# "won" is not even a word of the games): one error line names the setting instead of a teacher of <unk>s.
# Keyed by the credit class, so every method file built on one (OPSD + GRPO too) is held to it.
NO_EPISODE_TEXT = {"OPSDCredit": "teacher_template", "RREDCoTCredit": "answer_cue"}


def credit_class(method: Path) -> str:
    return yaml.safe_load(method.read_text())["model"]["credit"]["class_path"].rsplit(".", 1)[-1]


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_every_method_fits_on_episodes(method, run_cli, tmp_path, capsys):
    if credit_class(method) in NO_EPISODE_TEXT:
        with pytest.raises(SystemExit):
            run_cli("fit", configs=env_configs(method))
        (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
        assert line.startswith("lightning-rlvr: error: ")
        assert f"model.credit.init_args.{NO_EPISODE_TEXT[credit_class(method)]}" in line
        return
    cli = run_cli("fit", configs=env_configs(method))
    assert cli.model.rl_step == 2
    rows = metrics_rows(tmp_path)
    assert len(rows) == 2
    for r in rows:
        assert float(r["train/skipped_updates"]) == 0.0
        assert torch.isfinite(torch.tensor(float(r["train/grad_norm"])))
        for name in ENV_METRICS:
            assert name in r and r[name] != "", name
        assert 1.0 <= float(r["train/turns"]) <= 4.0  # EchoWords' turn limit
        assert 0.0 <= float(r["train/success"]) <= 1.0
        assert float(r["train/zero_grad_frac"]) == float(float(r["train/grad_norm"]) == 0.0)


def test_zero_grad_frac_is_logged_for_single_turn_tasks_too(run_cli, tmp_path):
    run_cli("fit")
    rows = metrics_rows(tmp_path)
    assert all(r["train/zero_grad_frac"] in ("0.0", "1.0") for r in rows)
    assert "train/turns" not in rows[0] or rows[0]["train/turns"] == ""


# ---------------------------------------------------------------- loss and credit on policy tokens
def env_module(**kwargs) -> RLVRModule:
    env = EchoWords(max_turns=3)
    policy = TextPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=128, vocab_games=16)
    return RLVRModule(task=env, policy=policy, group_size=4, max_new_tokens=3, micro_batch_size=4, **kwargs)


class Perturbed(GRPOCredit):
    """GRPO plus noise on environment tokens (advantages) and a token loss that is noisy there too."""

    def __init__(self, noise: float) -> None:
        super().__init__()
        self.noise = noise

    def assign(self, rollout, scorer):
        env_tok = (rollout.completion_mask - rollout.loss_mask).float()  # [N, T] observations
        g = torch.Generator().manual_seed(7)
        adv = self.group_advantages(rollout)[:, None] * rollout.loss_mask
        adv = adv + self.noise * torch.randn(adv.shape, generator=g) * env_tok
        bump = self.noise * torch.randn(adv.shape, generator=g) * env_tok  # [N, T]

        def token_loss(logits, rows):
            return logits.float().logsumexp(-1) * 1e-3 + bump[rows]

        return Credit(advantages=adv, token_loss=token_loss)


def gradient_of(noise: float, loss_agg: str) -> tuple[dict[str, torch.Tensor], float]:
    torch.manual_seed(0)
    module = env_module(credit=Perturbed(noise))
    module.loss.loss_agg = loss_agg
    torch.manual_seed(1)
    rollout = module.rollout([module.task.problem("train", i) for i in range(2)], 4)
    rollout.rewards = torch.arange(8, dtype=torch.float32) % 3  # mixed groups: non-zero advantages
    assert (rollout.completion_mask - rollout.loss_mask).sum() > 0  # there are observation tokens
    credit = module.credit.assign(rollout, Scorer(module.model, rollout, module.tokenizer, 4))
    credit.advantages = torch.where(rollout.loss_mask.bool(), credit.advantages, 0.0)  # as training_step
    old = torch.zeros_like(rollout.completion_ids, dtype=torch.float32) - noise * (
        rollout.completion_mask - rollout.loss_mask
    )  # per-token inputs perturbed on observations too

    class Opt:  # update() needs an optimiser and a scheduler: capture the gradient at step()
        grads: dict = {}

        def step(self):
            self.grads = {n: p.grad.clone() for n, p in module.model.named_parameters() if p.grad is not None}

        def zero_grad(self, set_to_none=True):
            module.model.zero_grad(set_to_none=True)

    class Sched:
        def step(self):
            pass

        def get_last_lr(self):
            return [0.0]

    opt = Opt()
    module.optimizers = lambda: opt
    module.lr_schedulers = lambda: Sched()
    module.manual_backward = lambda loss: loss.backward()
    module.minibatches = 2  # uses old_logp
    module.update(rollout, credit, old, None)
    total = float(rollout.loss_mask.sum())
    return opt.grads, total


@pytest.mark.parametrize("loss_agg", ["seq_mean", "token_mean", "constant"])
def test_environment_tokens_never_move_the_gradient(loss_agg):
    clean, n_policy = gradient_of(0.0, loss_agg)
    noisy, _ = gradient_of(3.0, loss_agg)
    assert clean and set(clean) == set(noisy)
    assert any(float(g.abs().sum()) > 0 for g in clean.values())
    for name in clean:
        assert torch.equal(clean[name], noisy[name]), name  # bit for bit


def test_loss_normalisation_counts_only_policy_tokens():
    module = env_module()
    torch.manual_seed(1)
    rollout = module.rollout([module.task.problem("train", i) for i in range(2)], 4)
    mask = rollout.loss_mask.float()
    assert 0 < mask.sum() < rollout.completion_mask.sum()
    for agg in ("seq_mean", "token_mean"):
        module.loss.loss_agg = agg
        w = module.loss.weights(mask, module.max_new_tokens, lambda x: x)  # [N, T]
        assert torch.isclose(w.sum(), torch.tensor(1.0))  # the weights sum to one over policy tokens
        assert float(w[rollout.loss_mask == 0].abs().sum()) == 0.0


# ---------------------------------------------------------------- method contexts on episodes
def test_rredcot_segments_episodes_at_turn_boundaries():
    module = env_module()
    torch.manual_seed(3)
    rollout = module.rollout([module.task.problem("train", i) for i in range(2)], 4)
    scorer = Scorer(module.model, rollout, module.tokenizer, 4, task=module.task)
    bounds = RREDCoTCredit(num_segments=8, answer_cue="\n").segment(rollout, scorer)  # [N, T]; no cue
    m = rollout.loss_mask
    for i in range(rollout.num_rows):
        starts = [t for t in range(1, m.shape[1]) if m[i, t] and not m[i, t - 1]]
        assert torch.nonzero(bounds[i]).flatten().tolist() == starts
    text = RREDCoTCredit(num_segments=8, segment_turns=False, answer_cue="\n").segment(rollout, scorer)
    assert not torch.equal(text, bounds) or int(bounds.sum()) == 0


def contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[k : k + len(part)] == part for k in range(len(seq) - len(part) + 1))


def test_hp_rlvr_hindsight_holds_the_future_turns_and_the_final_feedback():
    module = env_module()
    torch.manual_seed(3)
    rollout = module.rollout([module.task.problem("train", i) for i in range(2)], 4)
    scorer = Scorer(module.model, rollout, module.tokenizer, 4, task=module.task)  # the game's own texts
    contexts, rows, spans = HPRLVRCredit().views(rollout, scorer)
    tok = module.tokenizer
    for ctx, i, (_, end) in zip(contexts, rows, spans):
        n = int(rollout.lengths[i])
        assert rollout.loss_mask[i, end - 1] == 1 and (
            end == n or rollout.loss_mask[i, end] == 0
        )  # step = action
        future = [t for t in rollout.completion_ids[i, end:n].tolist() if t != tok.eos_token_id]
        ctx = ctx.tolist()
        assert contains(ctx, future)  # every later observation and action, as token ids
        assert contains(ctx, scorer.encode(rollout.feedback[i]).tolist())  # the game's final feedback


# ---------------------------------------------------------------- exact resume
def test_resume_on_episodes_matches_an_uninterrupted_run(run_cli, tmp_path):
    configs = (QUICKSTART, TINY, TINY_ENV)
    straight = run_cli("fit", "--trainer.max_steps", "4", configs=configs, root=tmp_path / "straight")
    first = run_cli("fit", "--trainer.max_steps", "2", configs=configs, root=tmp_path / "resumed")
    ckpt = first.trainer.checkpoint_callback.last_model_path
    resumed = run_cli(
        "fit", "--trainer.max_steps", "4", "--ckpt_path", ckpt, configs=configs, root=tmp_path / "resumed2"
    )
    assert resumed.model.rl_step == 4
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    tail = {
        k: r[k] for r in metrics_rows(tmp_path / "straight")[2:] for k in ENV_METRICS + ("train/reward_mean",)
    }
    again = {
        k: r[k] for r in metrics_rows(tmp_path / "resumed2") for k in ENV_METRICS + ("train/reward_mean",)
    }
    assert tail == again


# ---------------------------------------------------------------- DAPO's overlong penalty on episodes
def scripted_episodes(lengths: list[list[int]]):
    """EchoWords episodes whose row i writes actions of ``lengths[i]`` tokens (the wrong word repeated)."""
    from lightning_rlvr.collect.episodes import run_episodes

    module = env_module()
    tok, env = module.tokenizer, module.task
    word = tok("no", add_special_tokens=False)["input_ids"]  # never the right word: every turn is played
    turn = {"k": 0}

    def generate(contexts):
        k, turn["k"] = turn["k"], turn["k"] + 1
        return [word * lengths[i][k] for i in range(len(contexts))]

    problems = [env.problem("train", 0)]
    rollout = run_episodes(env, problems, len(lengths), generate, tok, max_turns=len(lengths[0]))
    return module, rollout


def test_overlong_penalty_on_episodes_reads_the_longest_action_against_the_per_action_budget(monkeypatch):
    from lightning_rlvr.rewards import OverlongPenalty

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 9, (6, 3), generator=g).tolist()  # 6 episodes x 3 turns, 1-8 tokens each
    lengths[0] = [2, 2, 2]  # many short actions: 6 policy tokens, more than the ramp's start, no penalty
    module, rollout = scripted_episodes(lengths)
    longest = torch.tensor([max(x) for x in lengths])
    assert torch.equal(rollout.action_lengths, longest)
    assert torch.equal(rollout.loss_mask.sum(-1), torch.tensor([sum(x) for x in lengths]))

    module.max_new_tokens = 6
    module.reward_shaping = [OverlongPenalty(cache=3)]
    monkeypatch.setattr(
        "lightning_rlvr.module.roll_out", lambda *args: CollectedRollout(rollout, 0, 0.0, 0.0)
    )
    shaped = module.collect(rollout.problems)[0].rollout
    expected = OverlongPenalty(cache=3).penalty(longest, 6)  # ramp over 4..6, -1 past 6
    assert torch.equal(shaped.rewards, expected)  # EchoWords never won: the verdicts are 0
    assert float(shaped.rewards[0]) == 0.0 and (expected < 0).any()


def test_action_lengths_of_a_single_turn_rollout_are_its_completion_lengths():
    module = env_module()
    from lightning_rlvr.tasks import AdditionTask

    torch.manual_seed(0)
    sampler = module.sampler
    problems = [AdditionTask(digits=1).problem("train", i) for i in range(3)]
    rollout = roll_out(AdditionTask(digits=1), sampler, problems, 2).rollout
    assert rollout.turn_index is None
    assert torch.equal(rollout.action_lengths, rollout.completion_mask.sum(-1))


def test_constant_normaliser_is_the_rows_policy_token_budget(monkeypatch):
    """Dr. GRPO's constant (loss_agg: constant) is what one row can hold: max_turns actions on episodes."""
    module = env_module()
    env = module.task
    assert env.policy_token_budget(module.max_new_tokens) == env.max_turns * module.max_new_tokens
    assert AdditionTask().policy_token_budget(48) == 48  # a single-turn row holds L_max tokens
    seen = []
    weights = module.loss.weights
    monkeypatch.setattr(
        module.loss,
        "weights",
        lambda mask, max_len, total: seen.append(max_len) or weights(mask, max_len, total),
    )
    torch.manual_seed(0)
    rollout = module.rollout([env.problem("train", i) for i in range(2)], 2)
    credit = Credit(advantages=torch.ones_like(rollout.loss_mask, dtype=torch.float32))
    opt = torch.optim.SGD(module.model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: sched)
    module.manual_backward = lambda loss: loss.backward()
    module.update(rollout, credit, None, None)
    assert seen and set(seen) == {env.max_turns * module.max_new_tokens}
