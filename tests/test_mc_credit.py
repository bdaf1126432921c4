"""Monte-Carlo credit: values of prefixes from verified continuations, segment advantages, the sampler."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_rlvr.collect.continuations import EngineSampler
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.credit.mc import MonteCarloCredit
from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.scoring.continuation_sampler import Continued
from lightning_rlvr.scoring.scorer import Scorer
from tests.rollouts import rollout_from_ids

PAD, EOS, GOOD, BAD = 0, 9, 1, 2


def value(prefix: list[int]) -> float:
    """The toy task's value function in closed form: success probability (1 + #GOOD) / (2 + len)."""
    return (1 + sum(t == GOOD for t in prefix)) / (2 + len(prefix))


class ToySampler:
    """A 'policy' whose continuation from a prefix succeeds with probability ``value(prefix)``."""

    def __init__(self, seed: int = 0) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.calls: list[list[int]] = []

    def __call__(self, prompts, prefixes, problems, n):
        self.calls.append([len(p) for p in prefixes])
        p = torch.tensor([value(x.tolist()) for x in prefixes])  # [K]
        rewards = (torch.rand(len(prefixes), n, generator=self.gen) < p[:, None]).float()
        return Continued(rewards, rewards > 0.5, generated_tokens=len(prefixes) * n, forward_tokens=0)


def toy_rollout(completions, rewards, group_size):
    B = len(completions) // group_size
    return rollout_from_ids(
        [[5, 6]] * B, completions, pad=PAD, eos=EOS, group_size=group_size, rewards=rewards
    )


@pytest.mark.parametrize(
    "completions,every",
    [
        ([[GOOD, BAD, GOOD, GOOD, EOS], [BAD, BAD, BAD, EOS]], 2),
        ([[BAD, GOOD, GOOD, BAD, BAD, GOOD, EOS], [GOOD, EOS]], 3),
        ([[GOOD, GOOD, GOOD, GOOD, GOOD, GOOD, BAD, EOS], [BAD, GOOD, BAD, GOOD, EOS]], 1),
    ],
)
def test_mc_recovers_a_closed_form_value_function_within_sampling_error(completions, every):
    M = 2000
    rewards = [1.0, 0.0]
    rollout = toy_rollout(completions, rewards, group_size=2)
    scorer = Scorer(None, rollout, sampler=ToySampler())
    credit = MonteCarloCredit(num_samples=M, segment="tokens", every=every, scale_by_std=False)
    adv = credit.assign(rollout, scorer).advantages  # [N, T]
    root = value([])
    for i, (toks, r) in enumerate(zip(completions, rewards)):
        bounds = [0, *range(every, len(toks), every), len(toks)]
        for b0, b1 in zip(bounds, bounds[1:]):
            v0 = root if b0 == 0 else value(toks[:b0])
            v1 = r if b1 == len(toks) else value(toks[:b1])
            # each estimate has std sqrt(p (1 - p) / M) <= 0.5 / sqrt(M); 4 sigma of a difference of two
            tol = 4 * math.sqrt(2) * 0.5 / math.sqrt(M)
            assert torch.allclose(adv[i, b0:b1], torch.full((b1 - b0,), v1 - v0), atol=tol), (i, b0)
        assert torch.all(adv[i, len(toks) :] == 0)  # padding gets nothing


def test_segment_advantages_telescope_to_reward_minus_root_value_and_scale_by_group_std():
    completions = [[GOOD, BAD, GOOD, EOS], [BAD, BAD, EOS], [GOOD, GOOD, GOOD, GOOD, EOS], [BAD, EOS]]
    rewards = [1.0, 0.0, 1.0, 0.0]
    rollout = toy_rollout(completions, rewards, group_size=4)
    raw = MonteCarloCredit(num_samples=8, segment="tokens", every=1, scale_by_std=False)
    scaled = MonteCarloCredit(num_samples=8, segment="tokens", every=1, scale_by_std=True)
    a = raw.assign(rollout, Scorer(None, rollout, sampler=ToySampler(3))).advantages
    b = scaled.assign(rollout, Scorer(None, rollout, sampler=ToySampler(3))).advantages
    root = None
    for i in range(len(completions)):
        # every = 1: one token a segment, so the token advantages sum to r_i - V(0)
        total = float(a[i].sum())
        root = rewards[i] - total if root is None else root
        assert total == pytest.approx(rewards[i] - root, abs=1e-6)  # the same V(0) for the whole group
    std = torch.tensor(rewards).std()  # unbiased, as GRPO
    assert torch.allclose(b, a / (std + 1e-6), atol=1e-6)


