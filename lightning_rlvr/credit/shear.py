"""SHEAR: span-level hidden-state Wasserstein advantage reweighting.

Formulas, defaults and provenance: ``docs/methods.md`` (SHEAR).

GRPO gives every token of a rollout the same advantage A_i. SHEAR looks for the
*places* where a correct and an incorrect rollout of the same prompt part ways,
using only the last-layer hidden states h_t (the LM-head input) that the
old-log-prob pass, or with one epoch and one minibatch the update's own forward
(the module runs it before the credit), computes anyway: no extra model, pass or
generation.

Each completion is cut into overlapping spans of ``window`` tokens with stride
``stride`` (a completion shorter than the window is one span); span k of
rollout i is the uniform empirical distribution P_{i,k} of its hidden states.
A span that also occurs (in hidden-state space) somewhere in a rollout with the
opposite outcome is shared reasoning and deserves little credit; one that is far
from every span of every opposite rollout is where the outcomes diverge:

    O(i)      = incorrect rollouts of the group if r_i = 1, else the correct ones
    d_{i,k}   = min_{j in O(i)} min_l W1(P_{i,k}, P_{j,l})          (Euclidean cost)
    nbar      = mean_{j in group, t active} ||h_{j,t}||_2
    w_{i,t}   = (1 / nbar) * max_{k : t in span k} d_{i,k}         (max-pooling, not mean)
    A_{i,t}   = A_i * w_{i,t}                                     (not renormalised)

A group whose rewards are all equal (O(i) empty) keeps plain GRPO (w = 1; its
A_i is 0 anyway). Weights are >= 0, so they never flip an advantage's sign.

Implementation notes (all without gradients, fp32):

* W1 is positively homogeneous, so W1(P, Q) / nbar = W1 of the hidden states divided by
  nbar: costs are divided by the group's nbar before solving. Exact EMD is unchanged by
  this; for Sinkhorn it makes ``reg`` a fraction of the typical hidden-state norm rather
  than an absolute number that would need retuning for every model width.
* Every distance d_{i,k} is a min over the same matrix D_g[k, l] of all (correct span,
  incorrect span) pairs of a group g: correct spans take row minima, incorrect spans
  column minima, so each pair is solved once. Token-to-token costs of a group come from
  one ``torch.cdist`` between its correct and its incorrect tokens; each span pair's
  [w, w] cost matrix is a gather from it. Pairs of all groups are solved together in
  chunks of at most ``chunk_elements`` cost entries.
* Most pairs are never solved: only a row's or a column's minimum matters. Every pair
  first gets a lower bound from its cost matrix alone (``nearest_point_bound``: each
  target point's cost to its nearest source point, averaged); the pair with the smallest
  bound of each span is solved, which bounds that span's minimum from above, and then
  only the pairs whose lower bound does not exceed their row's or column's upper bound.
  The minima are exactly those of solving every pair (``prune=False``); at the quickstart
  about one pair in seven is solved.
* Sinkhorn runs POT's batched iterations (``ot.batch.solve_batch``: f = a / K g,
  g = b / K^T f) in our own loop over [w, w, pairs] tensors (batch last: vectorised
  elementwise ops instead of many tiny matrix-vector products), with zero mass on the
  padding of short spans, and in the log domain for the rare problems whose kernels
  overflow fp32. Convergence is decided per problem (POT stops the batch when its worst
  problem converges), so a pair's distance never depends on which pairs share its batch.
  The distance is the transport cost <P_eps, C> (as ``ot.sinkhorn2`` reports it), which
  lies in [W1, W1 + reg * log(min(n, m))] at convergence.
* EMD: POT 0.9.7 has no batched *exact* solver (``ot.batch.solve_batch`` is Sinkhorn or an
  inexact proximal-point method), so ``solver="emd"`` loops ``ot.emd2`` over the pairs in
  float64 after the batched cost gather (the reference; on one CPU thread it is on par with
  Sinkhorn for 100-token spans and ~25x slower for 8-token ones: benchmarks/shear_scaling.py).
* Span layout [proposed]: starts 0, s, 2s, ... while the window fits, plus one final window
  aligned to the end of the completion when the strided ones do not reach it, so every
  active token is in at least one span and all spans of long completions have w tokens.
* Hidden state of token t: ``Scorer.policy(hidden=True).hidden[:, t]``, the last-layer state
  at the position that predicted token t (the state in which the token was chosen).

The span layout and the OT solvers (``span_starts``, ``sinkhorn_cost``, ``emd_cost``,
``nearest_point_bound``) live in ``credit/shear_distance.py``; ``SHEARCredit`` here pairs the spans
and turns distances into token weights.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.errors import RLVRError
from ..core.rollout import Rollout
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner
from .shear_distance import SOLVERS, emd_cost, nearest_point_bound, sinkhorn_cost, span_starts


class SHEARCredit(CreditAssigner):
    """SHEAR token weights from span Wasserstein distances to the opposite-outcome rollouts.

    Args:
        window: span length w in tokens [paper: 100].
        stride: span stride s in tokens, 1 <= s <= w so that every token is in a span [paper: 25].
        solver: ``"sinkhorn"`` (entropic, batched, the paper's) or ``"emd"`` (exact ``ot.emd2``).
        reg: Sinkhorn entropic regularisation, in units of the group's mean hidden norm nbar
            [proposed: 0.05].
        num_iter: maximum Sinkhorn iterations [proposed: 100].
        tol: Sinkhorn early stop of each span pair on its row-marginal L2 error, checked every
            10 iterations [proposed: 1e-3; 0 disables].
        chunk_elements: at most this many cost entries (pairs * w * w) are solved at once.
        prune: solve only the span pairs that can be a row or column minimum, as decided by
            a lower bound on each pair's cost (``nearest_point_bound``); exact (the weights do
            not change), typically several times fewer solves. False solves every pair.
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages.
    """

    lab_claims = ("shear", "shear_control")  # the credit lab checks its span-distance claim

    uses_hidden_states = True

    def __init__(
        self,
        window: int = 100,
        stride: int = 25,
        solver: str = "sinkhorn",
        reg: float = 0.05,
        num_iter: int = 100,
        tol: float = 1e-3,
        chunk_elements: int = 2**24,
        prune: bool = True,
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(scale_by_std=scale_by_std)
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        if window < 1 or stride < 1:
            raise RLVRError(f"SHEAR: window and stride must be >= 1, got window={window}, stride={stride}")
        if stride > window:
            raise RLVRError(
                f"SHEAR: stride ({stride}) > window ({window}) leaves the tokens between windows in no "
                "span (zero advantage); set stride <= window"
            )
        self.window = window
        self.stride = stride
        self.solver = solver
        self.reg = reg
        self.num_iter = num_iter
        self.tol = tol
        self.chunk_elements = chunk_elements
        self.prune = prune
        self.pairs_solved = 0  # span pairs the last ``token_weights`` solved (a metric)

    # ------------------------------------------------------------------ solver
    def _solve(self, cost: Tensor, mask_a: Tensor, mask_b: Tensor) -> Tensor:
        if self.solver == "emd":
            return emd_cost(cost, mask_a, mask_b)
        return sinkhorn_cost(cost, mask_a, mask_b, self.reg, self.num_iter, self.tol)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def token_weights(
        self, hidden: Tensor, mask: Tensor, correct: Tensor, group: Tensor
    ) -> tuple[Tensor, Tensor, int]:
        """SHEAR weights w_{i,t}.

        Args:
            hidden: [N, T, H] hidden state of each completion token.
            mask: [N, T] 1 on active completion tokens.
            correct: [N] bool, the verifier's verdict (``rollout.correct``); ``group``: [N] prompt index.

        Returns (weights [N, T] (1 on rows of all-equal groups, 0 on padding),
        weighted [N] bool (rows with a non-empty opposing set), number of span pairs solved).
        """
        hidden = hidden.detach().float()  # [N, T, H]
        N, T, _ = hidden.shape
        device = hidden.device
        mask = mask.bool()
        lengths = mask.sum(-1).tolist()
        correct = correct.bool().tolist()
        weights = mask.float().clone()  # [N, T] plain GRPO weight 1 until a group is weighted
        weighted = torch.zeros(N, dtype=torch.bool, device=device)

        # Per mixed group: one token-cost block; spans are index rows into it.
        blocks: list[Tensor] = []  # flattened [n_c_tok * n_i_tok] costs / nbar of each group
        spans: dict[bool, list[tuple[int, int, int, int]]] = {True: [], False: []}  # (idx, row, start, size)
        pairs: list[tuple[int, int, int, int, int, int]] = []  # (c0, c1, i0, i1, block offset, row stride)
        offset = 0
        for g in group.unique().tolist():
            rows = [r for r in (group == g).nonzero().flatten().tolist() if lengths[r] > 0]
            side_rows = {True: [r for r in rows if correct[r]], False: [r for r in rows if not correct[r]]}
            if not side_rows[True] or not side_rows[False]:
                continue  # O(i) empty: plain GRPO
            nbar = hidden[rows][mask[rows]].norm(dim=-1).mean().clamp(min=1e-12)  # over the group's tokens
            toks, ranges = {}, {}
            for side in (True, False):
                toks[side] = hidden[side_rows[side]][mask[side_rows[side]]]  # [n_side_tok, H], row-major
                first, s0 = 0, len(spans[side])
                for r in side_rows[side]:  # active tokens are a prefix of each row
                    spans[side] += [
                        (first + st, r, st, sz)
                        for st, sz in span_starts(lengths[r], self.window, self.stride)
                    ]
                    first += lengths[r]
                ranges[side] = (s0, len(spans[side]))
            block = torch.cdist(toks[True], toks[False]) / nbar  # [n_c_tok, n_i_tok] one cdist per group
            pairs.append((*ranges[True], *ranges[False], offset, block.shape[1]))
            blocks.append(block.flatten())
            offset += block.numel()
            weighted[rows] = True

        if not blocks:
            self.pairs_solved = 0
            return weights, weighted, 0

        flat = torch.cat(blocks)  # all groups' token costs
        # Every (correct span, incorrect span) pair of every mixed group.
        pc, pi, base, rstride = [], [], [], []
        for c0, c1, i0, i1, off, stride in pairs:
            a, b = torch.meshgrid(
                torch.arange(c0, c1, device=device), torch.arange(i0, i1, device=device), indexing="ij"
            )
            pc.append(a.flatten())
            pi.append(b.flatten())
            base.append(torch.full((a.numel(),), off, dtype=torch.long, device=device))
            rstride.append(torch.full((a.numel(),), stride, dtype=torch.long, device=device))
        pc, pi, base, rstride = torch.cat(pc), torch.cat(pi), torch.cat(base), torch.cat(rstride)  # [n_pairs]
        n_pairs = int(pc.numel())
        info = {
            side: dict(zip(("idx", "row", "start", "size"), torch.tensor(spans[side], device=device).T))
            for side in (True, False)
        }
        w = int(max(int(info[s]["size"].max()) for s in (True, False)))
        ar = torch.arange(w, device=device)
        # [S, w] mask of each span's points and their index in its side of the group block (pad -> first)
        span_mask = {s: ar[None, :] < info[s]["size"][:, None] for s in (True, False)}
        span_idx = {
            s: torch.where(span_mask[s], info[s]["idx"][:, None] + ar, info[s]["idx"][:, None])
            for s in (True, False)
        }

        per_chunk = max(1, self.chunk_elements // (w * w))

        def pair_costs(sel: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            """[B, w, w] costs and [B, w] point masks of the pairs ``sel``, gathered from the blocks."""
            ic, ii = span_idx[True][pc[sel]], span_idx[False][pi[sel]]  # [B, w]
            gather = base[sel, None, None] + ic[:, :, None] * rstride[sel, None, None] + ii[:, None, :]
            return flat[gather], span_mask[True][pc[sel]], span_mask[False][pi[sel]]

        dist = torch.full((n_pairs,), float("inf"), device=device)  # W1(P_k, P_l) / nbar; inf: not solved
        solved = torch.zeros(n_pairs, dtype=torch.bool, device=device)

        def solve(sel: Tensor) -> None:
            for part in sel.split(per_chunk):
                dist[part] = self._solve(*pair_costs(part))
            solved[sel] = True

        everything = torch.arange(n_pairs, device=device)
        if not self.prune:
            solve(everything)
        else:
            lb = torch.empty(n_pairs, device=device)  # a lower bound on each pair's distance
            for part in everything.split(per_chunk):
                lb[part] = nearest_point_bound(*pair_costs(part))
            n_side = {s: int(info[s]["size"].numel()) for s in (True, False)}
            # stage 1: for every span, the pair with the smallest bound (likely its minimum) ...
            best = {
                s: torch.full((n_side[s],), float("inf"), device=device).scatter_reduce(
                    0, ids, lb, "amin", include_self=True
                )
                for s, ids in ((True, pc), (False, pi))
            }
            solve(((lb == best[True][pc]) | (lb == best[False][pi])).nonzero().flatten())
            # ... whose distances bound the minima from above; stage 2: every pair whose lower bound
            # does not exceed its row's or its column's upper bound (a small slack absorbs rounding).
            upper = {
                s: torch.full((n_side[s],), float("inf"), device=device)
                .scatter_reduce(0, ids, dist, "amin", include_self=True)
                .nan_to_num(nan=float("inf"))
                for s, ids in ((True, pc), (False, pi))
            }
            slack = lambda u: u + 1e-4 * u.abs() + 1e-6  # noqa: E731
            open_ = (lb <= slack(upper[True][pc])) | (lb <= slack(upper[False][pi]))
            solve((open_ & ~solved).nonzero().flatten())
        self.pairs_solved = int(solved.sum())

        # d_{i,k}: correct spans take the min over their row of the pair matrix, incorrect spans the column.
        d = {}
        for side, ids in ((True, pc), (False, pi)):
            n = int(info[side]["size"].numel())
            d[side] = torch.full((n,), float("inf"), device=device).scatter_reduce(
                0, ids, dist, "amin", include_self=True
            )

        # w_{i,t} = max over spans containing t of d_{i,k} (d >= 0, so 0 is a neutral start).
        flat_w = torch.zeros(N * T, device=device)
        for side in (True, False):
            pos = info[side]["row"][:, None] * T + info[side]["start"][:, None] + ar  # [S, w]
            m = span_mask[side]
            flat_w.scatter_reduce_(0, pos[m], d[side][:, None].expand_as(pos)[m], "amax", include_self=True)
        new = flat_w.view(N, T).clamp(min=0) * mask.float()
        weights = torch.where(weighted[:, None], new, weights)
        return weights, weighted, n_pairs

    # ------------------------------------------------------------------ assigner
    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        hidden = scorer.policy(hidden=True).hidden  # [N, T, H] fp32, no grad
        mask = rollout.completion_mask  # [N, T]
        weights, weighted, n_pairs = self.token_weights(hidden, mask, rollout.correct, rollout.group)
        adv = self.group_advantages(rollout)  # [N]
        advantages = adv[:, None] * weights * mask  # [N, T]

        active = weights[weighted[:, None] & mask.bool()]  # weights of weighted rows' active tokens
        nan = float("nan")
        n_groups = int(rollout.group.max()) + 1 if rollout.num_rows else 0
        mixed = len(rollout.group[weighted].unique()) if bool(weighted.any()) else 0
        metrics = {
            "weight_mean": float(active.mean()) if active.numel() else nan,
            "weight_p50": float(active.quantile(0.5)) if active.numel() else nan,
            "weight_p90": float(active.quantile(0.9)) if active.numel() else nan,
            "weight_max": float(active.max()) if active.numel() else nan,
            "pairs": float(n_pairs),
            "pairs_solved": float(self.pairs_solved),
            "frac_groups_weighted": mixed / max(n_groups, 1),
        }
        return Credit(advantages=advantages, metrics=metrics)
