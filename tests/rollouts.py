"""Hand-built rollouts for tests: token ids in, a ``Rollout`` laid out as ``sample`` lays it out."""

from __future__ import annotations

import torch

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import completion_mask_from_ids, left_pad


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
