"""Group advantages and the pieces of the policy loss that are not a choice of surrogate.

GRPO's group-normalised advantages, Schulman's k3 KL estimator, and the three
ways to turn [N, T] token losses into a scalar (``losses.PolicyLoss`` picks one):

* ``seq_mean``   -- mean over sequences of each sequence's token mean (GRPO);
* ``token_mean`` -- sum over all tokens / number of tokens in the batch (DAPO);
* ``constant``   -- sum over all tokens / (number of sequences * L_max) (Dr. GRPO).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def group_mean_std(values: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row mean and (unbiased) std of ``values`` over the row's group: ([N], [N]).

    THE place a group statistic is computed (every standardisation goes through it). Both come from
    the differences to the group's minimum, so a group whose values are all equal has a mean exactly
    equal to its value and a std of exactly 0 in any dtype; the plain float32 mean of seven 0.7s is
    off by an ulp, which left a ~6e-8 std that callers then divided by. Computed in ``values``'
    dtype promoted to at least float32 (bf16 / fp16 values are not summed in 8 bits of mantissa).
    """
    dtype = torch.promote_types(values.dtype, torch.float32)
    v = values.to(dtype)
    n_groups = int(group.max()) + 1
    lo = torch.full((n_groups,), float("inf"), dtype=dtype, device=v.device)
    lo = lo.scatter_reduce(0, group, v, "amin")[group]  # [N]
    d = v - lo  # exactly 0 throughout an all-equal group
    count = torch.zeros(n_groups, dtype=dtype, device=v.device).index_add_(0, group, torch.ones_like(d))
    mean_d = torch.zeros(n_groups, dtype=dtype, device=v.device).index_add_(0, group, d) / count
    dev2 = (d - mean_d[group]) ** 2
    var = torch.zeros(n_groups, dtype=dtype, device=v.device).index_add_(0, group, dev2)
    var = var / (count - 1).clamp(min=1)
    return lo + mean_d[group], var.sqrt()[group]


def group_standardize(values: Tensor, group: Tensor, scale: bool = True, eps: float = 1e-6) -> Tensor:
    """(v - group mean) / (group std + eps), or v - group mean with ``scale=False``: [N].

    Exactly 0 for a group whose values are all equal (``group_mean_std``), never NaN (also with eps 0).
    """
    mean, std = group_mean_std(values, group)
    out = values.to(mean.dtype) - mean
    if not scale:
        return out
    return out / torch.where(std > 0, std + eps, torch.ones_like(std))  # 0 / 1 where std is exactly 0


def group_advantages(rewards: Tensor, group: Tensor, scale: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO's A_i = (r_i - mean(r)) / (std(r) + eps), or r_i - mean(r) with ``scale=False``: [N] float32.

    A group whose rewards are all equal gets exactly 0 (``group_standardize``), also for partial-credit
    rewards (seven 0.7s) whose float32 mean is not exactly 0.7.
    """
    return group_standardize(rewards.float(), group, scale, eps)


def zero_std_groups(rewards: Tensor, group: Tensor) -> Tensor:
    """[num_groups] bool: groups whose rewards are all exactly equal (they carry no GRPO signal)."""
    n_groups = int(group.max()) + 1
    r = rewards.float()
    lo = torch.full((n_groups,), float("inf"), device=r.device).scatter_reduce(0, group, r, "amin")
    hi = torch.full((n_groups,), float("-inf"), device=r.device).scatter_reduce(0, group, r, "amax")
    return lo == hi


def standardize(values: Tensor, eps: float = 1e-6) -> Tensor:
    """(v - mean v) / (std v + eps) over a 1-D tensor (one group): exactly 0 when all values are equal."""
    if values.numel() < 2:
        return torch.zeros_like(values)
    group = torch.zeros(values.numel(), dtype=torch.long, device=values.device)
    return group_standardize(values, group, True, eps).to(values.dtype)


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token, >= 0: exp(d) - d - 1 with d = ref - logp."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


Total = Callable[[Tensor], Tensor]  # sums a count over all ranks (identity on one rank)


def _local(count: Tensor) -> Tensor:
    return count


def _seq_mean(mask: Tensor, max_len: int, total: Total) -> Tensor:
    n_seqs = total(torch.tensor(float(mask.shape[0]), device=mask.device))
    return mask / (mask.sum(-1, keepdim=True).clamp(min=1) * n_seqs)


def _token_mean(mask: Tensor, max_len: int, total: Total) -> Tensor:
    return mask / total(mask.sum()).clamp(min=1)


def _constant(mask: Tensor, max_len: int, total: Total) -> Tensor:
    n_seqs = total(torch.tensor(float(mask.shape[0]), device=mask.device))
    return mask / (n_seqs * max_len)


AGGREGATIONS: dict[str, Callable[[Tensor, int, Total], Tensor]] = {
    "seq_mean": _seq_mean,
    "token_mean": _token_mean,
    "constant": _constant,
}


def loss_weights(mask: Tensor, mode: str, max_len: int, total: Total = _local) -> Tensor:
    """Per-token weights [m, T] such that ``(tok_loss * weights).sum()`` is the aggregated loss.

    Written as weights so a minibatch can be split into micro-batches, or over
    ranks, and the pieces summed: the normaliser (sequences or tokens) is that of
    the whole minibatch, summed over ranks by ``total``.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"loss_agg must be one of {sorted(AGGREGATIONS)}, got {mode!r}")
    return AGGREGATIONS[mode](mask.float(), max_len, total)
