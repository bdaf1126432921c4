"""``RLVRModule``: reinforcement learning with verifiable rewards, one step at a time.

Each training step, top to bottom:

1. **collect** -- ``collect.roll_out`` samples G completions for each of B prompts
   through the ``RolloutEngine`` (HF ``generate`` by default; a fast CPU loop;
   vLLM on GPUs) in one batched call (N = B * G rows, grouped by prompt; an
   environment plays G episodes, one engine call per turn) and verifies them:
   the task's verifier decides each reward (a verifier that raises gives 0 and
   is counted), and optional reward shaping changes a reward, never its verdict;
2. **credit**  -- the ``CreditAssigner`` (GRPO, SHEAR, SC-GRPO, ...) turns the
   verified rollout into token advantages A_{i,t}, using only no-grad views of
   the rollout-time policy through a ``Scorer``;
3. **update**  -- ``ppo_epochs`` passes over the rollout in ``minibatches``,
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
length-sorted micro-batches, each cut to its longest row (``scoring/packing.py``); the
update's and the scorer's passes run each group's shared prompt once (``share_prompts``).
Validation and test (pass@k, and maj@k for tasks with a final answer, on
held-out prompts under a forked RNG so evaluation never shifts training) live
in ``evaluation.py``.
"""

from __future__ import annotations

import copy
import logging
import time
import zlib
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import Tensor

from .checkpoint_state import CheckpointState
from .collapse_guard import CollapseGuard
from .collect import CollectedRollout, Sampler, roll_out
from .collect.continuations import EngineSampler
from .collect.dynamic_sampling import DynamicSampling, extra_prompt_position
from .core.distributed import any_rank, shard_policy, world_size
from .core.errors import RLVRError
from .core.objectives import zero_std_groups
from .core.problem import Problem
from .core.progress import say
from .core.resume_state import checkpoint_safe, restore_rng
from .core.rollout import Rollout
from .core.validation import check_settings
from .credit.base import CreditAssigner
from .credit.grpo import GRPOCredit
from .data import train_batch_index
from .engines.base import RolloutEngine, Sampling
from .engines.choose import default_engine
from .evaluation import Evaluation
from .losses import PolicyLoss, PPOClip
from .models.policies import PolicySource, TinyPolicy, apply_lora
from .prompts import PromptFormat
from .rewards.overlong import RewardShaper
from .sample_log import append_samples, sample_rows
from .scoring.mode import train_mode_matches_eval
from .scoring.scorer import Scorer
from .tasks.addition import AdditionTask
from .tasks.base import Task
from .update import PolicyUpdate
from .warmstart import WarmStart

log = logging.getLogger(__name__)

MICRO_BATCH_TOKENS = 1024  # default padded tokens per forward (measured on the quickstart: packing.py)


