"""How close is a method's token credit to the true credit? The credit lab's measurements.

All functions take one rollout's credit ``w`` [L] (a method's per-token credit on
its L completion tokens) and compare it with a reference on the same tokens:

* ``spearman(w, o)`` -- rank correlation with the Monte-Carlo segment advantage
  ``o`` (average ranks for ties). Undefined (None) when either is constant: a
  method that gives every token of a rollout the same credit (GRPO) has no
  ranking of its tokens to compare.
* ``localisation(w, e, d)`` -- of the credit's deviation from uniform,
  ``|w_t - median(w)|``, the share that falls within +-d tokens of the known
  first error ``e``, and the share a uniform spread would put there,
  ``|window| / L``. A constant ``w`` has no deviation; it counts as spread
  uniformly (its share is the uniform share), so GRPO scores exactly the
  baseline. The uniform level is the median, not the mean: with the mean a
  method that moves all its extra credit onto one token could never score
  above ~0.5 (the peak shifts the mean, and that shift shows up as deviation
  on every other token); from the median a single peak scores 1.
* ``spearman_or_zero(w, o)`` -- the same, with constant credit counted as 0, so
  that every method is averaged over the same rollouts (those where ``o`` varies).
* ``sign_agreement(w, o)`` -- of the tokens where ``o`` is non-zero, the share
  whose credit has the sign of ``o``; zero credit counts as no agreement, so
  every method is scored on the same tokens. ``coverage(w, o)`` is the share of
  those tokens where the credit is non-zero at all.

Each is invariant to multiplying ``w`` by a positive constant (localisation by
any non-zero one): the lab compares *where* credit goes, not its scale, which
the learning rate absorbs. Per-rollout values are averaged over rollouts with a
95% interval from a bootstrap that resamples whole groups (rollouts of a group
share their prompt and peers, so they are not independent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor

CONSTANT_RTOL = 1e-6  # a credit vector whose spread is below this share of its magnitude is constant


def is_constant(w: Tensor) -> bool:
    """True when every entry of ``w`` [L] equals the others up to ``CONSTANT_RTOL`` of its magnitude."""
    if w.numel() < 2:
        return True
    w = w.double()
    return float(w.max() - w.min()) <= CONSTANT_RTOL * max(float(w.abs().max()), 1e-300)


def spearman(w: Tensor, o: Tensor) -> float | None:
    """Spearman rank correlation of ``w`` and ``o`` [L] (average ranks); None when undefined."""
    if is_constant(w) or is_constant(o):
        return None
    rw = rankdata(w.double().cpu().numpy())
    ro = rankdata(o.double().cpu().numpy())
    rw, ro = rw - rw.mean(), ro - ro.mean()
    return float((rw * ro).sum() / math.sqrt((rw * rw).sum() * (ro * ro).sum()))


def window(length: int, error: int, d: int) -> tuple[int, int]:
    """[start, end) of the tokens within +-d of ``error``, clipped to the completion."""
    return max(0, error - d), min(length, error + d + 1)


def localisation(w: Tensor, error: int, d: int) -> tuple[float, float]:
    """(share of |w - median w| within +-d tokens of ``error``, the share a uniform spread gets)."""
    L = w.numel()
    lo, hi = window(L, error, d)
    uniform = (hi - lo) / L
    if is_constant(w):
        return uniform, uniform
    dev = (w.double() - torch.quantile(w.double(), 0.5)).abs()
    return float(dev[lo:hi].sum() / dev.sum()), uniform


def _nonzero(x: Tensor) -> Tensor:
    """Entries of ``x`` that are non-zero beyond ``CONSTANT_RTOL`` of its magnitude."""
    scale = max(float(x.abs().max()), 1e-300) if x.numel() else 1.0
    return x.abs() > CONSTANT_RTOL * scale


def sign_agreement(w: Tensor, o: Tensor) -> float | None:
    """Share of the tokens where the oracle ``o`` is non-zero on which ``w`` has its sign.

    Zero credit is no agreement: every method is scored on the same tokens (those the oracle
    signs), so a method that zeroes most tokens cannot rank high by being scored on its few
    non-zero ones. None only when the oracle is zero on every token (the same for every method).
    """
    signed = _nonzero(o)
    if not bool(signed.any()):
        return None
    agree = _nonzero(w)[signed] & (torch.sign(w[signed]) == torch.sign(o[signed]))
    return float(agree.double().mean())


def coverage(w: Tensor, o: Tensor) -> float | None:
    """Share of the tokens where the oracle is non-zero on which ``w`` is non-zero (None as above)."""
    signed = _nonzero(o)
    if not bool(signed.any()):
        return None
    return float(_nonzero(w)[signed].double().mean())


def spearman_or_zero(w: Tensor, o: Tensor) -> float | None:
    """``spearman``, with a constant ``w`` counted as 0 (no ranking: no correlation) where ``o`` varies.

    Undefined only where the oracle is constant, which is the same set of rollouts for every method,
    so every method's mean is taken over the same rollouts.
    """
    if is_constant(o):
        return None
    return 0.0 if is_constant(w) else spearman(w, o)


@dataclass
class Summary:
    """Mean of per-rollout values with a group-bootstrap 95% interval; ``n`` rollouts had a value."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    n_total: int

    def cell(self, digits: int = 2, undefined: str = "undefined") -> str:
        """The table cell: ``0.43 [0.38, 0.49]``, or ``undefined`` (never NaN) when no rollout had a value."""
        if self.mean is None:
            return undefined
        if self.low is None:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def summarise(values: list[float | None], groups: list[int], n_boot: int = 1000, seed: int = 0) -> Summary:
    """Mean of the defined ``values`` and a percentile bootstrap 95% interval resampling groups.

    ``groups[k]`` is the group of ``values[k]``; an interval needs at least two groups with values.
    """
    pairs = [(v, g) for v, g in zip(values, groups) if v is not None and math.isfinite(v)]
    if not pairs:
        return Summary(None, None, None, 0, len(values))
    vals = np.array([v for v, _ in pairs])
    labels = sorted({g for _, g in pairs})
    if len(labels) < 2:
        return Summary(float(vals.mean()), None, None, len(pairs), len(values))
    index = {g: k for k, g in enumerate(labels)}
    gid = np.array([index[g] for _, g in pairs])
    sums = np.bincount(gid, weights=vals, minlength=len(labels))
    counts = np.bincount(gid, minlength=len(labels)).astype(float)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(labels), size=(n_boot, len(labels)))  # groups drawn with replacement
    means = sums[draws].sum(1) / counts[draws].sum(1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Summary(float(vals.mean()), float(low), float(high), len(pairs), len(values))


def mean_before_after(w: Tensor, cut: int) -> tuple[float, float] | None:
    """(mean of ``w`` [L] before ``cut``, mean from ``cut`` on); None when either side is empty."""
    if cut <= 0 or cut >= w.numel():
        return None
    return float(w[:cut].double().mean()), float(w[cut:].double().mean())