def test_identical_prefixes_of_a_group_are_sampled_once_and_groups_never_share():
    completions = [[GOOD, BAD, GOOD, EOS], [GOOD, BAD, BAD, EOS]] * 2
    rollout = toy_rollout(completions, [1.0, 0.0, 1.0, 0.0], group_size=2)  # two groups, same prompt ids
    sampler = ToySampler()
    out = MonteCarloCredit(num_samples=3, segment="tokens", every=2, scale_by_std=False).assign(
        rollout, Scorer(None, rollout, sampler=sampler)
    )
    # per group: the root (prompt only) and the shared 2-token prefix [GOOD, BAD]: 2 prefixes, 2 groups
    assert sorted(sampler.calls[0]) == [0, 0, 2, 2]
    assert out.metrics["continuations"] == 4 * 3
    assert out.metrics["generated_tokens"] == 4 * 3  # what the sampler reported


def test_all_equal_group_and_empty_completion_stay_finite():
    rollout = toy_rollout([[BAD, BAD, BAD, EOS], [GOOD, GOOD, EOS], [], [BAD, EOS]], [0.0] * 4, group_size=4)
    adv = (
        MonteCarloCredit(num_samples=64, segment="tokens", every=1)
        .assign(rollout, Scorer(None, rollout, sampler=ToySampler()))
        .advantages
    )
    assert torch.isfinite(adv).all()
    assert adv.abs().max() <= 1.0  # std 0: raw value differences, not divided by ~0
    assert torch.all(adv[2] == 0)
    assert float(adv[1, 0]) > 0  # GOOD raised the chance of success in a group that failed


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return "".join({1: "a", 2: ";", 3: "\n", 9: ""}.get(int(t), "?") for t in ids)


def test_step_segments_cut_after_delimiters_and_are_capped():
    credit = MonteCarloCredit(segment="steps", delimiters=[";", "\n"])
    rollout = toy_rollout([[1, 1, 2, 1, 3, 1, 1, 2, 9]], [0.0], group_size=1)
    scorer = Scorer(None, rollout, tokenizer=CharTokenizer())
    assert credit.cuts([1, 1, 2, 1, 3, 1, 1, 2, 9], scorer) == [3, 5, 8]
    assert credit.cuts([1, 1, 1, 2], scorer) == []  # a delimiter on the last token cuts nothing
    capped = MonteCarloCredit(segment="tokens", every=1, max_segments=3)
    assert capped.cuts(list(range(10))) == [1, 9]  # 2 interior cuts, evenly spread
    with pytest.raises(RLVRError, match="tokenizer"):
        credit.cuts([1, 2, 1], None)


def test_without_a_sampler_the_scorer_says_how_to_build_one():
    rollout = toy_rollout([[GOOD, EOS]], [1.0], group_size=1)
    with pytest.raises(RLVRError, match="sampler"):
        MonteCarloCredit(segment="tokens").assign(rollout, Scorer(None, rollout))


def test_generate_sampler_verifies_prefix_plus_continuation_with_the_task():
    """A real tiny policy: whatever it samples, a prefix that already holds the (first) answer
    decides the reward, so V = 1 after a correct answer and V = 0 after a wrong one."""
    from lightning_rlvr.models import TinyPolicy
    from lightning_rlvr.tasks.addition import AdditionTask

    task = AdditionTask(digits=1)
    problem = task.problem("train", 0)
    model, tok = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64).load()
    enc = lambda s: torch.tensor(tok(s, add_special_tokens=False)["input_ids"])
    good = enc(problem.solution + ";")  # ";" ends the number: a continuation cannot change it
    wrong = enc(f" answer:{int(problem.answer) + 1};")
    torch.manual_seed(0)
    sampler = EngineSampler(
        HFGenerateEngine(), model, tok, task, Sampling(max_new_tokens=len(good) + 4), micro_batch_size=5
    )
    out = sampler([enc(problem.prompt)] * 3, [good, wrong, good[:0]], [problem] * 3, n=4)
    assert out.rewards.shape == (3, 4)
    assert torch.all(out.rewards[0] == 1.0) and torch.all(out.rewards[1] == 0.0)
    assert out.correct[0].all() and not out.correct[1].any()
    # budgets: 4 new tokens after `good`, len(good) + 4 - len(wrong) after `wrong`, len(good) + 4 from empty
    assert out.generated_tokens <= 4 * (4 + (len(good) + 4 - len(wrong)) + len(good) + 4)
    assert out.forward_tokens >= out.generated_tokens
