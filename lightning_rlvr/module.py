"""``RLVRModule``: reinforcement learning with verifiable rewards, one step at a time.

Each training step, top to bottom:

1. **rollout** -- the ``RolloutEngine`` (HF ``generate`` by default; a fast CPU
   loop; vLLM on GPUs) samples G completions for each of B prompts in one
   batched call (N = B * G rows, grouped by prompt);
2. **score**   -- the task's verifier gives each completion a reward; a verifier
   that raises gives 0 and is counted;
3. **credit**  -- the ``CreditAssigner`` (GRPO, SHEAR, SC-GRPO, ...) turns the
   scored rollout into token advantages A_{i,t}, using only no-grad views of
   the rollout-time policy through a ``Scorer``;
4. **update**  -- ``ppo_epochs`` passes over the rollout in ``minibatches``,
   each an optimiser step on the ``PolicyLoss`` (PPO clip, GSPO, CISPO; its
   aggregation, KL and TIS) against the rollout-time log-probs, plus any
   per-token loss the credit assigner adds.

Rollout-time log-probs come from one no-grad pass (``Scorer.policy``, shared
with the credit assigner) exactly when the update needs them: the policy moves
between updates of one rollout (ppo_epochs > 1 or minibatches > 1), or the loss
asks (TIS compares them with the engine's) and the model has dropout. Otherwise
the weights at the only update are the rollout's, so the update's own detached
log-probs are the rollout-time ones: the importance ratio is 1 and TIS reads them.
A credit method that reads the policy pass (SHEAR's hidden states, RREDCoT's
entropies) would then pay for a whole pass of its own; instead the update's forward runs before the credit
(``fused_policy_pass``) and its detached outputs fill the scorer's pass.
Every pass over the rollout (scoring, reference, update) is padding-free:
length-sorted micro-batches, each cut to its longest row (``packing.py``); the
update's and the scorer's passes run each group's shared prompt once (``share_prompts``).
Validation and test (pass@k, and maj@k for tasks with a final answer, on
held-out prompts under a forked RNG so evaluation never shifts training) live
in ``evaluation.py``.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from functools import partial
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import Tensor

from lightning_rlvr.continuations import EngineSampler
from lightning_rlvr.credit.base import Credit, CreditAssigner, rank_state
from lightning_rlvr.credit.grpo import GRPOCredit
from lightning_rlvr.distributed import all_sum, any_rank, shard_policy, world_size
from lightning_rlvr.dynamic_sampling import DynamicSampling, extra_index
from lightning_rlvr.engines.base import RolloutEngine, Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.errors import RLVRError
from lightning_rlvr.evaluation import Evaluation
from lightning_rlvr.guard import CollapseGuard
from lightning_rlvr.losses import PolicyLoss, PPOClip
from lightning_rlvr.models import PolicySource, TinyPolicy, apply_lora
from lightning_rlvr.objectives import loss_weights, zero_std_groups
from lightning_rlvr.packing import MicroBatch, micro_batches, shares_prompts
from lightning_rlvr.packing import forward as packed_forward
from lightning_rlvr.prompts import PromptFormat
from lightning_rlvr.rewards.overlong import RewardShaper
from lightning_rlvr.rollout import Rollout, Sampler
from lightning_rlvr.scoring import Scorer, entropy_from_logits, same_in_train_mode, token_logprobs
from lightning_rlvr.state import capture_rng, plain_value, restore_rng
from lightning_rlvr.tasks.addition import AdditionTask
from lightning_rlvr.tasks.base import Problem, Task
from lightning_rlvr.validation import check_settings
from lightning_rlvr.warmstart import WarmStart

log = logging.getLogger(__name__)

MICRO_BATCH_TOKENS = 1024  # default padded tokens per forward (measured on the quickstart: packing.py)


class RLVRModule(Evaluation, LightningModule):
    """Policy, rollout and update for RLVR; the method lives in ``credit``.

    Args:
        task: prompt source + verifier (default: 3-digit addition).
        policy: where the model and tokenizer come from (default: the tiny in-code model).
        credit: the credit-assignment method (default: ``GRPOCredit``).
        loss: the policy loss: surrogate, aggregation, KL, TIS (default: ``PPOClip``, GRPO's).
        warm_start: supervised warm start before RL (fit only; cached on disk).
        lora: ``peft.LoraConfig`` fields; when set only adapters train.
        reward_shaping: applied in order to the verifier's rewards (e.g. DAPO's ``OverlongPenalty``).
        dynamic_sampling: keep only informative groups, sampling more prompts (DAPO).
        prompt_format: chat template or plain template around each prompt (default: the prompt as is).
        engine: how completions are sampled (default: ``HFGenerateEngine``, Hugging Face ``generate``).
        group_size: completions per prompt (G).
        max_new_tokens: completion budget (L_max).
        temperature: sampling temperature for rollouts and evaluation.
        top_p: nucleus sampling threshold (1.0 = off).
        top_k: top-k sampling (0 = off).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear learning-rate warm-up, in optimiser steps.
        ppo_epochs: passes over each rollout.
        minibatches: optimiser steps per pass (rows are shuffled between passes).
        grad_clip: max gradient norm (0 = off).
        micro_batch_size: rows per forward pass in scoring and update (memory bound).
        micro_batch_tokens: padded tokens per forward pass in scoring and update: rows are sorted
            by length and each micro-batch cut to its longest row (``lightning_rlvr/packing.py``);
            None = rows only.
        share_prompts: in the update's and the scorer's policy passes, run each prompt once per
            micro-batch and its completions after copies of its KV cache, instead of once per row
            (the G rows of a group share it); same logits and gradients up to float rounding.
            Applies with a KV-cache model on one rank without gradient checkpointing, else the
            per-row path runs (``lightning_rlvr/packing.py``).
        fuse_policy_pass: let a credit method that reads the policy pass (hidden states, entropies,
            log-probs) take it from the update's own forward when nothing else needs a separate
            pass (see ``training_step``).
        eval_samples: completions per prompt in validation and test (pass@k up to this k; maj@k at it).
        eval_seed: seed of evaluation sampling (the training RNG is left untouched).
        validate_at_start: log ``val/pass@1`` at step 0 of a fresh fit (the baseline RL starts from).
        max_nonfinite_updates: consecutive non-finite losses tolerated (skipped) before stopping.
        gradient_checkpointing: recompute activations in the backward pass (less memory, more time).
        collapse_guard: warns (optionally stops) when steps carry no signal; None = the default guard
            (``lightning_rlvr/guard.py``); ``patience: 0`` turns it off.
    """

    def __init__(
        self,
        task: Task | None = None,
        policy: PolicySource | None = None,
        credit: CreditAssigner | None = None,
        loss: PolicyLoss | None = None,
        warm_start: WarmStart | None = None,
        lora: dict[str, Any] | None = None,
        reward_shaping: list[RewardShaper] | None = None,
        dynamic_sampling: DynamicSampling | None = None,
        prompt_format: PromptFormat | None = None,
        engine: RolloutEngine | None = None,
        group_size: int = 8,
        max_new_tokens: int = 48,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        lr: float = 5e-5,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        ppo_epochs: int = 1,
        minibatches: int = 1,
        grad_clip: float = 1.0,
        micro_batch_size: int = 128,
        micro_batch_tokens: int | None = MICRO_BATCH_TOKENS,
        share_prompts: bool = True,
        fuse_policy_pass: bool = True,
        eval_samples: int = 4,
        eval_seed: int = 1234,
        validate_at_start: bool = True,
        max_nonfinite_updates: int = 3,
        gradient_checkpointing: bool = False,
        collapse_guard: CollapseGuard | None = None,
    ) -> None:
        super().__init__()
        check_settings(
            {"group_size": group_size, "max_new_tokens": max_new_tokens, "micro_batch_size": micro_batch_size,
             **({} if micro_batch_tokens is None else {"micro_batch_tokens": micro_batch_tokens}),
             "eval_samples": eval_samples, "ppo_epochs": ppo_epochs, "minibatches": minibatches,
             "max_nonfinite_updates": max_nonfinite_updates},
            {"top_k": top_k, "warmup_steps": warmup_steps},
            {"temperature": temperature, "lr": lr},
            top_p=top_p,
        )  # fmt: skip
        self.save_hyperparameters()
        for key in [k for k, v in self.hparams.items() if not plain_value(v)]:
            del self.hparams[key]  # objects (Python use) cannot go in a weights-only checkpoint
        self.automatic_optimization = False
        self.task = task or AdditionTask()
        self.policy_source = (policy or TinyPolicy()).for_task(self.task)
        self.credit = credit or GRPOCredit()
        self.loss = loss or PPOClip()
        self.warm_start = warm_start
        self.model, self.tokenizer = self.policy_source.load()
        if gradient_checkpointing:  # renamed in transformers 5
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            (enable or self.model.gradient_checkpointing_enable)()
        self.lora = lora
        self.reward_shaping = list(reward_shaping or [])
        self.dynamic_sampling = dynamic_sampling
        self.prompt_format = prompt_format
        self.engine = engine or HFGenerateEngine()
        self.group_size = group_size
        self.max_new_tokens = max_new_tokens
        self.sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        self.lr, self.weight_decay, self.warmup_steps = lr, weight_decay, warmup_steps
        self.ppo_epochs, self.minibatches = ppo_epochs, minibatches
        self.grad_clip = grad_clip
        self.micro_batch_size = micro_batch_size
        self.micro_batch_tokens = micro_batch_tokens
        self.share_prompts = share_prompts
        self.fuse_policy_pass = fuse_policy_pass
        self.eval_samples = eval_samples
        self.eval_seed = eval_seed
        self.validate_at_start = validate_at_start
        self.max_nonfinite_updates = max_nonfinite_updates
        self.collapse_guard = collapse_guard or CollapseGuard()
        self.init_metrics()
        self.rl_step = 0  # RL steps done (the data position); checkpointed
        self.verifier_errors = 0
        self._nonfinite_streak = 0
        self._pending_rng: dict | None = None
        self._reference: list = []  # frozen copy kept out of state_dict (rebuilt from the warm start)
        self.warm_start_summary: dict | None = None

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        if stage == "fit" and self.warm_start is not None and self.warm_start_summary is None:
            self.warm_start_summary = self.warm_start.run(
                self.model, self.tokenizer, self.policy_source, self.task, self.engine, self.render
            )
        if self.loss.uses_reference and not self.lora and not self._reference:
            ref = copy.deepcopy(self.model).eval().requires_grad_(False)
            self._reference.append(ref)

    def configure_model(self) -> None:
        """LoRA adapters (after the warm start, which trains the base model), then FSDP2 sharding.

        Lightning calls this in every stage after ``setup`` and before a checkpoint is
        restored. Both steps are idempotent; sharding is a no-op without a device mesh.
        """
        if self.lora and not hasattr(self.model, "disable_adapter"):
            self.model = apply_lora(self.model, self.lora)
        if self.device_mesh is not None:
            shard_policy(self.model, self.device_mesh["data_parallel"])

    def configure_callbacks(self) -> list:
        return [self.credit, self.collapse_guard]

    def configure_optimizers(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        warm = max(self.warmup_steps, 1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ rollout + score
    @property
    def render(self):
        """Problem prompt -> the text the model sees (``None``: as is); warm start and rollouts share it."""
        return None if self.prompt_format is None else partial(self.prompt_format.render, self.tokenizer)

    @property
    def sampler(self) -> Sampler:
        """The policy as a sampler: engine, live model, tokenizer, sampling and prompt format."""
        sampling = Sampling(self.max_new_tokens, **self.sampling)
        return Sampler(self.engine, self.model, self.tokenizer, sampling, self.render)

    def rollout(self, problems: list[Problem], group_size: int) -> Rollout:
        """``group_size`` samples per problem, as the task rolls out (``Task.rollout``), via ``self.engine``.

        A single-turn task samples one completion per row; an environment plays episodes (one
        engine call per turn, ``max_new_tokens`` per action) and returns them already scored.
        """
        return self.task.rollout(self.sampler, problems, group_size)

    def collect(self, problems: list[Problem]) -> tuple[Rollout, int, dict[str, float]]:
        """Sample and verify (with dynamic sampling when configured), then shape the rewards.

        Returns the rollout, the number of verifier errors and sampling statistics.
        """
        errors, verify_s = 0, 0.0

        def draw(batch: list[Problem]) -> Rollout:
            nonlocal errors, verify_s
            rollout = self.rollout(batch, self.group_size)
            t = time.perf_counter()
            errors += self.verify(rollout)
            verify_s += time.perf_counter() - t
            return rollout

        if self.dynamic_sampling is None:
            rollout, stats = draw(problems), {}
        else:
            B, rounds = len(problems), self.dynamic_sampling.max_rounds
            slot = self.rl_step * world_size() + self.global_rank  # this rank's step, as in TrainStream

            def more(k: int) -> list[Problem]:
                return [self.task.train_problem(extra_index(slot, k, i, B, rounds)) for i in range(B)]

            rollout, stats = self.dynamic_sampling.collect(
                problems, draw, more, sync=lambda flag: any_rank(flag, self.device)
            )
        stats["accuracy"] = float(rollout.correct.float().mean())
        for shaper in self.reward_shaping:  # lengths against the budget: an episode's longest action
            rollout.rewards = shaper(rollout.rewards, rollout.action_lengths, self.max_new_tokens)
        stats["verify_s"] = verify_s
        return rollout, errors, stats

    def verify(self, rollout: Rollout) -> int:
        """Fill ``rollout.rewards`` and ``feedback``; returns the number of verifier errors.

        A rollout the task scored itself (an environment's episodes carry the game's verdicts)
        is left as it is.
        """
        if rollout.rewards is not None:
            return 0
        problems = [rollout.problems[int(g)] for g in rollout.group]
        results = self.task.check_batch(rollout.completions, problems)  # [(verdict, raised)] * N
        rollout.rewards = torch.tensor(
            [v.reward for v, _ in results], dtype=torch.float32, device=self.device
        )
        rollout.feedback = [v.feedback for v, _ in results]
        rollout.correct = torch.tensor([bool(v.correct) for v, _ in results], device=self.device)
        return sum(raised for _, raised in results)

    # ------------------------------------------------------------------ training
    def training_step(self, batch: list[Problem], batch_idx: int) -> None:
        if self._pending_rng is not None:  # resumed: continue the exact random stream
            restore_rng(self._pending_rng)
            self._pending_rng = None
        t0 = time.perf_counter()
        rollout, errors, sampling = self.collect(batch)  # N = B * G rows, rewards verified and shaped
        verify_s = sampling.pop("verify_s")
        t1 = time.perf_counter() - verify_s  # generation ends here; verification counts as scoring
        self.verifier_errors += errors
        sampler = EngineSampler.of(self)  # continuations for Monte-Carlo credit (sampled only on request)
        scorer = self.scorer(self.model, rollout, sampler=sampler)
        old_logp = None  # [N, T] rollout-time log-probs, when the update needs them (module docstring)
        moves = self.ppo_epochs > 1 or self.minibatches > 1  # the policy changes between updates
        if moves or (self.loss.needs_old_logp(rollout.engine_logp) and not same_in_train_mode(self.model)):
            old_logp = scorer.policy(hidden=self.credit.uses_hidden_states).logp  # shared with the credit
        forwards = None  # the update's own forwards, run now when they can serve the credit's policy pass
        reads_pass = self.credit.uses_hidden_states or self.credit.uses_policy_pass
        if old_logp is None and reads_pass and self.fuse_policy_pass:
            forwards = self.fused_policy_pass(rollout, scorer, hidden=self.credit.uses_hidden_states)
        t2 = time.perf_counter()
        credit = self.credit.assign(rollout, scorer)
        # The one place credit meets the loss mask: environment tokens (and padding) get no advantage.
        credit.advantages = torch.where(rollout.loss_mask.bool(), credit.advantages, 0.0)
        t3 = time.perf_counter()
        ref_logp = self.reference_logprobs(rollout) if self.loss.uses_reference else None
        stats = self.update(rollout, credit, old_logp, ref_logp, forwards)
        t4 = time.perf_counter()
        self.rl_step += 1

        lengths = rollout.lengths.float()
        metrics = {
            "train/reward_mean": rollout.rewards.mean(),
            "train/reward_std": rollout.rewards.std() if rollout.num_rows > 1 else torch.tensor(0.0),
            "train/frac_zero_std": zero_std_groups(rollout.rewards, rollout.group).float().mean(),
            "train/completion_len": lengths.mean(),
            "train/verifier_errors": float(errors),
            "time/rollout_s": t1 - t0,
            "time/score_s": t2 - t1,  # verifier + rollout-time log-prob pass or fused forward, if any
            "time/credit_s": t3 - t2,
            "time/update_s": t4 - t3,
            "perf/tokens_per_s": float(lengths.sum()) / max(t1 - t0, 1e-9),
            "perf/extra_forward_tokens": float(scorer.forward_tokens),
            "perf/fused_policy_pass": float(forwards is not None),  # the update's forwards ran in score_s
            **{f"train/{k}": v for k, v in {**sampling, **stats}.items()},
            **{f"train/{k}": v for k, v in self.task.rollout_metrics(rollout).items()},
            **{f"credit/{k}": v for k, v in credit.metrics.items()},
        }
        self.log("train/reward", rollout.rewards.mean(), prog_bar=True, batch_size=len(batch), logger=False)
        self.log_dict(
            metrics, on_step=True, on_epoch=False, batch_size=len(batch), sync_dist=world_size() > 1
        )

    def scorer(self, model, rollout: Rollout, **kwargs) -> Scorer:
        """A ``Scorer`` of ``rollout`` under ``model`` with this module's micro-batching."""
        kwargs.setdefault("tokenizer", self.tokenizer)
        sizes = {"micro_batch_size": self.micro_batch_size, "micro_batch_tokens": self.micro_batch_tokens}
        sizes["share_prompts"] = self.share_prompts  # the update's and the scorer's passes: one switch
        return Scorer(model, rollout, **sizes, **kwargs)

    def micro_batches(self, rollout: Rollout, rows: Tensor) -> list[MicroBatch]:
        """The update's micro-batches of ``rows`` (padding-free, prompts shared: ``packing.py``)."""
        share = shares_prompts(self.model, self.share_prompts)
        return micro_batches(rollout, rows, self.micro_batch_size, self.micro_batch_tokens, share=share)

    def reference_logprobs(self, rollout: Rollout) -> Tensor:
        """Log-probs of the sampled tokens under the frozen reference (base model when using LoRA): [N, T]."""
        if not self.lora:
            return self.scorer(self._reference[0], rollout, tokenizer=None, cache_bytes=0).policy().logp
        with self.model.disable_adapter():
            return self.scorer(self.model, rollout, tokenizer=None, cache_bytes=0).policy().logp

    def fused_policy_pass(
        self, rollout: Rollout, scorer: Scorer, hidden: bool = True
    ) -> list[tuple[MicroBatch, Tensor]] | None:
        """The update's forwards, run before the credit so they fill ``scorer``'s policy pass (log-probs,
        entropies and, with ``hidden``, hidden states).

        With one epoch and one minibatch the only update runs at the rollout-time weights, so
        its forward computes what ``scorer.policy(hidden=True)`` would: running it first (every
        micro-batch, graphs kept) saves a whole no-grad pass over the rollout. It holds all
        micro-batches' activations until the backward (the memory of ``micro_batch_size`` = N);
        ``fuse_policy_pass: false`` turns it off. Not used when train and eval mode differ
        (dropout): the scorer's pass is in eval mode. Returns ``(micro-batch, logits)`` pairs in
        the update's order, or None when not fused.
        """
        if not same_in_train_mode(self.model):
            return None
        parts = []  # (micro-batch, logits [m, T_m, V] with graph, hidden [m, T_m, H])
        for mb in self.micro_batches(rollout, torch.arange(rollout.num_rows, device=self.device)):
            parts.append((mb, *packed_forward(self.model, rollout, mb, hidden=hidden)))
        scorer.adopt_policy_pass(parts)
        return [(mb, logits) for mb, logits, _ in parts]

    def update(
        self,
        rollout: Rollout,
        credit: Credit,
        old_logp: Tensor | None,
        ref_logp: Tensor | None,
        forwards: list[tuple[MicroBatch, Tensor]] | None = None,
    ) -> dict[str, float]:
        """``ppo_epochs`` x ``minibatches`` optimiser steps on ``self.loss`` (+ the credit's token loss).

        Per-token weights normalise over the whole minibatch on all ranks; x world size undoes
        the gradient averaging of DDP/FSDP, so W ranks make the update of one rank with all rows.
        A non-finite loss on any rank skips that optimiser step on every rank: each rank still
        runs all its forwards and backwards (collectives under FSDP) and the skip is decided
        together, so ranks never fall out of step. Micro-batches are padding-free (length-sorted,
        each cut to its longest row: ``lightning_rlvr/packing.py``), so the token loss of one is
        [m, T_m] with T_m <= T. ``forwards``: the micro-batches' forwards, already run by
        ``fused_policy_pass`` (one epoch, one minibatch).
        """
        opt, sched = self.optimizers(), self.lr_schedulers()
        N, T, W = rollout.num_rows, rollout.completion_ids.shape[1], world_size()
        targets, mask = rollout.completion_ids, rollout.loss_mask.float()  # [N, T] the policy's own tokens
        engine = rollout.engine_logp  # [N, T] or None
        budget = self.task.policy_token_budget(self.max_new_tokens)  # policy tokens a row can hold (L_max)
        totals: dict[str, float] = {"loss": 0.0, "grad_norm": 0.0, "zero_grad_frac": 0.0}
        n_updates = 0
        for _ in range(self.ppo_epochs):
            order = torch.randperm(N, device=self.device) if self.minibatches > 1 else torch.arange(N)
            for mb in order.chunk(self.minibatches):
                weights = self.loss.weights(mask[mb], budget, all_sum) * W  # [n, T]
                extra_w = weights  # the credit's token loss: the loss's aggregation unless it names its own
                if credit.token_loss is not None and credit.token_loss_agg is not None:
                    extra_w = loss_weights(mask[mb], credit.token_loss_agg, budget, all_sum) * W
                loss_total, parts, finite = 0.0, {"entropy": 0.0}, True
                pending = forwards or [(p, None) for p in self.micro_batches(rollout, mb)]
                forwards = None  # fused forwards serve the first (when fused: the only) minibatch
                while pending:
                    part, logits = pending.pop(0)  # a fused forward's graph is freed with its backward
                    if logits is None:
                        logits, _ = packed_forward(self.model, rollout, part)  # [m, T_m, V]
                    rows, Tm = part.rows, part.width
                    w = weights[part.index, :Tm]  # [m, T_m]
                    logp = token_logprobs(logits, targets[rows, :Tm])  # [m, T_m]
                    tok_loss, tok_stats = self.loss(
                        logp,
                        old_logp[rows, :Tm] if old_logp is not None else logp.detach(),
                        credit.advantages[rows, :Tm],
                        mask[rows, :Tm],
                        ref_logp=None if ref_logp is None else ref_logp[rows, :Tm],
                        engine_logp=None if engine is None else engine[rows, :Tm],
                    )
                    loss = (tok_loss * w).sum()  # an empty micro-batch (idle forward) gives 0 with a graph
                    if credit.token_loss is not None and len(rows):  # its contract: logits [m, T, V]
                        full = torch.nn.functional.pad(logits, (0, 0, 0, T - Tm))
                        loss = loss + (credit.token_loss(full, rows) * extra_w[part.index]).sum()
                    finite = finite and bool(torch.isfinite(loss))
                    self.manual_backward(loss)  # also when non-finite: the backward is a collective
                    loss_total += float(loss.detach())
                    with torch.no_grad():
                        tok_stats["entropy"] = entropy_from_logits(logits.detach())
                        adv = credit.advantages[rows, :Tm]  # [m, T_m] what the loss pushes each token by
                        tok_stats["advantage"], tok_stats["advantage_abs"] = adv, adv.abs()
                        for k, v in tok_stats.items():
                            parts[k] = parts.get(k, 0.0) + float((v * w).sum())
                grad_norm = self._clip_gradients()
                if any_rank(not finite, self.device) or not math.isfinite(grad_norm):
                    self._skip_nonfinite(opt)
                    continue
                self._nonfinite_streak = 0
                opt.step()
                self.engine.sync_weights(self.model)  # engines with their own copy of the weights
                opt.zero_grad(set_to_none=True)
                sched.step()
                n_updates += 1
                zero = float(grad_norm == 0.0)  # train/zero_grad_frac: updates with no gradient at all
                record = {"loss": loss_total, "grad_norm": grad_norm, "zero_grad_frac": zero, **parts}
                for k, v in record.items():
                    totals[k] = totals.get(k, 0.0) + v
        stats = {k: v / max(n_updates, 1) for k, v in totals.items()}
        stats["lr"] = sched.get_last_lr()[0]
        stats["skipped_updates"] = float(self.ppo_epochs * self.minibatches - n_updates)
        return stats

    def _clip_gradients(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # DTensor under FSDP2

    def _skip_nonfinite(self, opt) -> None:
        opt.zero_grad(set_to_none=True)
        self._nonfinite_streak += 1
        log.warning("non-finite loss or gradient at RL step %d: update skipped", self.rl_step)
        if self._nonfinite_streak >= self.max_nonfinite_updates:
            raise RLVRError(
                f"the loss or gradient was NaN/inf in {self._nonfinite_streak} consecutive updates "
                f"(RL step {self.rl_step}); training stopped with the weights of the last good update. "
                "The last saved checkpoint is intact; lower model.lr or check the rewards."
            )

    # ------------------------------------------------------------------ checkpoint state
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rlvr"] = {
            "rl_step": self.rl_step,
            "verifier_errors": self.verifier_errors,
            "rng": capture_rng(),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("rlvr", {})
        self.rl_step = state.get("rl_step", 0)
        self.verifier_errors = state.get("verifier_errors", 0)
        self._pending_rng = state.get("rng")
        credit_state = checkpoint.get("callbacks", {}).get(self.credit.state_key)
        if credit_state is not None:  # Lightning restores callbacks only when fitting; test needs it too
            self.credit.load_state_dict(rank_state(credit_state))
