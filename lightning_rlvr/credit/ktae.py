"""KTAE: key-token advantage estimation from token statistics of the group (arXiv 2505.16826).

Model-free: no extra forward pass. For each group (G rollouts of one prompt,
n_c correct and n_w incorrect by ``rollout.correct``) and each distinct token
id v in the group's completions, a 2 x 2 contingency table of *rollouts* [paper]:

    a = #correct rollouts containing v     b = #incorrect rollouts containing v
    c = n_c - a                            d = n_w - b

Association strength, two ways [paper]:

* Fisher's exact test, two-sided p-value p(v) (sum of the hypergeometric
  probabilities of all tables with the same margins that are no more likely
  than the observed one), turned into F(v) = exp(-2 p(v)), and F = 0 when
  p = 1 [paper's code: a table with no evidence scores 0];
* information gain of correctness from v's presence, in bits:
  IG(v) = H(Y) - (a+b)/G H(a, b) - (c+d)/G H(c, d).

Direction [paper]: Cohen's-h-like difference of presence rates
h(v) = asin(sqrt(a / n_c)) - asin(sqrt(b / n_w)) (without Cohen's factor 2, as
in the paper's code), plus a BM25-style term-frequency contrast

    f_c = (#occurrences of v in correct rollouts) / L_c,   L_c = #tokens of the correct rollouts
    tf_c = f_c (k1 + 1) / (f_c + k1 (1 - b + b L_c / L)),  L = (L_c + L_w) / 2      (same for w)
    dir(v) = h(v) + gamma * (tf_c / (tf_w + eps) - tf_w / (tf_c + eps))

with k1 = 2, b = 0.5, eps = 1e-5 [paper's code]. Key-token value and advantage:

    s(v)      = (alpha F(v) + beta IG(v)) dir(v) / (alpha + beta)
    K(v)      = scale * (2 sigmoid(s(v)) - 1)              in (-scale, scale)
    A_{i,t}   = A_i + K(o_{i,t})

alpha = beta = gamma = scale = 1 [paper's code defaults]. A token shared by
every rollout has p = 1, IG = 0, h = 0, so K = 0; a group that is all correct
or all incorrect gets K = 0 everywhere (and A_i = 0), as in the paper's code.

Gaps filled [proposed]: correctness is ``rollout.correct`` (the paper: reward
> 0); A_i is this project's group advantage (``scale_by_std`` for GRPO or Dr.
GRPO); the EOS token gets K = 0 (the paper's code zeroes its model's
end-of-text id, which is also its padding); ``gamma`` weights the tf term
(the paper's code has an on/off flag); p-values compare table probabilities
with a relative tolerance of 1e-7 (as SciPy does), so rounding cannot drop
the observed table's twins, and p >= 1 - 1e-6 counts as 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core.rollout import Rollout
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner


def _log_comb(n: Tensor, k: Tensor) -> Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def fisher_exact_p(a: Tensor, b: Tensor, c: Tensor, d: Tensor, rtol: float = 1e-7) -> Tensor:
    """Two-sided Fisher exact-test p-values of 2 x 2 tables [[a, b], [c, d]] (elementwise): [K] float64."""
    a, b, c, d = (x.double() for x in (a, b, c, d))
    n, row, col = a + b + c + d, a + b, a + c  # total, token-present rollouts, correct rollouts
    lo = torch.clamp(row + col - n, min=0)  # [K] support of the hypergeometric count
    hi = torch.minimum(row, col)
    k = torch.arange(int(hi.max()) + 1 if hi.numel() else 1, dtype=torch.float64, device=a.device)[None]
    inside = (k >= lo[:, None]) & (k <= hi[:, None])  # [K, S]
    kk = torch.where(inside, k, lo[:, None])  # keep lgamma arguments valid outside the support
    log_pk = (
        _log_comb(col[:, None], kk)
        + _log_comb((n - col)[:, None], row[:, None] - kk)
        - _log_comb(n, row)[:, None]
    )
    log_obs = _log_comb(col, a) + _log_comb(n - col, row - a) - _log_comb(n, row)  # [K]
    pk = torch.where(inside, log_pk.exp(), torch.zeros_like(log_pk))
    as_extreme = inside & (pk <= log_obs.exp()[:, None] * (1 + rtol))
    return (pk * as_extreme).sum(-1).clamp(max=1.0)


def _plogp(p: Tensor) -> Tensor:
    """-p log2 p with 0 log 0 = 0."""
    return torch.where(p > 0, -p * torch.log2(p.clamp(min=1e-300)), torch.zeros_like(p))


def binary_entropy_bits(x: Tensor, y: Tensor) -> Tensor:
    """Entropy in bits of the split (x, y) of x + y items; 0 when there are none."""
    total = x + y
    safe = total.clamp(min=1)
    return torch.where(total > 0, _plogp(x / safe) + _plogp(y / safe), torch.zeros_like(total))


def information_gain(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """IG of correctness (columns a+c vs b+d) from the token's presence (rows a+b vs c+d), in bits."""
    a, b, c, d = (x.double() for x in (a, b, c, d))
    n = (a + b + c + d).clamp(min=1)
    h_y = binary_entropy_bits(a + c, b + d)
    h_y_x = (a + b) / n * binary_entropy_bits(a, b) + (c + d) / n * binary_entropy_bits(c, d)
    return (h_y - h_y_x).clamp(min=0.0)


def bm25_tf(count: Tensor, length: float, avg_length: float, k1: float, b: float) -> Tensor:
    """BM25 saturation of a relative frequency count / length (0 when length is 0)."""
    if length <= 0:
        return torch.zeros_like(count, dtype=torch.float64)
    f = count.double() / length
    return f * (k1 + 1) / (f + k1 * (1 - b + b * length / avg_length))


