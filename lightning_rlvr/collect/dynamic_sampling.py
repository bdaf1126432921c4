"""DAPO's dynamic sampling: train only on groups that carry a learning signal.

A group whose G rollouts are all correct or all wrong has zero GRPO advantage
and only dilutes the batch. Dynamic sampling keeps the groups with
``0 < #correct < G`` and draws further prompts, in rounds, until B such
groups are collected. The number of extra rounds is bounded; when the bound
is hit the batch is filled with uninformative groups (they add no gradient)
and a warning says how many were missing, or, with ``on_shortfall="error"``,
training stops with that message. DAPO as a whole (clip-higher, token mean,
overlong penalty): ``docs/methods.md``.

Where extra prompts come from: position ``extra_prompt_position(...)`` of the training
stream, a function of (RL step, rank, round, place in the batch) only, so a
resumed run draws the same ones and no extra state needs checkpointing, and
no two extra draws of a run share a position. The positions start at
``EXTRA_OFFSET`` = 2^40. For a generated task (no finite train split) the main
stream, which reads positions 0, 1, 2, ... one batch per step, never gets
there, so extra prompts are problems the main stream never serves. A finite
split of n problems is cycled (position mod n; ``Task.train_problem``), so
there the extra prompts are ordinary training problems that the main stream
also serves, possibly in the same epoch or even the same step. We keep it so
rather than hold problems out: a held-out part would shrink the split every
method trains on (DAPO must see the same data as the baselines), and drawing
a problem twice is harmless for RL, which samples fresh rollouts each time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from ..core.errors import RLVRError
from ..core.problem import Problem
from ..core.rollout import Rollout, concat_rollouts

log = logging.getLogger(__name__)
EXTRA_OFFSET = 2**40  # first training-stream position of the extra prompts (see the module docstring)


def extra_prompt_position(batch_index: int, round_: int, i: int, batch_size: int, max_rounds: int) -> int:
    """Training-stream position of extra prompt ``i`` (0 <= i < B) of round ``round_`` (1..max_rounds).

    ``batch_index`` = RL step * world size + rank (``data.train_batch_index``). Distinct
    (batch_index, round, i) give distinct positions, all >= ``EXTRA_OFFSET``.
    """
    if not (1 <= round_ <= max_rounds and 0 <= i < batch_size):
        raise ValueError(f"round {round_} / prompt {i} outside 1..{max_rounds} / 0..{batch_size - 1}")
    return EXTRA_OFFSET + (batch_index * max_rounds + round_ - 1) * batch_size + i


def informative_groups(correct: Tensor, group: Tensor) -> Tensor:
    """[num_groups] bool: groups with at least one correct and one incorrect rollout."""
    n_groups = int(group.max()) + 1
    n_correct = torch.zeros(n_groups, device=correct.device).index_add_(0, group, correct.float())
    size = torch.bincount(group, minlength=n_groups).to(correct.device)
    return (n_correct > 0) & (n_correct < size)


class DynamicSampling:
    """Keep informative groups, sampling more prompts until the batch is full.

    Args:
        max_rounds: extra generation rounds allowed per step (each draws B new prompts).
        on_shortfall: ``fill`` the batch with uninformative groups (warns) or raise an ``error``.

    A group is informative when some but not all of its rollouts are correct (``Rollout.correct``,
    the verifier's own verdict, so reward shaping never changes which groups are kept).
    """

    def __init__(self, max_rounds: int = 3, on_shortfall: Literal["fill", "error"] = "fill") -> None:
        self.max_rounds = max_rounds
        self.on_shortfall = on_shortfall

    def collect(
        self,
        problems: list[Problem],
        draw: Callable[[list[Problem]], Rollout],
        more: Callable[[int], list[Problem]],
        sync: Callable[[bool], bool] = lambda flag: flag,
    ) -> tuple[Rollout, dict[str, float]]:
        """``draw`` samples and verifies a list of problems; ``more(round)`` gives B new problems.

        ``sync(flag)`` is True if any rank still needs a round: under FSDP all ranks keep
        sampling together (a full rank's extra groups only serve as filler).
        """
        B = len(problems)
        kept: list[Rollout] = []
        spare: list[Rollout] = []  # uninformative groups, used only to fill a short batch
        n_kept, n_seen, rounds = 0, 0, 0
        batch = problems
        while True:
            rollout = draw(batch)
            good = informative_groups(rollout.correct, rollout.group)  # [B]
            n_seen += len(good)
            take = good.nonzero().flatten()[: B - n_kept]
            if len(take):
                kept.append(rollout.index_select(_rows_of(rollout, take)))
                n_kept += len(take)
            bad = (~good).nonzero().flatten()
            if len(bad):
                spare.append(rollout.index_select(_rows_of(rollout, bad)))
            if not sync(n_kept < B and rounds < self.max_rounds):
                break
            rounds += 1
            batch = more(rounds)
        stats = {"dynamic_rounds": float(rounds), "groups_kept_frac": n_kept / max(n_seen, 1)}
        if n_kept < B:
            msg = (
                f"dynamic sampling found {n_kept} of {B} informative groups in {rounds + 1} rounds "
                f"({n_seen} groups sampled); raise max_rounds or check the task's difficulty"
            )
            if self.on_shortfall == "error":
                raise RLVRError(msg)
            log.warning("%s; filling with uninformative groups", msg)
            filler = concat_rollouts(spare)
            need = B - n_kept
            kept.append(filler.index_select(_rows_of(filler, torch.arange(need, device=filler.group.device))))
        stats["dynamic_shortfall"] = float(B - n_kept)
        return concat_rollouts(kept), stats


def _rows_of(rollout: Rollout, groups: Tensor) -> Tensor:
    """Row indices of ``groups`` (in order), for ``Rollout.index_select``."""
    G = rollout.group_size
    return (groups[:, None] * G + torch.arange(G, device=groups.device)).flatten()
