"""The update half of ``RLVRModule``: optimiser steps on the policy loss over one rollout.

Layer: beside ``module`` (a mixin the module inherits; it imports what the step imports).
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor

from .core import stop
from .core.distributed import all_sum, any_rank, world_size
from .core.errors import RLVRError
from .core.objectives import loss_weights
from .core.rollout import Rollout
from .credit.base import Credit
from .scoring.logprobs import entropy_from_logits, token_logprobs
from .scoring.mode import train_mode_matches_eval
from .scoring.packing import MicroBatch, micro_batches, shares_prompts
from .scoring.packing import forward as packed_forward
from .scoring.scorer import Scorer

log = logging.getLogger(__name__)


class PolicyUpdate:
    """``update``, its forwards and gradient handling (a mixin: the module's model, loss, optimiser)."""

    def micro_batches(self, rollout: Rollout, rows: Tensor) -> list[MicroBatch]:
        """The update's micro-batches of ``rows`` (padding-free, prompts shared: ``packing.py``)."""
        share = shares_prompts(self.model, self.share_prompts)
        return micro_batches(rollout, rows, self.micro_batch_size, self.micro_batch_tokens, share=share)

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
        if not train_mode_matches_eval(self.model):
            return None
        parts = []  # (micro-batch, logits [m, T_m, V] with graph, hidden [m, T_m, H])
        for mb in self.micro_batches(rollout, torch.arange(rollout.num_rows, device=self.device)):
            stop.check("in an update micro-batch")  # a stop signal ends the run here (core/stop.py)
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
        each cut to its longest row: ``lightning_rlvr/scoring/packing.py``), so the token loss of one is
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
                    stop.check("in an update micro-batch")  # a stop signal ends the run here (core/stop.py)
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
                    stop.check("in an update micro-batch")  # between its forward and its backward too
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
