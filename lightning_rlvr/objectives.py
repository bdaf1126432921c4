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
    """Per-row mean and (unbiased) std of ``values`` over the row's group: ([N], [N])."""
    n_groups = int(group.max()) + 1
    count = torch.zeros(n_groups, device=values.device).index_add_(0, group, torch.ones_like(values))
    mean = torch.zeros(n_groups, device=values.device).index_add_(0, group, values) / count
    dev2 = (values - mean[group]) ** 2
    var = torch.zeros(n_groups, device=values.device).index_add_(0, group, dev2) / (count - 1).clamp(min=1)
    return mean[group], var.sqrt()[group]


def group_advantages(rewards: Tensor, group: Tensor, scale: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO's A_i = (r_i - mean(r)) / (std(r) + eps), or r_i - mean(r) with ``scale=False``: [N].

    A group whose rewards are all equal gets exactly 0 (never NaN). "All equal" is
    decided by exact equality (min == max), not by ``std > 0``: the float32 mean of
    equal non-binary rewards (e.g. seven 0.7s) is off by an ulp, which leaves a
    ~1e-8 std that, divided by ``std + eps``, would give every row an advantage of
    ~0.06 (partial-credit rewards and overlong shaping produce such groups).
    """
    r = rewards.float()
    mean, std = group_mean_std(r, group)
    adv = r - mean
    if scale:
        adv = adv / (std + eps)
    equal = zero_std_groups(r, group)[group]  # [N]
    return torch.where(equal, torch.zeros_like(adv), adv)


def zero_std_groups(rewards: Tensor, group: Tensor) -> Tensor:
    """[num_groups] bool: groups whose rewards are all exactly equal (they carry no GRPO signal)."""
    n_groups = int(group.max()) + 1
    r = rewards.float()
    lo = torch.full((n_groups,), float("inf"), device=r.device).scatter_reduce(0, group, r, "amin")
    hi = torch.full((n_groups,), float("-inf"), device=r.device).scatter_reduce(0, group, r, "amax")
    return lo == hi


def standardize(values: Tensor, eps: float = 1e-6) -> Tensor:
    """(v - mean v) / (std v + eps) over a 1-D tensor; exactly 0 when all values are exactly equal."""
    if values.numel() < 2 or bool(values.min() == values.max()):
        return torch.zeros_like(values)
    return (values - values.mean()) / (values.std() + eps)


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
