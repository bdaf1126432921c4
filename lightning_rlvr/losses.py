"""The policy loss: what the update minimises given token advantages, chosen in YAML by ``class_path``.

A ``PolicyLoss`` owns three choices, and the module calls it without knowing which one it is:

1. **the surrogate** (a subclass hook), per completion token of row i, with
   rho_{i,t} = exp(logp_{i,t} - old_logp_{i,t}) against the rollout-time policy:

   * ``PPOClip`` -- PPO's clipped ratio with separate ranges (DAPO's clip-higher when
     eps_high > eps_low) and an optional dual clip for negative advantages:
         l_t = -min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)
         l_t = min(l_t, -dual_clip * A_t)                      where A_t < 0 (when set, > 1)
   * ``GSPO``    -- one ratio per sequence, the geometric mean of its token ratios,
         s_i = exp(mean_t (logp_{i,t} - old_logp_{i,t})),
     clipped at the sequence level. Each token carries the value s_i with gradient
     s_i grad(logp_{i,t}) (GSPO's token form, so token advantages still apply; with
     ``seq_mean`` and a sequence advantage it is exactly the sequence-level gradient):
         l_t = -min(s_i A_t, clip(s_i, 1 - eps_low, 1 + eps_high) A_t)
   * ``CISPO``   -- a clipped, *detached* importance weight on a REINFORCE term, so clipped
     tokens still get a gradient (through logp), only a bounded one:
         l_t = -sg(clip(rho_t, 1 - eps_low, 1 + eps_high)) A_t logp_t

2. **the aggregation** of the [N, T] token losses into a scalar (``loss_agg``):
   ``seq_mean`` (GRPO), ``token_mean`` (DAPO) or ``constant`` (Dr. GRPO), written as
   per-token weights so micro-batches and ranks can be summed (``objectives.loss_weights``).

3. **the KL term**: ``kl_beta`` times Schulman's k3 estimate of KL(pi || ref) per token
   against the frozen reference (0 = no reference is loaded).

Plus **TIS** (truncated importance sampling) for a rollout engine whose numerics differ
from the trainer's: when ``rollout.engine_logp`` is given, each token's policy-gradient
term is multiplied by w_t = sg(min(exp(old_logp_t - engine_logp_t), tis_cap)), which
corrects for the tokens having been sampled from the engine's distribution rather than
the trainer's. The mismatch itself is logged as ``engine_kl``: the k3 estimate
exp(d) - d - 1 with d = old_logp - engine_logp, an unbiased, non-negative per-token
estimate of KL(engine || trainer) from tokens the engine sampled; and ``tis_clip_frac``,
the fraction of tokens whose weight hit the cap. Like ``clip_frac`` and ``kl``, these are
per-token statistics that the module averages with the loss's own aggregation weights.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .core.objectives import AGGREGATIONS, Total, kl_k3, loss_weights

Aggregation = Literal["seq_mean", "token_mean", "constant"]


class PolicyLoss:
    """Base class: aggregation, KL and TIS; subclasses implement ``surrogate``.

    Args:
        eps_low: lower clip range of the importance ratio.
        eps_high: upper clip range (DAPO's clip-higher when > eps_low).
        loss_agg: ``seq_mean`` (GRPO), ``token_mean`` (DAPO) or ``constant`` (Dr. GRPO).
        kl_beta: weight of the k3 KL to the frozen initial policy; 0 loads no reference.
        tis_cap: C, the cap of the TIS weight when the rollout carries ``engine_logp``
            (None = no correction; ``engine_kl`` is still logged).
    """

    def __init__(
        self,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        loss_agg: Aggregation = "seq_mean",
        kl_beta: float = 0.0,
        tis_cap: float | None = 2.0,
    ) -> None:
        if loss_agg not in AGGREGATIONS:
            raise ValueError(f"loss_agg must be one of {sorted(AGGREGATIONS)}, got {loss_agg!r}")
        if eps_low < 0 or eps_high < 0:
            raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low}, {eps_high}")
        if kl_beta < 0:
            raise ValueError(f"kl_beta must be >= 0, got {kl_beta}")
        if tis_cap is not None and tis_cap <= 0:
            raise ValueError(f"tis_cap must be > 0 or None, got {tis_cap}")
        self.eps_low, self.eps_high = eps_low, eps_high
        self.loss_agg = loss_agg
        self.kl_beta = kl_beta
        self.tis_cap = tis_cap

    # ------------------------------------------------------------------ what the module asks
    @property
    def uses_reference(self) -> bool:
        """Whether the update needs the frozen reference's log-probs."""
        return self.kl_beta > 0

    def needs_old_logp(self, engine_logp: Tensor | None) -> bool:
        """Whether rollout-time log-probs are needed even when the ratio is 1 (one epoch, one minibatch).

        TIS compares them with the engine's. The module also computes them whenever the policy
        moves between updates of one rollout (ppo_epochs > 1 or minibatches > 1).
        """
        return engine_logp is not None

    def weights(self, mask: Tensor, max_len: int, total: Total) -> Tensor:
        """Per-token weights [m, T] whose weighted sum of token losses is this minibatch's loss."""
        return loss_weights(mask, self.loss_agg, max_len, total)

    # ------------------------------------------------------------------ the loss
    def surrogate(
        self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The policy-gradient token loss and which tokens were clipped: ([m, T], [m, T] float)."""
        raise NotImplementedError

    def __call__(
        self,
        logp: Tensor,
        old_logp: Tensor,
        advantages: Tensor,
        mask: Tensor,
        ref_logp: Tensor | None = None,
        engine_logp: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Token loss [m, T] (to be weighted by ``weights``) and per-token statistics {name: [m, T]}.

        All inputs are [m, T]: current log-probs (with grad), rollout-time log-probs, token
        advantages, completion mask, and optionally the reference's and the engine's log-probs.
        """
        tok_loss, clipped = self.surrogate(logp, old_logp, advantages, mask)
        stats = {"clip_frac": clipped}
        if engine_logp is not None:
            log_ratio = old_logp - engine_logp  # [m, T] trainer vs engine at sampling time
            stats["engine_kl"] = kl_k3(engine_logp, old_logp).detach()
            if self.tis_cap is not None:
                tis = tis_weights(log_ratio, self.tis_cap)
                tok_loss = tok_loss * tis
                stats["tis_clip_frac"] = (log_ratio.exp() > self.tis_cap).float()
        if ref_logp is not None and self.kl_beta > 0:
            kl = kl_k3(logp, ref_logp)
            tok_loss = tok_loss + self.kl_beta * kl
            stats["kl"] = kl.detach()
        return tok_loss, stats


def tis_weights(log_ratio: Tensor, cap: float) -> Tensor:
    """sg(min(exp(log_ratio), cap)) with log_ratio = old_logp - engine_logp: [m, T]."""
    return log_ratio.detach().exp().clamp(max=cap)


class PPOClip(PolicyLoss):
    """PPO's clipped surrogate (GRPO, DAPO, Dr. GRPO), with an optional dual clip.

    Args:
        dual_clip: c > 1 bounds the loss of a negative-advantage token at -c * A (the ratio
            of a token the policy now favours far more cannot push unboundedly); None = off.
        (others as in ``PolicyLoss``)
    """

    def __init__(
        self,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        loss_agg: Aggregation = "seq_mean",
        kl_beta: float = 0.0,
        tis_cap: float | None = 2.0,
        dual_clip: float | None = None,
    ) -> None:
        super().__init__(eps_low, eps_high, loss_agg, kl_beta, tis_cap)
        if dual_clip is not None and dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
        self.dual_clip = dual_clip

    def surrogate(
        self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        ratio = torch.exp(logp - old_logp)
        unclipped = ratio * advantages
        clipped = ratio.clamp(1.0 - self.eps_low, 1.0 + self.eps_high) * advantages
        loss = -torch.minimum(unclipped, clipped)
        hit = clipped < unclipped
        if self.dual_clip is not None:
            bound = -self.dual_clip * advantages  # > 0 where A < 0
            dual = (advantages < 0) & (loss > bound)
            loss = torch.where(dual, bound, loss)
            hit = hit | dual
        return loss, hit.float()


class GSPO(PolicyLoss):
    """GSPO: the importance ratio is the sequence's geometric-mean token ratio, clipped per sequence.

    GSPO's paper uses much smaller ranges than PPO (about 3e-4 / 4e-4), because the
    sequence ratio is a mean of log-ratios and moves far less than single token ratios.
    """

    def surrogate(
        self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        m = mask.float()
        mean_log_ratio = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)  # [m]
        # value s_i at every token of row i, gradient s_i * grad(logp_t) (GSPO's token form)
        ratio = mean_log_ratio.exp().detach()[:, None] * torch.exp(logp - logp.detach())  # [m, T]
        unclipped = ratio * advantages
        clipped = ratio.clamp(1.0 - self.eps_low, 1.0 + self.eps_high) * advantages
        loss = -torch.minimum(unclipped, clipped)
        return loss, (clipped < unclipped).float()


class CISPO(PolicyLoss):
    """CISPO: REINFORCE with a clipped, detached importance weight (no token ever loses its gradient).

    MiniMax-M1 clips only from above (eps_low large); both ranges are arguments here.
    """

    def surrogate(
        self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        ratio = torch.exp(logp - old_logp).detach()
        weight = ratio.clamp(1.0 - self.eps_low, 1.0 + self.eps_high)
        loss = -weight * advantages * logp
        return loss, (weight != ratio).float()
