"""Monte-Carlo credit (VinePPO-style): segment advantages from sampled values of prefixes.

The value of a prefix is estimated by what the policy itself makes of it: from
``[prompt; o_{<b}]`` sample M continuations with the rollout-time policy,
verify each finished completion with the task, and average the rewards:

    V(b)   = mean_m r(o_{<b} + continuation_m)           (0 < b < L)
    V(0)   = mean over M continuations from the prompt   (one estimate per group)
    V(L)   = the rollout's own reward r_i
    A_{i,t} = V(b_{k+1}) - V(b_k)   for t in segment k = [b_k, b_{k+1})

Over a rollout the segment advantages telescope to r_i - V(0), the group
baseline GRPO uses, so MC credit is GRPO's advantage split over segments by
how much each one moved the chance of success. With ``scale_by_std`` every
advantage of a group is divided by the std of the group's rewards (+1e-6), as
GRPO scales (``False``: raw value differences, as VinePPO uses them). A group
whose rewards are all equal is not skipped: its segments keep their raw V
differences (its std is exactly 0: ``objectives.group_mean_std``), the only signal such a group carries.

Episodes (multi-turn rollouts, ``rollout.turn_index`` set) are cut where each action starts, and a
continuation replays the prefix's actions in the environment before playing on. Otherwise boundaries
are a constructor choice: ``segment="tokens"`` cuts every ``every``
tokens; ``segment="steps"`` cuts after each token whose text contains one of
``delimiters`` (a newline, or ";" in the addition task's carry chain). At most
``max_segments`` segments per rollout (evenly thinned interior cuts otherwise)
bound the cost: each interior cut costs M continuations. Prefixes that are
token-identical within a group (rollouts that agree on their first steps) are
estimated once and shared.

The extra generation is this method's cost; ``credit/generated_tokens`` and
``credit/continuations`` log it. Sampling goes through
``continue_and_verify`` (the scorer's continuation sampler), which under FSDP makes every rank join the same
number of ``generate`` calls.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ..core.errors import RLVRError
from ..core.objectives import group_mean_std
from ..core.rollout import Rollout, turn_starts
from ..scoring.mode import scoring_mode
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner


class MonteCarloCredit(CreditAssigner):
    """Segment advantages from Monte-Carlo values of completion prefixes (see the module docstring).

    Args:
        num_samples: M, continuations per cut [proposed: 4].
        segment: ``steps`` (cut after delimiter tokens) or ``tokens`` (every ``every`` tokens).
        every: segment length for ``segment="tokens"`` [proposed: 8].
        delimiters: texts that end a step for ``segment="steps"`` [proposed: newline and ";"].
        max_segments: most segments per rollout (cost bound).
        scale_by_std: divide by the group's reward std (GRPO-normalised) or not (raw V differences).
    """

    def __init__(
        self,
        num_samples: int = 4,
        segment: Literal["steps", "tokens"] = "steps",
        every: int = 8,
        delimiters: list[str] | None = None,
        max_segments: int = 16,
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(scale_by_std=scale_by_std)
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if segment not in ("steps", "tokens"):
            raise ValueError(f"segment must be 'steps' or 'tokens', got {segment!r}")
        if every < 1 or max_segments < 1:
            raise ValueError("every and max_segments must be >= 1")
        self.num_samples = num_samples
        self.segment = segment
        self.every = every
        self.delimiters = list(delimiters) if delimiters is not None else ["\n", ";"]
        self.max_segments = max_segments

    # ------------------------------------------------------------------ boundaries
    def cuts(self, tokens: list[int], scorer: Scorer | None = None) -> list[int]:
        """Interior cut positions 0 < b < L of one completion (segment k is [b_k, b_{k+1}))."""
        L = len(tokens)
        if self.segment == "tokens":
            cuts = list(range(self.every, L, self.every))
        else:
            if scorer is None or scorer.tokenizer is None:
                raise RLVRError("MonteCarloCredit(segment='steps') needs the tokenizer to find step ends")
            cuts = [
                t + 1
                for t in range(L - 1)
                if any(d in scorer.tokenizer.decode([tokens[t]]) for d in self.delimiters)
            ]
        if len(cuts) > self.max_segments - 1:  # keep max_segments - 1 cuts, evenly spread
            keep = torch.linspace(0, len(cuts) - 1, self.max_segments - 1).round().long().tolist()
            cuts = [cuts[k] for k in sorted(set(keep))]
        return cuts

    def turn_cuts(self, rollout: Rollout, row: int) -> list[int]:
        """Cuts of an episode: where each action after the first starts (thinned to ``max_segments``).

        A continuation replays the prefix's actions in the environment, so values are taken where
        the policy is about to act; each segment is one turn: its action and the observation answering it.
        """
        cuts = turn_starts(rollout.loss_mask[row, : int(rollout.lengths[row])].tolist())
        if len(cuts) > self.max_segments - 1:
            keep = torch.linspace(0, len(cuts) - 1, self.max_segments - 1).round().long().tolist()
            cuts = [cuts[k] for k in sorted(set(keep))]
        return cuts

    # ------------------------------------------------------------------ values
    def values(self, rollout: Rollout, scorer: Scorer) -> tuple[list[list[float]], list[list[int]], int]:
        """Per row: V at its boundaries [V(0), V(b_1), ..., V(L)] and the boundaries [0, b_1, ..., L].

        Also returns the number of distinct prefixes sampled (cuts + group roots).
        """
        N = rollout.num_rows
        lengths = rollout.lengths.tolist()
        rewards = rollout.rewards.float().tolist()
        keys: dict[tuple, int] = {}  # (group, prefix ids) -> index into the query list
        q_rows: list[int] = []
        q_cuts: list[int] = []
        row_bounds: list[list[int]] = []
        row_keys: list[list[tuple]] = []
        for i in range(N):
            g = int(rollout.group[i])
            tokens = rollout.completion_ids[i, : lengths[i]].tolist()
            cuts = self.cuts(tokens, scorer) if rollout.turn_index is None else self.turn_cuts(rollout, i)
            bounds = [0, *cuts, lengths[i]] if lengths[i] else [0]
            ks = [(g, tuple(tokens[:b])) for b in bounds[:-1]] if lengths[i] else [(g, ())]
            for key, b in zip(ks, bounds):
                if key not in keys:
                    keys[key] = len(q_rows)
                    q_rows.append(i)
                    q_cuts.append(b)
            row_bounds.append(bounds)
            row_keys.append(ks)
        est = continue_and_verify(scorer, q_rows, q_cuts, self.num_samples).float().mean(-1).tolist()
        vals = []
        for i in range(N):
            v = [est[keys[k]] for k in row_keys[i]]
            if lengths[i]:
                v.append(rewards[i])  # V(L) = the rollout's own reward
            vals.append(v)
        return vals, row_bounds, len(q_rows)

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        N, T = rollout.completion_ids.shape
        device = rollout.completion_ids.device
        generated_before = scorer.generated_tokens
        vals, bounds, n_prefixes = self.values(rollout, scorer)
        adv = torch.zeros(N, T, device=device)  # [N, T]
        for i in range(N):
            for k in range(len(bounds[i]) - 1):
                adv[i, bounds[i][k] : bounds[i][k + 1]] = vals[i][k + 1] - vals[i][k]
        if self.scale_by_std:
            _, std = group_mean_std(rollout.rewards.float(), rollout.group)  # [N]
            std = torch.where(std > 0, std + 1e-6, torch.ones_like(std))  # all-equal: std exactly 0, raw
            adv = adv / std[:, None].to(device)
        adv = adv * rollout.completion_mask
        roots = [v[0] for v in vals]
        return Credit(
            advantages=adv,
            metrics={
                "generated_tokens": float(scorer.generated_tokens - generated_before),
                "continuations": float(n_prefixes * self.num_samples),
                "segments_per_row": sum(len(b) - 1 for b in bounds) / max(N, 1),
                "value_root_mean": sum(roots) / max(len(roots), 1),
            },
        )


def continue_and_verify(scorer: Scorer, rows: list[int], cuts: list[int], n: int) -> Tensor:
    """Rewards [K, n] of ``n`` verified continuations of each ``completion[rows[k], :cuts[k]]``.

    The context is the row's own prompt and the first ``cuts[k]`` completion tokens; the continuation
    is sampled by the scorer's continuation sampler (its policy, no gradient, eval mode) and the whole
    completion (prefix + continuation) goes to the task's verifier. Its tokens count in the scorer's
    ``forward_tokens`` and ``generated_tokens``.
    """
    if scorer.sampler is None:
        raise RLVRError(
            "this credit method samples continuations, but the Scorer was built without a sampler; "
            "build it with sampler=EngineSampler.of(module) (lightning_rlvr.collect.continuations)"
        )
    r = scorer.rollout
    prompts = [r.prompt_tokens(i) for i in rows]
    prefixes = [r.completion_ids[i, :c] for i, c in zip(rows, cuts)]
    problems = [r.problems[int(r.group[i])] for i in rows]
    with scoring_mode(scorer.model):
        if r.policy_mask is not None:  # episodes: the sampler replays the prefix's actions in the game
            masks = [r.loss_mask[i, :c] for i, c in zip(rows, cuts)]
            out = scorer.sampler(prompts, prefixes, problems, n, policy_masks=masks)
        else:
            out = scorer.sampler(prompts, prefixes, problems, n)
    scorer.forward_tokens += out.forward_tokens
    scorer.generated_tokens += out.generated_tokens
    return out.rewards
