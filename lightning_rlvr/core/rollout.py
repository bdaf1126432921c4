"""The ``Rollout`` batch every stage after sampling reads, and helpers over it.

Rows are laid out group by group: with B prompts and G samples each, row ``i`` belongs to prompt
``group[i] = i // G``. Prompts are left-padded (so all completions start at the same column) and
completions right-padded; the completion mask covers tokens up to and including the first EOS.

Layer: ``core``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .problem import Problem


@dataclass
class Rollout:
    """A scored batch of N = B * G completions. Shapes in comments."""

    prompt_ids: Tensor  # [N, P] left-padded
    prompt_mask: Tensor  # [N, P] 1 on real prompt tokens
    completion_ids: Tensor  # [N, T] right-padded with pad_id
    completion_mask: Tensor  # [N, T] 1 up to and including EOS
    group: Tensor  # [N] index of the row's prompt in the batch
    problems: list[Problem]  # [B]
    completions: list[str]  # [N] decoded, special tokens removed
    pad_id: int
    eos_id: int
    rewards: Tensor | None = None  # [N] filled by the verifier (then reward shaping)
    correct: Tensor | None = None  # [N] bool, the verifier's ``Verdict.correct`` (shaping never changes it)
    feedback: list[str] = field(default_factory=list)  # [N] verifier messages
    engine_logp: Tensor | None = None  # [N, T] the sampling engine's own log-probs, when it reports them
    # Multi-turn episodes (lightning_rlvr.envs): ``completion_ids`` then holds the whole interaction after
    # the prompt, the policy's actions and the environment's observations, and ``completion_mask`` is 1 on
    # every real token of both (attention must see the observations). Loss and credit read ``policy_mask``:
    # they apply only where it is 1; observation tokens get no loss, no credit and zero advantage.
    policy_mask: Tensor | None = (
        None  # [N, T] 1 on tokens the policy generated (None: every completion token)
    )
    turn_index: Tensor | None = None  # [N, T] the turn each completion token belongs to (-1 on padding)
    invalid_actions: Tensor | None = None  # [N] actions the environment could not carry out (episodes only)

    @property
    def num_rows(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def group_size(self) -> int:
        return self.num_rows // len(self.problems)

    @property
    def lengths(self) -> Tensor:  # [N]
        return self.completion_mask.sum(-1)

    @property
    def action_lengths(self) -> Tensor:  # [N]
        """The length the completion budget (``max_new_tokens``) bounds, per row.

        Single-turn: the completion's length. An episode: its longest action, since the budget is
        per action (each action is cut at it) and the observations and the number of turns are not
        the policy's doing. Length-aware reward shaping (DAPO's overlong penalty) reads this, so
        an episode is penalised for an action that ran into the budget, never for being long.
        """
        mask = self.loss_mask.long()  # [N, T]
        if self.turn_index is None:
            return mask.sum(-1)
        turns = self.turn_index.clamp(min=0)  # [N, T] padding (-1) counts nowhere: its mask is 0
        per_turn = torch.zeros(mask.shape[0], int(turns.max()) + 1, dtype=torch.long, device=mask.device)
        return per_turn.scatter_add_(1, turns, mask).max(-1).values  # [N]

    def truncated(self, max_new_tokens: int) -> Tensor:  # [N] bool
        """Rows the budget cut: a completion of ``max_new_tokens`` tokens without EOS (an episode: an
        action that reached the budget), so a user can tell the budget, not the model, from failing."""
        if self.turn_index is not None:
            return self.action_lengths >= max_new_tokens
        ended = ((self.completion_ids == self.eos_id) & self.completion_mask.bool()).any(-1)
        return (self.lengths >= max_new_tokens) & ~ended

    @property
    def loss_mask(self) -> Tensor:  # [N, T]
        """1 where loss and credit apply: the policy's own tokens (all completion tokens if single-turn)."""
        return self.completion_mask if self.policy_mask is None else self.policy_mask * self.completion_mask

    @property
    def input_ids(self) -> Tensor:  # [N, P + T]
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> Tensor:  # [N, P + T]
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def completion_tokens(self, row: int) -> Tensor:
        """The unpadded completion of ``row`` (EOS included when sampled)."""
        return self.completion_ids[row, : int(self.completion_mask[row].sum())]

    def prompt_tokens(self, row: int) -> Tensor:
        """The unpadded prompt of ``row``."""
        return self.prompt_ids[row][self.prompt_mask[row].bool()]

    def index_select(self, rows: Tensor) -> Rollout:
        """A sub-rollout of whole groups (``rows`` must list each kept group's rows in order)."""
        groups = self.group[rows].unique_consecutive()
        remap = torch.full((len(self.problems),), -1, dtype=torch.long)
        remap[groups] = torch.arange(len(groups))
        return Rollout(
            prompt_ids=self.prompt_ids[rows],
            prompt_mask=self.prompt_mask[rows],
            completion_ids=self.completion_ids[rows],
            completion_mask=self.completion_mask[rows],
            group=remap[self.group[rows]],
            problems=[self.problems[g] for g in groups.tolist()],
            completions=[self.completions[i] for i in rows.tolist()],
            pad_id=self.pad_id,
            eos_id=self.eos_id,
            rewards=None if self.rewards is None else self.rewards[rows],
            correct=None if self.correct is None else self.correct[rows],
            feedback=[self.feedback[i] for i in rows.tolist()] if self.feedback else [],
            engine_logp=None if self.engine_logp is None else self.engine_logp[rows],
            policy_mask=None if self.policy_mask is None else self.policy_mask[rows],
            turn_index=None if self.turn_index is None else self.turn_index[rows],
            invalid_actions=None if self.invalid_actions is None else self.invalid_actions[rows],
        )


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """One rollout from several (e.g. sampling rounds): prompts re-padded left, completions right."""
    if len(rollouts) == 1:
        return rollouts[0]
    first = rollouts[0]
    P = max(r.prompt_ids.shape[1] for r in rollouts)
    T = max(r.completion_ids.shape[1] for r in rollouts)

    def pad(t: Tensor, width: int, value: int, left: bool) -> Tensor:
        extra = width - t.shape[1]
        return torch.nn.functional.pad(t, (extra, 0) if left else (0, extra), value=value)

    groups, total = [], 0
    for r in rollouts:
        groups.append(r.group + total)
        total += len(r.problems)
    return Rollout(
        prompt_ids=torch.cat([pad(r.prompt_ids, P, first.pad_id, True) for r in rollouts]),
        prompt_mask=torch.cat([pad(r.prompt_mask, P, 0, True) for r in rollouts]),
        completion_ids=torch.cat([pad(r.completion_ids, T, first.pad_id, False) for r in rollouts]),
        completion_mask=torch.cat([pad(r.completion_mask, T, 0, False) for r in rollouts]),
        group=torch.cat(groups),
        problems=[p for r in rollouts for p in r.problems],
        completions=[c for r in rollouts for c in r.completions],
        pad_id=first.pad_id,
        eos_id=first.eos_id,
        rewards=None if first.rewards is None else torch.cat([r.rewards for r in rollouts]),
        correct=None if first.correct is None else torch.cat([r.correct for r in rollouts]),
        feedback=[f for r in rollouts for f in r.feedback],
        engine_logp=None
        if first.engine_logp is None
        else torch.cat([pad(r.engine_logp, T, 0, False) for r in rollouts]),
        policy_mask=_cat_optional(
            [r.policy_mask for r in rollouts], [r.completion_mask for r in rollouts], T, 0
        ),
        turn_index=_cat_optional(
            [r.turn_index for r in rollouts], [r.completion_mask.long() - 1 for r in rollouts], T, -1
        ),
        invalid_actions=None
        if any(r.invalid_actions is None for r in rollouts)
        else torch.cat([r.invalid_actions for r in rollouts]),
    )


def _cat_optional(parts: list[Tensor | None], defaults: list[Tensor], width: int, fill: int) -> Tensor | None:
    """Concatenate ``[n, t]`` tensors right-padded to ``width`` with ``fill``; None if no rollout has one.

    A rollout without the field (a single-turn one next to a multi-turn one) is the one-turn case and
    contributes ``defaults[i]``: for ``policy_mask`` its completion mask (every token is the policy's),
    for ``turn_index`` turn 0 on real tokens and -1 on padding.
    """
    if all(p is None for p in parts):
        return None
    out = [d if p is None else p for p, d in zip(parts, defaults)]
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=fill) for p in out])


def turn_starts(policy_mask: Sequence[int]) -> list[int]:
    """Where each action after the first starts: positions t > 0 with policy_mask[t] = 1 after a 0."""
    m = list(policy_mask)
    return [t for t in range(1, len(m)) if m[t] and not m[t - 1]]


def policy_tokens(rollout: Rollout, row: int) -> Tensor:
    """The tokens ``row``'s policy generated, in order (observations removed)."""
    mask = rollout.policy_mask if rollout.policy_mask is not None else rollout.completion_mask
    return rollout.completion_ids[row][mask[row].bool()]
