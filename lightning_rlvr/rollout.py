"""Sampling G completions per prompt, and the ``Rollout`` batch every later stage reads.

Rows are laid out group by group: with B prompts and G samples each, row
``i`` belongs to prompt ``group[i] = i // G``. Prompts are left-padded (so all
completions start at the same column) and completions right-padded; the
completion mask covers tokens up to and including the first EOS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_rlvr.engines.base import RolloutEngine, Sampling
from lightning_rlvr.tasks.base import Problem


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


@dataclass
class Sampler:
    """Everything a task needs to sample from the policy: ``Task.rollout`` receives one.

    The module builds it from its engine, live model, tokenizer, sampling arguments and prompt
    format, and so do the warm start's checks, so every sampler of the project goes through one
    type. ``sampling.max_new_tokens`` is the completion budget (an environment's per-turn budget).
    """

    engine: RolloutEngine
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    sampling: Sampling
    render: Callable[[str], str] | None = None


def completion_mask_from_ids(completion_ids: Tensor, eos_id: int) -> Tensor:
    """[N, T] mask: 1 up to and including the first EOS (all ones when there is none)."""
    is_eos = completion_ids == eos_id  # [N, T]
    after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after_eos).long()


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions that skip left padding, as ``generate`` uses them: [N, L]."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, problems: list[Problem], render: Callable[[str], str] | None = None
) -> tuple[Tensor, Tensor]:
    """The B prompts as the model sees them, left-padded: ids [B, P], mask [B, P].

    ``render`` turns a problem's prompt into the text the model is conditioned on
    (a ``PromptFormat``); the same function is used by every caller that samples
    or trains on prompts, so training and sampling never see different formats.
    """
    texts = [render(p.prompt) if render else p.prompt for p in problems]
    seqs = tokenizer(texts, add_special_tokens=False)["input_ids"]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):  # left padding: generation appends on the right
        if s:
            ids[i, width - len(s) :] = torch.tensor(s)
            mask[i, width - len(s) :] = 1
    return ids, mask


def generate_rollout(
    engine: RolloutEngine,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    group_size: int,
    sampling: Sampling,
    render: Callable[[str], str] | None = None,
) -> Rollout:
    """G completions for each of B prompts from ``engine``, assembled into a ``Rollout``.

    The part every engine shares: prompts are rendered and tokenised here (once per
    problem, then repeated G times), the engine continues the token contexts, and the
    completion mask, decoded texts and group index are built from what it returns.
    """
    device = next(model.parameters()).device
    ids, mask = (t.to(device) for t in encode_prompts(tokenizer, problems, render))  # [B, P]
    out = engine.generate(
        model, ids, mask, group_size, sampling, tokenizer.pad_token_id, tokenizer.eos_token_id
    )
    completion_ids = out.completion_ids  # [N, T], pad after the first EOS
    return Rollout(
        prompt_ids=ids.repeat_interleave(group_size, 0),
        prompt_mask=mask.repeat_interleave(group_size, 0),
        completion_ids=completion_ids,
        completion_mask=completion_mask_from_ids(completion_ids, tokenizer.eos_token_id),
        group=torch.arange(len(problems), device=device).repeat_interleave(group_size),
        problems=list(problems),
        completions=tokenizer.batch_decode(completion_ids, skip_special_tokens=True),
        pad_id=tokenizer.pad_token_id,
        eos_id=tokenizer.eos_token_id,
        engine_logp=out.logp,
    )


def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    group_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    do_sample: bool = True,
    render: Callable[[str], str] | None = None,
    engine: RolloutEngine | None = None,
) -> Rollout:
    """``generate_rollout`` with loose sampling arguments (default engine: ``HFGenerateEngine``)."""
    from lightning_rlvr.engines.hf import HFGenerateEngine

    sampling = Sampling(max_new_tokens, temperature, top_p, top_k, do_sample)
    return generate_rollout(
        engine or HFGenerateEngine(), model, tokenizer, problems, group_size, sampling, render
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
