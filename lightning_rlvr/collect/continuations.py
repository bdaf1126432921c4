"""Continuations of partial completions, sampled from the rollout-time policy and verified.

Monte-Carlo value estimates (VinePPO-style credit, ``credit/mc.py``) need what
no other method needs: to *sample* from the policy again, starting from a cut
of a completion, and to *verify* the finished texts with the task. This file is
the one place that does it. A ``ContinuationSampler`` is any callable

    sampler(prompts, prefixes, problems, n) -> Continued

that, for each of K (prompt ids, completion-prefix ids, problem) triples,
samples ``n`` continuations and returns their verified rewards [K, n]. The
module builds one per step (``EngineSampler.of(module)``) and hands it to the
``Scorer``, which carries it to the credit method without calling it (``credit/mc.py`` does).
Continuations are sampled by the module's rollout engine, like the rollouts themselves.

Choices: a continuation gets the rollout's own budget minus the prefix
(``max_new_tokens - len(prefix)``), so a finished text is never longer than a
rollout could be; it is decoded *together with* its prefix, skipping special
tokens, exactly as ``sample`` decodes a completion, and scored by the task's
``check_batch`` (a raising verifier gives reward 0, as in training). Sampling
uses the module's temperature / top-p / top-k and the global torch RNG.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from ..core.distributed import max_over_ranks
from ..core.problem import Problem
from ..core.tensors import left_pad
from ..engines.base import RolloutEngine, Sampling
from ..scoring.continuation_sampler import Continued
from ..tasks.base import Task
from .verify import check_texts


class EngineSampler:
    """Continuations sampled by a ``RolloutEngine``, verified by the task.

    Args:
        engine: the rollout engine (the module's).
        model: the rollout-time policy (its weights must not change while the sampler is used).
        tokenizer: its tokenizer (pad / EOS ids, decoding).
        task: the verifier.
        sampling: the rollouts' sampling settings (the module's); a continuation of a k-token prefix
            gets ``sampling.max_new_tokens - k`` new tokens.
        micro_batch_size: sequences per engine call. Under several ranks every rank makes the
            same number of calls (a rank with fewer prefixes runs one-token dummies), as FSDP needs.
        render: the prompt format the rollouts were rendered with (the module's); a ``Scorer`` built
            with this sampler hands it to the methods that render privileged contexts.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        model,
        tokenizer,
        task: Task,
        sampling: Sampling,
        micro_batch_size: int = 128,
        render: Callable[[str], str] | None = None,
    ) -> None:
        self.engine = engine
        self.render = render
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.sampling = sampling
        self.max_new_tokens = sampling.max_new_tokens
        self.micro_batch_size = max(1, micro_batch_size)

    @classmethod
    def of(cls, module) -> EngineSampler:
        """The sampler of an ``RLVRModule`` at this step: its engine, policy, task, budget and sampling."""
        return cls(
            module.engine,
            module.model,
            module.tokenizer,
            module.task,
            module.sampling,
            micro_batch_size=module.micro_batch_size,
            render=module.render,
        )

    def _generate(self, ids: Tensor, mask: Tensor, budget: int) -> Tensor:
        sampling = replace(self.sampling, max_new_tokens=max(budget, 1))
        tok = self.tokenizer
        out = self.engine.generate(self.model, ids, mask, 1, sampling, tok.pad_token_id, tok.eos_token_id)
        return out.completion_ids  # [m, <= budget]

    @torch.no_grad()
    def __call__(
        self,
        prompts: list[Tensor],
        prefixes: list[Tensor],
        problems: list[Problem],
        n: int,
        policy_masks: list[Tensor] | None = None,
    ) -> Continued:
        """``policy_masks`` (episodes only): which prefix tokens are the policy's; see ``_episodes``."""
        if policy_masks is not None:
            return self._episodes(prefixes, problems, n, policy_masks)
        K = len(prompts)
        items = [(k, j) for k in range(K) for j in range(n)]  # one sequence each
        chunks = [items[i : i + self.micro_batch_size] for i in range(0, len(items), self.micro_batch_size)]
        device = prompts[0].device if prompts else next(self.model.parameters()).device
        missing = max_over_ranks(len(chunks), device) - len(chunks)
        texts: list[str] = [""] * len(items)
        generated = forward = 0
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        for c, chunk in enumerate(chunks):
            seqs = [torch.cat([prompts[k], prefixes[k]]) for k, _ in chunk]
            ids, mask = left_pad(seqs, pad)
            budgets = [self.max_new_tokens - len(prefixes[k]) for k, _ in chunk]
            new = self._generate(ids, mask, max(budgets))
            forward += int(mask.sum())
            for m, ((k, _), budget) in enumerate(zip(chunk, budgets)):
                cont = new[m, : max(budget, 0)]
                ends = (cont == eos).nonzero()
                if len(ends):
                    cont = cont[: int(ends[0]) + 1]  # up to and including the first EOS
                generated += len(cont)
                full = torch.cat([prefixes[k], cont])
                texts[c * self.micro_batch_size + m] = self.tokenizer.decode(full, skip_special_tokens=True)
        forward += generated
        for _ in range(missing):  # FSDP: join the other ranks' generate calls
            one = torch.full((1, 1), eos, dtype=torch.long, device=device)
            self._generate(one, torch.ones_like(one), 1)
        checked = check_texts(self.task, texts, [problems[k] for k, _ in items], device)
        return Continued(checked.rewards.view(K, n), checked.correct.view(K, n), generated, forward)

    def _episodes(
        self, prefixes: list[Tensor], problems: list[Problem], n: int, policy_masks: list[Tensor]
    ) -> Continued:
        """Continuations of episode prefixes: ``n`` episodes each that replay the prefix's actions in the
        environment (``envs.episodes.continue_episodes``) and play on, scored by the game's verdicts.

        One episode batch per prefix (the engine is called once per turn of each); ``max_new_tokens``
        is the budget of each new action, as in the rollouts.
        """
        from .episodes import continue_episodes, engine_generate

        generate = engine_generate(self.engine, self.model, self.tokenizer, self.sampling)
        positions = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        device = next(self.model.parameters()).device
        rewards, correct, generated, forward = [], [], 0, 0
        for prefix, problem, mask in zip(prefixes, problems, policy_masks):
            r = continue_episodes(
                self.task,
                problem,
                prefix.tolist(),
                mask.tolist(),
                n,
                generate,
                self.tokenizer,
                max_new_tokens_per_turn=self.max_new_tokens,
                max_context_tokens=positions,
            )
            rewards.append(r.rewards)
            correct.append(r.correct)
            generated += int(r.loss_mask.sum()) - n * int(mask.sum())
            forward += int(r.attention_mask.sum())
        if not rewards:
            empty = torch.zeros(0, n, device=device)
            return Continued(empty, empty.bool(), 0, 0)
        return Continued(
            torch.stack(rewards).float().to(device), torch.stack(correct).to(device), generated, forward
        )
