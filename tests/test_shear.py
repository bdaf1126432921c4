"""SHEAR credit: span Wasserstein weights on hand-built hidden states (no model)."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.credit.shear import SHEARCredit
from lightning_rlvr.credit.shear_distance import (
    _sinkhorn,
    emd_cost,
    nearest_point_bound,
    sinkhorn_cost,
    span_starts,
)
from lightning_rlvr.scoring.scorer import PolicyPass

SOLVERS = ["sinkhorn", "emd"]
PRECISE = dict(reg=0.05, num_iter=3000, tol=1e-6)  # converged Sinkhorn, so its entropic bias bound applies


def make_rollout(rewards: list[float], lengths: list[int], T: int, G: int) -> Rollout:
    N = len(rewards)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # [N, T]
    return Rollout(
        prompt_ids=torch.ones(N, 2, dtype=torch.long),
        prompt_mask=torch.ones(N, 2, dtype=torch.long),
        completion_ids=torch.zeros(N, T, dtype=torch.long),
        completion_mask=mask,
        group=torch.arange(N // G).repeat_interleave(G),
        problems=[Problem(prompt="Q", answer="1") for _ in range(N // G)],
        completions=[""] * N,
        pad_id=0,
        eos_id=1,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        correct=torch.tensor(rewards) > 0.5,
    )


class StubScorer:
    """Returns fixed hidden states from ``policy`` and records what it was asked for."""

    def __init__(self, hidden: torch.Tensor) -> None:
        self.hidden = hidden
        self.calls: list[bool] = []

    def policy(self, hidden: bool = False) -> PolicyPass:
        self.calls.append(hidden)
        N, T = self.hidden.shape[:2]
        return PolicyPass(torch.zeros(N, T), torch.zeros(N, T), self.hidden if hidden else None)


def weights_of(credit: SHEARCredit, hidden: torch.Tensor, rollout: Rollout) -> torch.Tensor:
    w, _, _ = credit.token_weights(hidden, rollout.completion_mask, rollout.correct, rollout.group)
    return w


def test_span_layout_covers_every_active_token_once_or_more():
    assert span_starts(0, 8, 4) == []
    assert span_starts(3, 8, 4) == [(0, 3)]  # shorter than the window: one span
    assert span_starts(8, 8, 4) == [(0, 8)]
    assert span_starts(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert span_starts(11, 4, 3) == [(0, 4), (3, 4), (6, 4), (7, 4)]  # end-aligned last window
    for length in range(1, 40):
        covered = torch.zeros(length, dtype=torch.bool)
        for start, size in span_starts(length, 7, 3):
            assert 0 <= start and start + size <= length
            covered[start : start + size] = True
        assert covered.all()


@pytest.mark.parametrize("solver", SOLVERS)
def test_max_pooling_on_a_hand_computed_case(solver):
    # 1-D hidden states, window 2, stride 1, 3 active tokens + 1 padded (garbage 100, must be ignored).
    #   correct   row 0: 2 0 4 | spans k0={2,0}, k1={0,4}
    #   incorrect row 1: 0 0 1 | spans l0={0,0}, l1={0,1}
    # W1 of two 2-point uniform measures on a line = mean |sorted difference|:
    #   (k0,l0)=1, (k0,l1)=0.5, (k1,l0)=2, (k1,l1)=1.5
    # d: k0=0.5, k1=1.5; l0=min(1,2)=1, l1=min(0.5,1.5)=0.5.   nbar = (2 + 4 + 1) / 6 = 7/6.
    # max-pool: row 0 = [0.5, max(0.5,1.5), 1.5] / nbar = [3/7, 9/7, 9/7]
    #           row 1 = [1,   max(1,0.5),   0.5] / nbar = [6/7, 6/7, 3/7]
    # (at token 1 mean-pooling would give 6/7 and 9/14, sum-pooling 12/7 and 9/7).
    hidden = torch.tensor([[2.0, 0.0, 4.0, 100.0], [0.0, 0.0, 1.0, 100.0]])[..., None]  # [2, 4, 1]
    rollout = make_rollout([1.0, 0.0], [3, 3], T=4, G=2)
    credit = SHEARCredit(window=2, stride=1, solver=solver, **PRECISE)
    scorer = StubScorer(hidden)
    out = credit.assign(rollout, scorer)
    assert scorer.calls == [True]
    expected_w = torch.tensor([[3.0, 9.0, 9.0, 0.0], [6.0, 6.0, 3.0, 0.0]]) / 7
    w = weights_of(credit, hidden, rollout)
    torch.testing.assert_close(w, expected_w, atol=1e-4, rtol=0)
    a = 1.0 / math.sqrt(2.0)  # GRPO: (1 - 0.5) / std([1, 0]) with the unbiased std
    torch.testing.assert_close(out.advantages, torch.tensor([[a], [-a]]) * expected_w, atol=1e-4, rtol=0)
    assert out.metrics["pairs"] == 4  # 2 correct spans x 2 incorrect spans
    active = torch.tensor([3.0, 9.0, 9.0, 6.0, 6.0, 3.0]) / 7
    assert out.metrics["weight_mean"] == pytest.approx(float(active.mean()), abs=1e-4)
    assert out.metrics["weight_p50"] == pytest.approx(float(active.quantile(0.5)), abs=1e-4)
    assert out.metrics["weight_p90"] == pytest.approx(float(active.quantile(0.9)), abs=1e-4)


@pytest.mark.parametrize("solver", SOLVERS)
def test_planted_divergence_gets_more_weight_after_it(solver):
    # Two rollouts with identical hidden states up to token k and different ones after it.
    torch.manual_seed(0)
    T, H, k, window = 24, 8, 12, 4
    shared = torch.randn(k, H)
    hidden = torch.stack(
        [torch.cat([shared, torch.randn(T - k, H)]), torch.cat([shared, torch.randn(T - k, H)])]
    )
    rollout = make_rollout([1.0, 0.0], [T, T], T=T, G=2)
    credit = SHEARCredit(window=window, stride=2, solver=solver)
    w = weights_of(credit, hidden, rollout)  # [2, T]
    before, after = w[:, : k - window], w[:, k:]  # spans entirely inside the shared prefix vs after k
    assert before.abs().max() < 1e-3  # each prefix span has an identical twin in the other rollout
    assert after.min() > 0.1
    assert after.mean() > 10 * (before.mean() + 1e-3)
    out = credit.assign(rollout, StubScorer(hidden))
    adv = credit.group_advantages(rollout)  # [2]
    torch.testing.assert_close(out.advantages, adv[:, None] * w)  # A_{i,t} = A_i * w_{i,t}, not renormalised


@pytest.mark.parametrize("solver", SOLVERS)
def test_all_equal_group_keeps_grpo_and_degenerate_states_stay_finite(solver):
    torch.manual_seed(1)
    T, H = 6, 3
    credit = SHEARCredit(window=3, stride=2, solver=solver)
    # group 0 mixed, group 1 all correct: group 1 keeps weight 1 and A = 0
    rollout = make_rollout([1.0, 0.0, 1.0, 1.0], [6, 5, 6, 4], T=T, G=2)
    hidden = torch.randn(4, T, H)
    w, weighted, pairs = credit.token_weights(hidden, rollout.completion_mask, rollout.correct, rollout.group)
    assert weighted.tolist() == [True, True, False, False]
    torch.testing.assert_close(w[2:], rollout.completion_mask[2:].float())
    out = credit.assign(rollout, StubScorer(hidden))
    assert torch.isfinite(out.advantages).all()
    assert (out.advantages[2:] == 0).all()
    assert pairs == out.metrics["pairs"] == 3 * 2  # spans: len 6 -> (0,3),(2,3),(3,3); len 5 -> (0,3),(2,3)

    # a whole batch of all-equal groups: plain GRPO, nothing solved, no NaN advantages
    same = make_rollout([1.0, 1.0, 0.0, 0.0], [6, 6, 6, 6], T=T, G=2)
    out = credit.assign(same, StubScorer(hidden))
    assert out.metrics["pairs"] == 0 and (out.advantages == 0).all()

    # mixed rewards but identical (or all-zero) hidden states: distances 0, finite weights
    for h in (hidden[:1].expand(4, T, H).contiguous(), torch.zeros(4, T, H)):
        mixed = make_rollout([1.0, 0.0, 0.0, 1.0], [6, 6, 6, 6], T=T, G=4)
        w = weights_of(credit, h, mixed)
        assert torch.isfinite(w).all()
        assert w.abs().max() < 1e-3
        assert torch.isfinite(credit.assign(mixed, StubScorer(h)).advantages).all()


def test_sinkhorn_agrees_with_exact_emd_within_the_entropic_bias():
    torch.manual_seed(2)
    T, H, window, reg = 10, 5, 4, 0.05
    rollout = make_rollout([1.0, 0.0, 1.0, 0.0], [10, 7, 3, 9], T=T, G=4)  # row 2 shorter than the window
    hidden = torch.randn(4, T, H)
    exact = weights_of(SHEARCredit(window=window, stride=2, solver="emd"), hidden, rollout)
    sink = weights_of(SHEARCredit(window=window, stride=2, solver="sinkhorn", **PRECISE), hidden, rollout)
    gap = (sink - exact)[rollout.completion_mask.bool()]
    # W1 <= <P_eps, C> <= W1 + reg * log(min(n, m)); min- and max-pooling keep both bounds.
    assert gap.min() > -1e-4
    assert gap.max() < reg * math.log(window) + 1e-4
    assert gap.abs().max() > 0  # the two solvers are really different code paths

    # One pair with unequal sizes against POT directly.
    x, y = torch.randn(3, H), torch.randn(5, H)
    M = ot.dist(x.double().numpy(), y.double().numpy(), metric="euclidean")
    a, b = np.full(3, 1 / 3), np.full(5, 1 / 5)
    cost = torch.zeros(1, 5, 5)
    cost[0, :3, :5] = torch.from_numpy(M).float()
    mask_a = torch.tensor([[True] * 3 + [False] * 2])
    mask_b = torch.ones(1, 5, dtype=torch.bool)
    ref_emd = ot.emd2(a, b, M)
    assert float(emd_cost(cost, mask_a, mask_b)[0]) == pytest.approx(ref_emd, rel=1e-5)
    ref_sink = float(ot.sinkhorn2(a, b, M, reg, method="sinkhorn_log", numItermax=5000, stopThr=1e-10))
    ours = float(sinkhorn_cost(cost, mask_a, mask_b, reg, num_iter=3000, tol=1e-7)[0])
    assert ours == pytest.approx(ref_sink, rel=1e-4)
    assert ref_emd - 1e-5 <= ours <= ref_emd + reg * math.log(3) + 1e-5

    # A group of two rollouts no longer than the window: one span each, w = W1 / nbar on every token.
    two = make_rollout([0.0, 1.0], [3, 5], T=6, G=2)
    h = torch.zeros(2, 6, H)
    h[0, :3], h[1, :5] = x, y
    nbar = float(torch.cat([x, y]).norm(dim=-1).mean())
    w = weights_of(SHEARCredit(window=8, stride=4, solver="emd"), h, two)
    torch.testing.assert_close(w, two.completion_mask.float() * ref_emd / nbar, atol=1e-5, rtol=0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_weights_are_nonnegative_and_never_flip_an_advantage(solver):
    torch.manual_seed(3)
    N, G, T, H = 12, 4, 9, 4
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    rollout = make_rollout(rewards, torch.randint(1, T + 1, (N,)).tolist(), T=T, G=G)
    hidden = 3 * torch.randn(N, T, H)
    credit = SHEARCredit(window=3, stride=1, solver=solver)
    w = weights_of(credit, hidden, rollout)
    assert (w >= 0).all()
    assert (w[rollout.completion_mask == 0] == 0).all()
    adv = credit.assign(rollout, StubScorer(hidden)).advantages
    a = credit.group_advantages(rollout)[:, None].expand_as(adv)
    assert (adv * a >= 0).all()
    assert (adv[a != 0] != 0).any()


def test_groups_batched_together_match_groups_solved_alone_and_chunking_is_invisible():
    torch.manual_seed(4)
    T, H = 11, 6
    rollout = make_rollout([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [11, 8, 5, 10, 2, 9], T=T, G=3)
    hidden = torch.randn(6, T, H)
    credit = SHEARCredit(window=4, stride=2, solver="emd")
    together = weights_of(credit, hidden, rollout)
    for g in range(2):
        rows = torch.arange(3 * g, 3 * g + 3)
        alone = weights_of(credit, hidden[rows], rollout.index_select(rows))
        torch.testing.assert_close(together[rows], alone)
    # tol=0: a fixed number of iterations, so the batch a problem is solved in cannot matter
    chunked = SHEARCredit(window=4, stride=2, solver="sinkhorn", tol=0.0, chunk_elements=1)
    whole = SHEARCredit(window=4, stride=2, solver="sinkhorn", tol=0.0)
    torch.testing.assert_close(weights_of(chunked, hidden, rollout), weights_of(whole, hidden, rollout))


def test_span_layout_covers_every_token_for_every_length_window_and_stride():
    for window in range(1, 13):
        for stride in range(1, window + 1):
            for length in range(0, 61):
                spans = span_starts(length, window, stride)
                covered = torch.zeros(length, dtype=torch.bool)
                for start, size in spans:
                    assert 0 <= start and 0 < size <= window and start + size <= length
                    covered[start : start + size] = True
                assert covered.all(), (length, window, stride)
                if length > window:  # long completions: full windows only, the last one ends at the end
                    assert all(size == window for _, size in spans)
                    assert spans[-1][0] + window == length


@pytest.mark.parametrize(("window", "stride"), [(4, 5), (1, 2), (8, 25), (100, 101)])
def test_stride_larger_than_window_is_rejected_at_construction(window, stride):
    with pytest.raises(RLVRError, match="stride"):
        SHEARCredit(window=window, stride=stride)
    with pytest.raises(ValueError, match="stride"):
        span_starts(3 * window + 7, window, stride)


@pytest.mark.parametrize(("window", "stride"), [(0, 1), (4, 0), (-1, -1)])
def test_non_positive_window_or_stride_is_rejected(window, stride):
    with pytest.raises(RLVRError):
        SHEARCredit(window=window, stride=stride)


def test_stride_equal_to_window_is_allowed_and_tiles_the_completion():
    SHEARCredit(window=4, stride=4)
    assert span_starts(12, 4, 4) == [(0, 4), (4, 4), (8, 4)]
    assert span_starts(13, 4, 4) == [(0, 4), (4, 4), (8, 4), (9, 4)]


def test_invalid_solver_is_rejected():
    with pytest.raises(ValueError):
        SHEARCredit(solver="mmd")


def test_sinkhorn_stays_finite_when_the_kernel_overflows_fp32():
    torch.manual_seed(5)
    x, y = torch.randn(4, 6, 3), torch.randn(4, 6, 3)
    scale = torch.tensor([1.0, 1.0, 40.0, 40.0])[:, None, None]  # last two: cost range / reg >> 88
    cost = torch.cdist(x, y) * scale
    mask_a, mask_b = torch.ones(4, 6, dtype=torch.bool), torch.ones(4, 6, dtype=torch.bool)
    mask_a[1, 4:] = False  # 4 points against 6
    out = sinkhorn_cost(cost, mask_a, mask_b, 0.05, num_iter=2000, tol=1e-7)
    assert torch.isfinite(out).all()
    for p in range(4):  # each against POT's unbatched log-domain Sinkhorn
        n = int(mask_a[p].sum())
        M = cost[p, :n].double().numpy()
        ref = ot.sinkhorn2(
            np.full(n, 1 / n), np.full(6, 1 / 6), M, 0.05, method="sinkhorn_log", numItermax=5000
        )
        assert float(out[p]) == pytest.approx(float(ref), rel=1e-3, abs=1e-3)
    exact = emd_cost(cost[:2], mask_a[:2], mask_b[:2])  # the well-conditioned pair is within the bias
    assert (out[:2] >= exact - 1e-3).all() and (out[:2] <= exact + 0.05 * math.log(6) + 1e-3).all()


def random_problems(B: int, n: int, seed: int, scale: float = 1.0):
    """[B, n, n] Euclidean costs between random point sets, each side with 1..n real points."""
    g = torch.Generator().manual_seed(seed)
    cost = torch.cdist(torch.randn(B, n, 3, generator=g), torch.randn(B, n, 3, generator=g)) * scale
    ar = torch.arange(n)
    mask_a = ar[None] < torch.randint(1, n + 1, (B, 1), generator=g)
    mask_b = ar[None] < torch.randint(1, n + 1, (B, 1), generator=g)
    return cost, mask_a, mask_b


@pytest.mark.parametrize("method", ["sinkhorn", "log_sinkhorn"])
def test_sinkhorn_runs_the_iterations_of_pots_batched_solver(method):
    """With tol=0 (a fixed number of iterations) both domains give POT's ``solve_batch`` values."""
    cost, mask_a, mask_b = random_problems(64, 6, seed=6, scale=0.5)
    a = mask_a.float() / mask_a.sum(-1, keepdim=True)
    b = mask_b.float() / mask_b.sum(-1, keepdim=True)
    for num_iter in (1, 7, 60):
        ref = ot.batch.solve_batch(
            cost, reg=0.05, a=a, b=b, max_iter=num_iter, tol=0.0, method=method, grad="detach"
        ).value_linear
        if method == "sinkhorn":
            ours = sinkhorn_cost(cost, mask_a, mask_b, 0.05, num_iter=num_iter, tol=0.0)
        else:
            ours = _sinkhorn(cost, a, b, 0.05, num_iter, 0.0, log_domain=True)
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_sinkhorn_stops_each_problem_on_its_own_and_within_tolerance():
    """Per-problem stopping: a problem's value is the same alone or in any batch, and near converged."""
    cost, mask_a, mask_b = random_problems(40, 5, seed=7, scale=0.5)
    batch = sinkhorn_cost(cost, mask_a, mask_b, 0.05, num_iter=200, tol=1e-3)
    alone = torch.stack(
        [
            sinkhorn_cost(cost[p : p + 1], mask_a[p : p + 1], mask_b[p : p + 1], 0.05, 200, 1e-3)[0]
            for p in range(40)
        ]
    )
    torch.testing.assert_close(batch, alone, rtol=1e-6, atol=1e-7)
    converged = sinkhorn_cost(cost, mask_a, mask_b, 0.05, num_iter=5000, tol=1e-7)
    assert (batch - converged).abs().max() < 1e-2
    assert not torch.equal(batch, converged)  # some problems did stop early


