"""Multi-rank helpers: FSDP2 sharding of a policy and the few collectives RLVR needs.

Every rank samples its own prompts (all G rollouts of a prompt stay on one
rank), so ranks only meet in the model's forward/backward (FSDP all-gathers
and reduce-scatters) and in a handful of reductions: loss normalisers,
"does any rank still need another sampling round", "was the loss non-finite
on any rank" (so all ranks skip the same update), loop lengths that must
match because every forward under FSDP is a collective, and the gathering of
per-rank state into the checkpoint. On one process all of these are identities.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def gather_objects(obj: object) -> list:
    """Every rank's picklable ``obj`` in rank order (``[obj]`` on one rank).

    For per-rank state that must reach rank 0's checkpoint, such as a credit
    assigner's per-prompt baselines or its peer-sampling generator.
    """
    if world_size() == 1:
        return [obj]
    out: list = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_sum(value: Tensor) -> Tensor:
    """Sum of ``value`` over ranks (a new tensor; identity on one rank)."""
    if world_size() == 1:
        return value
    out = value.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def max_over_ranks(n: int, device: torch.device | str = "cpu") -> int:
    """The largest ``n`` over ranks (for loops whose every iteration is a collective forward)."""
    if world_size() == 1:
        return n
    t = torch.tensor(n, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t)


def any_rank(flag: bool, device: torch.device | str = "cpu") -> bool:
    """True if ``flag`` holds on any rank."""
    return max_over_ranks(int(flag), device) > 0


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def shard_policy(model: torch.nn.Module, mesh, reshard_after_forward: bool = True) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each transformer block, then the whole model. Idempotent.

    Blocks are the modules whose class the model lists in ``_no_split_modules``
    (every Hugging Face causal LM declares its decoder layer there).
    """
    from torch.distributed.fsdp import fully_shard

    if is_sharded(model):
        return model
    block_names = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def gather_values(values: Tensor) -> Tensor:
    """Every rank's 1-D ``values`` concatenated in rank order (lengths may differ; identity on one rank).

    For statistics that a method defines over the whole batch, such as SC-GRPO's percentile
    of D over all active tokens, when the batch is split over ranks.
    """
    if world_size() == 1:
        return values
    n = torch.tensor([values.numel()], device=values.device)
    sizes = [torch.zeros_like(n) for _ in range(world_size())]
    dist.all_gather(sizes, n)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=values.dtype, device=values.device)
    padded[: values.numel()] = values
    parts = [torch.zeros_like(padded) for _ in range(world_size())]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s.item())] for p, s in zip(parts, sizes)])
