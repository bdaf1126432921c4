"""Hand-built rollouts for tests: token ids in, a ``Rollout`` laid out as ``sample`` lays it out."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_rlvr.collect.single_turn import generate_rollout
from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import completion_mask_from_ids, left_pad
from lightning_rlvr.engines.base import RolloutEngine, Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine


def rollout_from_ids(
    prompt_ids: list[list[int]],
    completions: list[list[int]],
    *,
    pad: int,
    eos: int,
    group_size: int = 1,
    prompts: list[str] | None = None,
    rewards: list[float] | None = None,
    extra_pad: int = 0,
) -> Rollout:
    """B prompts (left-padded, each repeated ``group_size`` times) and N = B * G completions
    (right-padded with ``extra_pad`` more columns); the mask ends at the first EOS."""
    rows_prompt = [p for p in prompt_ids for _ in range(group_size)]
    p_ids, p_mask = left_pad([torch.tensor(p) for p in rows_prompt], pad)
    T = max(map(len, completions)) + extra_pad
    c_ids = torch.full((len(completions), T), pad)
    for i, c in enumerate(completions):
        c_ids[i, : len(c)] = torch.tensor(c)
    texts = prompts if prompts is not None else [str(p) for p in prompt_ids]
    return Rollout(
        prompt_ids=p_ids,
        prompt_mask=p_mask,
        completion_ids=c_ids,
        completion_mask=completion_mask_from_ids(c_ids, eos) * (c_ids != pad).long(),
        group=torch.arange(len(prompt_ids)).repeat_interleave(group_size),
        problems=[Problem(prompt=t, answer="") for t in texts],
        completions=[""] * len(completions),
        pad_id=pad,
        eos_id=eos,
        rewards=torch.tensor(rewards if rewards is not None else [0.0] * len(completions)),
        correct=torch.tensor(rewards if rewards is not None else [0.0] * len(completions)) > 0.5,
        feedback=[""] * len(completions),
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
    sampling = Sampling(max_new_tokens, temperature, top_p, top_k, do_sample)
    return generate_rollout(
        engine or HFGenerateEngine(), model, tokenizer, problems, group_size, sampling, render
    )