class KTAECredit(CreditAssigner):
    """A_{i,t} = A_i + K(o_{i,t}) from per-group token contingency tables (see the module docstring).

    Args:
        fisher_weight: alpha, weight of the Fisher-test score [paper: 1].
        ig_weight: beta, weight of the information gain [paper: 1].
        tf_weight: gamma, weight of the BM25 term-frequency contrast in the direction [paper: 1].
        bm25_k1: BM25 saturation k1 [paper: 2].
        bm25_b: BM25 length normalisation b [paper: 0.5].
        tf_eps: eps in the term-frequency ratios [paper: 1e-5].
        scale: bound of the key-token value K in (-scale, scale) [paper: 1].
        exclude_eos: the EOS token gets K = 0 [proposed: True].
        scale_by_std: GRPO (True) or Dr. GRPO (False) rollout advantages A_i.
    """

    def __init__(
        self,
        fisher_weight: float = 1.0,
        ig_weight: float = 1.0,
        tf_weight: float = 1.0,
        bm25_k1: float = 2.0,
        bm25_b: float = 0.5,
        tf_eps: float = 1e-5,
        scale: float = 1.0,
        exclude_eos: bool = True,
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(scale_by_std=scale_by_std)
        if fisher_weight < 0 or ig_weight < 0 or fisher_weight + ig_weight <= 0:
            raise ValueError("fisher_weight and ig_weight must be >= 0 with a positive sum")
        if tf_eps <= 0:
            raise ValueError(f"tf_eps must be positive, got {tf_eps}")
        self.fisher_weight = fisher_weight
        self.ig_weight = ig_weight
        self.tf_weight = tf_weight
        self.bm25_k1 = bm25_k1
        self.bm25_b = bm25_b
        self.tf_eps = tf_eps
        self.scale = scale
        self.exclude_eos = exclude_eos

    def key_values(self, ids: Tensor, mask: Tensor, correct: Tensor, eos_id: int | None = None) -> Tensor:
        """Key-token value K of every token of one group: [G, T] float64 (0 on padding).

        ``ids`` [G, T] completion ids, ``mask`` [G, T] valid tokens, ``correct`` [G] bool.
        All zeros when the group is all correct, all incorrect or has no tokens.
        """
        valid = mask.bool()
        out = torch.zeros(ids.shape, dtype=torch.float64, device=ids.device)
        n_c, n_w = int(correct.sum()), int((~correct).sum())
        if not bool(valid.any()) or n_c == 0 or n_w == 0:
            return out
        tokens, inverse = ids[valid].unique(return_inverse=True)  # [U], [n_valid]
        row = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(ids)[valid]  # [n_valid]
        occurrences = torch.zeros(ids.shape[0], len(tokens), dtype=torch.float64, device=ids.device)
        occurrences.index_put_((row, inverse), torch.ones_like(inverse, dtype=torch.float64), accumulate=True)
        present = occurrences > 0  # [G, U] the rollout contains the token
        a, b = present[correct].sum(0), present[~correct].sum(0)  # [U]
        c, d = n_c - a, n_w - b
        p = fisher_exact_p(a, b, c, d)
        fisher = torch.where(p < 1 - 1e-6, torch.exp(-2 * p), torch.zeros_like(p))
        ig = information_gain(a, b, c, d)
        h = torch.asin((a.double() / n_c).sqrt()) - torch.asin((b.double() / n_w).sqrt())
        len_c, len_w = float(valid[correct].sum()), float(valid[~correct].sum())
        avg = (len_c + len_w) / 2
        tf_c = bm25_tf(occurrences[correct].sum(0), len_c, avg, self.bm25_k1, self.bm25_b)
        tf_w = bm25_tf(occurrences[~correct].sum(0), len_w, avg, self.bm25_k1, self.bm25_b)
        direction = h + self.tf_weight * (tf_c / (tf_w + self.tf_eps) - tf_w / (tf_c + self.tf_eps))
        weight = self.fisher_weight * fisher + self.ig_weight * ig
        s = weight * direction / (self.fisher_weight + self.ig_weight)
        key = self.scale * (2 * torch.sigmoid(s) - 1)  # [U]
        if self.exclude_eos and eos_id is not None:
            key = torch.where(tokens == eos_id, torch.zeros_like(key), key)
        out[valid] = key[inverse]
        return out

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        ids, mask = rollout.completion_ids, rollout.loss_mask  # [N, T] statistics of the policy's tokens
        correct = rollout.correct.bool().to(ids.device)  # [N]
        adv = self.group_advantages(rollout)  # [N]
        key = torch.zeros(ids.shape, dtype=torch.float64, device=ids.device)  # [N, T]
        groups = rollout.group.to(ids.device)
        names = groups.unique().tolist()
        mixed = 0
        for g in names:
            rows = (groups == g).nonzero().squeeze(1)  # [G]
            mixed += int(0 < int(correct[rows].sum()) < len(rows))
            key[rows] = self.key_values(ids[rows], mask[rows], correct[rows], rollout.eos_id)
        key = key.float() * mask  # [N, T]
        valid = mask.bool()
        k = key[valid]
        metrics = {
            "key_abs_mean": float(k.abs().mean()) if k.numel() else math.nan,
            "key_pos_frac": float((k > 0).float().mean()) if k.numel() else math.nan,
            "frac_mixed_groups": mixed / max(len(names), 1),
        }
        return Credit(advantages=(adv[:, None] + key) * mask, metrics=metrics)
