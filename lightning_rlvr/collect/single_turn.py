"""Single-turn sampling: G completions per prompt from one engine call, assembled into a ``Rollout``.

Layer: ``collect`` (``collect.roll_out`` calls it and verifies the result). The batch layout (rows group
by group, prompts left-padded, completions right-padded) is ``core.rollout``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core.problem import Problem
from ..core.rng import key_seed
from ..core.rollout import Rollout
from ..core.tensors import completion_mask_from_ids, left_pad
from ..engines.base import RolloutEngine, Sampling


@dataclass
class Sampler:
    """Everything collection needs to sample from the policy: ``collect.roll_out`` receives one.

    The module builds it from its engine, live model, tokenizer, sampling arguments and prompt
    format, and so do the warm start's checks, so every sampler of the project goes through one
    type. ``sampling.max_new_tokens`` is the completion budget (an environment's per-turn budget).
    ``key`` (e.g. the run's seed and the step) asks for keyed sampling: each row draws from its
    own stream, seeded by ``row_keys``; None draws from the global RNG stream.
    """

    engine: RolloutEngine
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    sampling: Sampling
    render: Callable[[str], str] | None = None
    key: tuple | None = None


def row_keys(key: tuple, problems: list[Problem], group_size: int) -> list[int]:
    """One seed a row: ``key``, the problem's identity (its prompt and answer, never its place in the
    batch) and the sample's index in its group, so a row draws the same whatever rows surround it."""
    return [key_seed(*key, p.prompt, p.answer, j) for p in problems for j in range(group_size)]


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
    ids, mask = left_pad([torch.tensor(s, dtype=torch.long) for s in seqs], tokenizer.pad_token_id)
    return ids, mask


def generate_rollout(
    engine: RolloutEngine,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    group_size: int,
    sampling: Sampling,
    render: Callable[[str], str] | None = None,
    key: tuple | None = None,
) -> Rollout:
    """G completions for each of B prompts from ``engine``, assembled into a ``Rollout``.

    The part every engine shares: prompts are rendered and tokenised here (once per
    problem, then repeated G times), the engine continues the token contexts, and the
    completion mask, decoded texts and group index are built from what it returns. With ``key``
    the rows are sampled keyed (``row_keys``), else from the global stream.
    """
    device = next(model.parameters()).device
    ids, mask = (t.to(device) for t in encode_prompts(tokenizer, problems, render))  # [B, P]
    keyed = {} if key is None else {"keys": row_keys(key, problems, group_size)}
    out = engine.generate(
        model, ids, mask, group_size, sampling, tokenizer.pad_token_id, tokenizer.eos_token_id, **keyed
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