@pytest.mark.parametrize("num_iter", [1, 3, 100])
def test_nearest_point_bound_is_below_every_solver_converged_or_not(num_iter):
    cost, mask_a, mask_b = random_problems(200, 6, seed=8)
    lb = nearest_point_bound(cost, mask_a, mask_b)
    assert (lb <= emd_cost(cost, mask_a, mask_b) + 1e-5).all()
    assert (lb <= sinkhorn_cost(cost, mask_a, mask_b, 0.05, num_iter=num_iter, tol=0.0) + 1e-5).all()
    assert (lb > 0).all()


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("window,stride", [(2, 1), (4, 2), (5, 5)])
def test_pruned_pairs_give_the_weights_of_solving_every_pair(solver, window, stride):
    torch.manual_seed(9)
    N, G, T, H = 16, 8, 14, 6
    rewards = [float(x) for x in torch.randint(0, 2, (N,))]
    rewards[0], rewards[1], rewards[8], rewards[9] = 1.0, 0.0, 1.0, 0.0  # both groups mixed
    rollout = make_rollout(rewards, torch.randint(1, T + 1, (N,)).tolist(), T=T, G=G)
    hidden = torch.randn(N, T, H) + 2 * torch.randn(N, 1, H)  # rows differ, as real rollouts do
    pruned = SHEARCredit(window=window, stride=stride, solver=solver)
    full = SHEARCredit(window=window, stride=stride, solver=solver, prune=False)
    w_pruned, _, pairs = pruned.token_weights(hidden, rollout.completion_mask, rollout.correct, rollout.group)
    w_full, _, _ = full.token_weights(hidden, rollout.completion_mask, rollout.correct, rollout.group)
    torch.testing.assert_close(w_pruned, w_full, rtol=1e-6, atol=1e-7)
    assert full.pairs_solved == pairs
    assert pruned.pairs_solved < pairs  # the bound really ruled pairs out