class RLVRModule(Evaluation, PolicyUpdate, CheckpointState, LightningModule):
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
        prompt_format: chat template or plain template around each prompt (default: ``PromptFormat()``,
            the tokenizer's chat template when it has one, else the prompt as is).
        engine: how completions are sampled (default: ``FastEngine`` where it is exact for the policy,
            else ``HFGenerateEngine``; ``engines/choose.py``).
        sampling_key: where training rollouts draw their random numbers. ``stream`` (default): the global
            RNG stream, as every committed run did, so one changed draw shifts every later one.
            ``keyed``: row by row from a stream seeded by (the run's seed, the step, the problem, the
            sample's index), so two runs (two methods) with one seed sample the same completions
            while their policies agree: common random numbers (HF and fast engines; an environment's
            episodes key each turn's action by the turn too).
            The run's seed is ``torch.initial_seed()`` here, or a resumed checkpoint's.
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
            by length and each micro-batch cut to its longest row (``lightning_rlvr/scoring/packing.py``);
            None = rows only.
        share_prompts: in the update's and the scorer's policy passes, run each prompt once per
            micro-batch and its completions after copies of its KV cache, instead of once per row
            (the G rows of a group share it); same logits and gradients up to float rounding.
            Applies with a KV-cache model on one rank without gradient checkpointing, else the
            per-row path runs (``lightning_rlvr/scoring/packing.py``).
        fuse_policy_pass: let a credit method that reads the policy pass (hidden states, entropies,
            log-probs) take it from the update's own forward when nothing else needs a separate
            pass (see ``training_step``).
        eval_samples: completions per prompt in validation and test (pass@k up to this k; maj@k at it).
        eval_seed: seed of evaluation sampling (the training RNG is left untouched).
        eval_greedy: greedy decoding in validation and test (use with ``eval_samples: 1``).
        log_samples: write the first N rows of each step's and each evaluation's rollout (prompt,
            completion, extracted answer, verdict) to ``<log dir>/samples/<stage>.jsonl`` (0 = off).
        validate_at_start: log ``val/pass@1`` at step 0 of a fresh fit (the baseline RL starts from).
        max_nonfinite_updates: consecutive non-finite losses tolerated (skipped) before stopping.
        gradient_checkpointing: recompute activations in the backward pass (less memory, more time).
        collapse_guard: warns (optionally stops) when steps carry no signal; None = the default guard
            (``lightning_rlvr/collapse_guard.py``); ``patience: 0`` turns it off.
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
        sampling_key: str = "stream",
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
        eval_greedy: bool = False,
        log_samples: int = 0,
        validate_at_start: bool = True,
        max_nonfinite_updates: int = 3,
        gradient_checkpointing: bool = False,
        collapse_guard: CollapseGuard | None = None,
    ) -> None:
        seed = torch.initial_seed()  # the run's seed (seed_everything), before anything reseeds
        super().__init__()
        check_settings(
            {
                "group_size": group_size,
                "max_new_tokens": max_new_tokens,
                "micro_batch_size": micro_batch_size,
                **({} if micro_batch_tokens is None else {"micro_batch_tokens": micro_batch_tokens}),
                "eval_samples": eval_samples,
                "ppo_epochs": ppo_epochs,
                "minibatches": minibatches,
                "max_nonfinite_updates": max_nonfinite_updates,
            },
            {"top_k": top_k, "warmup_steps": warmup_steps},
            {"temperature": temperature, "lr": lr},
            top_p=top_p,
        )
        self.save_hyperparameters()
        for key in [k for k, v in self.hparams.items() if not checkpoint_safe(v)]:
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
        self.prompt_format = prompt_format if prompt_format is not None else PromptFormat()
        self.settings_lines = [self.prompt_format.describe(self.tokenizer)]  # said when a run starts
        if engine is None:  # FastEngine where it samples as generate does, else generate (engines/choose.py)
            engine, line = default_engine(self.model)
            self.settings_lines.insert(0, line)
        self.engine = engine
        if sampling_key not in ("stream", "keyed"):
            raise RLVRError(f"model.sampling_key must be 'stream' or 'keyed', not {sampling_key!r}")
        if sampling_key == "keyed" and not self.engine.supports_keys:
            raise RLVRError(
                f"{type(self.engine).__name__} cannot sample keyed rows; set model.sampling_key: stream "
                "or use model.engine HFGenerateEngine or FastEngine"
            )
        self.sampling_key, self.sampling_seed = sampling_key, seed
        self.group_size = group_size
        # The sampling settings, built once: rollouts, evaluation and continuations all read this.
        self.sampling = Sampling(max_new_tokens, temperature, top_p, top_k)
        self.lr, self.weight_decay, self.warmup_steps = lr, weight_decay, warmup_steps
        self.ppo_epochs, self.minibatches = ppo_epochs, minibatches
        self.grad_clip = grad_clip
        self.micro_batch_size = micro_batch_size
        self.micro_batch_tokens = micro_batch_tokens
        self.share_prompts = share_prompts
        self.fuse_policy_pass = fuse_policy_pass
        self.eval_samples = eval_samples
        self.eval_seed, self.eval_greedy, self.log_samples = eval_seed, eval_greedy, log_samples
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
        while self.settings_lines and self.global_rank == 0:  # the chosen engine and prompt layout, once
            say(self.settings_lines.pop(0))
        if stage == "fit":
            self.task.size("train")  # a task without training data (JsonlTask, no train_file) says so here
        if stage == "fit" and self.warm_start is not None and self.warm_start_summary is None:
            self.warm_start_summary = self.warm_start.run(
                self.model,
                self.tokenizer,
                self.policy_source,
                self.task,
                self.engine,
                self.render,
                max_new_tokens=self.max_new_tokens,
            )
        if stage == "fit":
            self.credit.prepare(self.model, self.tokenizer, self.task, self.device)  # e.g. OPD's teacher
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
        fmt = self.prompt_format
        if fmt.system is None and fmt.template == "{prompt}" and not fmt.uses_chat(self.tokenizer):
            return None  # the prompt as is (keeps warm-start cache keys of plain prompts unchanged)
        return partial(fmt.render, self.tokenizer)

    @property
    def sampler(self) -> Sampler:
        """The policy as a sampler: engine, live model, tokenizer, sampling and prompt format."""
        return self.make_sampler()

    @property
    def max_new_tokens(self) -> int:
        """The completion budget (an environment's per-action budget): ``sampling.max_new_tokens``."""
        return self.sampling.max_new_tokens

    @max_new_tokens.setter
    def max_new_tokens(self, value: int) -> None:
        self.sampling = replace(self.sampling, max_new_tokens=value)

    def make_sampler(self, greedy: bool = False) -> Sampler:
        sampling = replace(self.sampling, do_sample=False) if greedy else self.sampling
        return Sampler(self.engine, self.model, self.tokenizer, sampling, self.render)

    def rollout(self, problems: list[Problem], group_size: int, greedy: bool = False) -> Rollout:
        """``group_size`` verified samples per problem (``collect.roll_out``), via ``self.engine``.

        A single-turn task samples one completion per row and is verified; an environment plays
        episodes (one engine call per turn, ``max_new_tokens`` per action), scored by the game.
        """
        return roll_out(self.task, self.make_sampler(greedy), problems, group_size).rollout

    def collect(self, problems: list[Problem]) -> tuple[CollectedRollout, dict[str, float]]:
        """Sample and verify (with dynamic sampling when configured), then shape the rewards.

        Returns the verified rollout with its costs (all rounds of dynamic sampling summed) and
        sampling statistics.
        """
        rounds: list[CollectedRollout] = []

        sampler = self.sampler
        if self.sampling_key == "keyed":  # common random numbers: rows keyed by (seed, step, problem, sample)
            sampler.key = (self.sampling_seed, self.rl_step)

        def draw(batch: list[Problem]) -> Rollout:
            rounds.append(roll_out(self.task, sampler, batch, self.group_size))
            return rounds[-1].rollout

        if self.dynamic_sampling is None:
            rollout, stats = draw(problems), {}
        else:
            B, rounds_max = len(problems), self.dynamic_sampling.max_rounds
            batch_index = train_batch_index(self.rl_step, self.global_rank, world_size())  # as in TrainStream

            def more(k: int) -> list[Problem]:
                return [
                    self.task.train_problem(extra_prompt_position(batch_index, k, i, B, rounds_max))
                    for i in range(B)
                ]

            rollout, stats = self.dynamic_sampling.collect(
                problems, draw, more, sync=lambda flag: any_rank(flag, self.device)
            )
        stats["accuracy"] = float(rollout.correct.float().mean())
        for shaper in self.reward_shaping:  # lengths against the budget: an episode's longest action
            rollout.rewards = shaper(rollout.rewards, rollout.action_lengths, self.max_new_tokens)
        errors = sum(r.verifier_errors for r in rounds)
        generate_s, verify_s = sum(r.generate_s for r in rounds), sum(r.verify_s for r in rounds)
        return CollectedRollout(rollout, errors, generate_s, verify_s), stats

    # ------------------------------------------------------------------ training
    def training_step(self, batch: list[Problem], batch_idx: int) -> None:
        if self._pending_rng is not None:  # resumed: continue the exact random stream
            restore_rng(self._pending_rng)
            self._pending_rng = None
        t0 = time.perf_counter()
        collected, sampling = self.collect(batch)  # N = B * G rows, rewards verified and shaped
        rollout, errors = collected.rollout, collected.verifier_errors
        t1 = time.perf_counter() - collected.verify_s  # generation ends here; verification counts as scoring
        self.verifier_errors += errors
        sampler = EngineSampler.of(self)  # continuations for Monte-Carlo credit (sampled only on request)
        scorer = self.scorer(self.model, rollout, sampler=sampler)
        old_logp = None  # [N, T] rollout-time log-probs, when the update needs them (module docstring)
        moves = self.ppo_epochs > 1 or self.minibatches > 1  # the policy changes between updates
        if moves or (
            self.loss.needs_old_logp(rollout.engine_logp) and not train_mode_matches_eval(self.model)
        ):
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
            "train/truncated_frac": rollout.truncated(self.max_new_tokens).float().mean(),
            "train/verifier_errors": float(errors),
            # which completions were sampled (24 bits, exact in float32): equal in two runs = one rollout
            "train/rollout_hash": float(
                zlib.crc32(rollout.completion_ids.cpu().numpy().tobytes()) & 0xFFFFFF
            ),
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
        self.write_samples("fit", rollout)
        self.log("train/reward", rollout.rewards.mean(), prog_bar=True, batch_size=len(batch), logger=False)
        self.log_dict(
            metrics, on_step=True, on_epoch=False, batch_size=len(batch), sync_dist=world_size() > 1
        )

    def write_samples(self, stage: str, rollout: Rollout, limit: int | None = None) -> None:
        """The first rows of a verified rollout to ``samples/<stage>.jsonl`` (``log_samples``; rank 0)."""
        limit = self.log_samples if limit is None else limit
        if limit > 0 and self.global_rank == 0 and self._trainer is not None:
            log_dir = self.trainer.log_dir or self.trainer.default_root_dir
            append_samples(log_dir, stage, sample_rows(stage, self.rl_step, rollout, self.task, limit))

    def scorer(self, model, rollout: Rollout, **kwargs) -> Scorer:
        """A ``Scorer`` of ``rollout`` under ``model`` with this module's micro-batching."""
        kwargs.setdefault("tokenizer", self.tokenizer)
        sizes = {"micro_batch_size": self.micro_batch_size, "micro_batch_tokens": self.micro_batch_tokens}
        sizes["share_prompts"] = self.share_prompts  # the update's and the scorer's passes: one switch
        return Scorer(model, rollout, **sizes, **kwargs)

    def reference_logprobs(self, rollout: Rollout) -> Tensor:
        """Log-probs of the sampled tokens under the frozen reference (base model when using LoRA): [N, T]."""
        if not self.lora:
            return self.scorer(self._reference[0], rollout, tokenizer=None, cache_bytes=0).policy().logp
        with self.model.disable_adapter():
            return self.scorer(self.model, rollout, tokenizer=None, cache_bytes=0).policy().logp
