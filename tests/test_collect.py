"""The collection layer: verified rollouts from one entry point, and each fact in one place.

``collect.roll_out`` is the only code that knows a single-turn task from an environment; both come
back verified, with their costs as values. The sampling settings are built once by the module and
handed down (rollouts, greedy evaluation, continuations, the warm start's checks); the training
stream's position has one formula.
"""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.collect import CollectedRollout, Sampler, roll_out
from lightning_rlvr.collect.continuations import EngineSampler
from lightning_rlvr.collect.dynamic_sampling import extra_prompt_position
from lightning_rlvr.collect.episodes import action_text
from lightning_rlvr.core.problem import Problem, Verdict
from lightning_rlvr.data import TrainStream, train_batch_index
from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.envs.vocab import TextPolicy
from lightning_rlvr.warmstart import WarmStart
from tests.toy_env import EchoWords

TINY = dict(layers=1, hidden=32, heads=2, intermediate=64)


class Raises(AdditionTask):
    """Every second verifier call raises: counted, scored 0, never fatal."""

    calls = 0

    def check(self, completion: str, problem: Problem) -> Verdict:
        Raises.calls += 1
        if Raises.calls % 2:
            raise RuntimeError("verifier crashed")
        return Verdict(1.0)


def test_a_single_turn_batch_comes_back_verified_with_its_costs() -> None:
    task = Raises(digits=1)
    model, tok = TinyPolicy(**TINY).for_task(task).load()
    sampler = Sampler(HFGenerateEngine(), model, tok, Sampling(4))
    torch.manual_seed(0)
    out = roll_out(task, sampler, [task.problem("train", i) for i in range(3)], 2)
    assert isinstance(out, CollectedRollout) and out.rollout.num_rows == 6
    assert out.rollout.rewards.dtype == torch.float32 and out.rollout.correct.dtype == torch.bool
    assert out.verifier_errors == 3 and out.rollout.rewards.tolist().count(0.0) >= 3
    assert out.generate_s > 0 and out.verify_s >= 0


def test_an_environment_batch_comes_back_scored_by_the_game() -> None:
    env = EchoWords(max_turns=2)
    model, tok = TextPolicy(env, max_positions=128, vocab_games=8, **TINY).load()
    sampler = Sampler(HFGenerateEngine(), model, tok, Sampling(3))
    torch.manual_seed(0)
    out = roll_out(env, sampler, [env.problem("train", i) for i in range(2)], 3)
    r = out.rollout
    assert r.num_rows == 6 and out.verify_s == 0.0 and out.verifier_errors == 0
    # each row's reward and verdict are what the game gives when its own actions are replayed
    for i in range(r.num_rows):
        replay = env.clone()
        replay.reset(env.problem("train", i // 3))
        verdict = replay.verdict_at_limit()
        for turn in range(int(r.turn_index[i].max()) + 1):
            ids = r.completion_ids[i][(r.policy_mask[i] == 1) & (r.turn_index[i] == turn)].tolist()
            _, done, step_verdict = replay.step(action_text(tok, ids))
            if done:
                verdict = step_verdict
                break
        assert r.rewards[i].item() == verdict.reward and bool(r.correct[i]) is bool(verdict.correct), i
    assert bool(r.policy_mask.any()) and not bool(r.policy_mask.all())  # actions, not observations


def module(**kwargs) -> RLVRModule:
    task = AdditionTask(digits=1)
    return RLVRModule(task=task, policy=TinyPolicy(**TINY), group_size=2, **kwargs)


def test_sampling_settings_are_built_once_and_handed_down() -> None:
    m = module(max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=5)
    assert m.sampling == Sampling(7, 0.7, 0.9, 5)
    assert m.make_sampler().sampling is m.sampling  # rollouts read the module's own object
    greedy = m.make_sampler(greedy=True).sampling
    assert not greedy.do_sample and (greedy.max_new_tokens, greedy.temperature) == (7, 0.7)
    assert EngineSampler.of(m).sampling is m.sampling  # continuations too
    m.max_new_tokens = 9  # one budget: changing it changes every reader
    assert m.sampling.max_new_tokens == 9 and EngineSampler.of(m).max_new_tokens == 9


@pytest.mark.parametrize("budget", [8, 64])
def test_the_warm_start_checks_with_the_runs_budget_unless_it_sets_its_own(budget: int) -> None:
    task, policy = AdditionTask(digits=1), TinyPolicy(**TINY)
    default = WarmStart()
    default._run_budget = budget  # what ``run(..., max_new_tokens=budget)`` sets before anything else
    assert default.budget == budget
    assert default.key(policy, task) == WarmStart(max_new_tokens=budget).key(policy, task)  # same cache entry
    own = WarmStart(max_new_tokens=5)
    own._run_budget = budget
    assert own.budget == 5


def test_the_warm_start_run_takes_the_budget_it_is_given(monkeypatch) -> None:
    seen = {}
    warm = WarmStart(cache=False, max_steps=0)

    def fake_train(self, model, tokenizer, task, engine, render):
        seen["budget"] = self.budget
        return {"steps": 0, "accuracy": 0.0}

    monkeypatch.setattr(WarmStart, "_train", fake_train)
    m = module(max_new_tokens=11)
    warm.run(m.model, m.tokenizer, m.policy_source, m.task, max_new_tokens=m.max_new_tokens)
    assert seen["budget"] == 11


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_stream_position_has_one_formula(world: int) -> None:
    task, B = AdditionTask(digits=2), 3
    for rank in range(world):
        stream = iter(TrainStream(task, B, start=lambda: 4, rank=rank, world=world))
        batch = next(stream)
        first = train_batch_index(4, rank, world) * B
        assert batch == [task.train_problem(first + i) for i in range(B)]
    slots = {train_batch_index(s, r, world) for s in range(5) for r in range(world)}
    assert len(slots) == 5 * world  # no two (step, rank) pairs share a batch
    extras = {extra_prompt_position(s, k, i, B, 2) for s in slots for k in (1, 2) for i in range(B)}
    assert len(extras) == len(slots) * 2 * B  # nor extra prompts
