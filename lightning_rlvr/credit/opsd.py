"""OPSD: on-policy self-distillation from the policy shown the reference answer.

The teacher is the same policy, without gradient, whose context also holds
privileged information -- the problem's reference answer (``problem.answer``);
the student is the policy on the rollout's own prompt. On the student's own
sampled completion o_i, per completion token t:

    Q_t = pi_theta(. | x, o_{i,<t})                  (student, with gradient)
    P_t = pi_old(. | template(x, answer), o_{i,<t})   (teacher, no grad, scored at rollout time)
    D_t = KL(Q_t || P_t) = sum_v Q_t(v) (log Q_t(v) - log P_t(v))       (reverse KL) [paper]
          or JSD_beta(P_t, Q_t)                                          (option)
    loss = pg_coef * PG loss with GRPO advantages + distill_coef * agg_t D_t

over the full vocabulary. ``pg_coef = 0`` (the default) is pure distillation:
every advantage is 0 and only the divergence trains the policy [paper: OPSD is
a distillation objective; adding the GRPO term is our option]. ``agg`` is the
module's loss aggregation (the token mean of each sequence by default).

Numerics [proposed]: log-probs below ``logp_floor`` (default -100, i.e.
probability e^-100) are raised to it on both sides, and 0 * log 0 counts as 0,
so a teacher that gives a sampled-vocabulary entry probability 0 yields a
large but finite divergence instead of inf/NaN (which would skip the update).

``assign`` runs every teacher view through one ``Scorer.compare`` call that
returns the rollout-time divergence (a metric) with the teacher's full
log-probs, kept [n, T, V] for the distilled rows; ``token_loss`` compares them
with the student's current logits in each update. ``OPDCredit`` (``opd.py``)
is the same loss with a separate frozen teacher model.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ..core.rollout import Rollout
from ..core.text_roles import ANSWER_CONTEXT
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner
from .distill import teacher_token_loss
from .hsd import DEFAULT_ANSWER_TEMPLATE
from .self_conditioned import (
    ContextTemplate,
    SelfConditionedCredit,
    generalized_jsd,
    span_mask,
)
from .texts import TextSettings

Divergence = Literal["reverse_kl", "jsd"]


def reverse_kl(student_logp: Tensor, teacher_logp: Tensor, floor: float = -100.0) -> Tensor:
    """KL(student || teacher) per position over the last (vocabulary) dim: [..., V] -> [...], >= 0.

    Both log-probs are raised to ``floor`` first; entries where the student has probability 0
    contribute exactly 0 (and no NaN gradient). Gradients flow through whichever side requires them.
    """
    q = student_logp.exp()
    s = student_logp.clamp(min=floor)
    t = teacher_logp.clamp(min=floor)
    terms = torch.where(q > 0, q * (s - t), torch.zeros_like(q))
    return terms.sum(-1).clamp(min=0.0)


def distill_divergence(
    student_logp: Tensor, teacher_logp: Tensor, kind: Divergence, beta: float = 0.5, floor: float = -100.0
) -> Tensor:
    """The per-token distillation divergence D(student, teacher): [..., V] -> [...]."""
    if kind == "reverse_kl":
        return reverse_kl(student_logp, teacher_logp, floor)
    return generalized_jsd(teacher_logp.clamp(min=floor), student_logp.clamp(min=floor), beta)


class OPSDCredit(TextSettings, CreditAssigner):
    """On-policy self-distillation (see the module docstring).

    Args:
        teacher_template: the teacher's context, with ``{prompt}`` (the row's prompt ids) and
            ``{answer}`` (``problem.answer``) [paper: the prompt plus privileged information; the
            wording is ours]. None = the task's ``answer_context`` for its plain layout, else
            ``DEFAULT_ANSWER_TEMPLATE`` (``credit/texts.py``); with a prompt format, the user turn's text.
        distill_coef: weight of the divergence term [proposed: 1].
        pg_coef: weight of the GRPO term (scales the advantages); 0 = pure distillation [proposed: 0].
        divergence: ``reverse_kl`` = KL(student || teacher) [paper] or ``jsd`` (generalised JSD).
        beta: skew of the JSD when ``divergence="jsd"`` (0.5 = symmetric, in [0, ln 2]).
        logp_floor: log-probs are raised to this before the divergence [proposed: -100].
        apply_to: ``all`` rollouts [paper] or only ``failed`` ones (``rollout.correct`` false).
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages for the PG term.
    """

    uses_policy_pass = True  # the student side

    def __init__(
        self,
        teacher_template: str | None = None,
        distill_coef: float = 1.0,
        pg_coef: float = 0.0,
        divergence: Divergence = "reverse_kl",
        beta: float = 0.5,
        logp_floor: float = -100.0,
        apply_to: Literal["all", "failed"] = "all",
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(scale_by_std=scale_by_std)
        if divergence not in ("reverse_kl", "jsd"):
            raise ValueError(f"divergence must be 'reverse_kl' or 'jsd', got {divergence!r}")
        if divergence == "jsd" and not 0.0 < beta < 1.0:
            raise ValueError(f"beta must lie in (0, 1), got {beta}")
        if apply_to not in ("all", "failed"):
            raise ValueError(f"apply_to must be 'all' or 'failed', got {apply_to!r}")
        if not math.isfinite(logp_floor):
            raise ValueError(f"logp_floor must be a finite number, got {logp_floor}")
        self.teacher_template = teacher_template
        if teacher_template is not None:
            self.check_texts({"teacher_template": teacher_template})
        self.distill_coef = distill_coef
        self.pg_coef = pg_coef
        self.divergence = divergence
        self.beta = beta
        self.logp_floor = logp_floor
        self.apply_to = apply_to

    text_roles = {"teacher_template": (ANSWER_CONTEXT,)}
    text_defaults = {"teacher_template": DEFAULT_ANSWER_TEMPLATE}

    def check_texts(self, texts: dict) -> None:
        if "reference" in ContextTemplate(texts["teacher_template"]).fields:
            raise ValueError("the teacher template cannot contain {reference} (no peer rollout here)")

    def literal_texts(self, texts: dict) -> dict[str, list[str]]:
        return {"teacher_template": ContextTemplate(texts["teacher_template"]).literals}

    def teacher_scorer(self, scorer: Scorer) -> Scorer:
        """The scorer whose model is the teacher: the policy itself (OPD overrides this)."""
        return scorer

    def divergence_fn(self, student_logp: Tensor, teacher_logp: Tensor) -> Tensor:
        return distill_divergence(student_logp, teacher_logp, self.divergence, self.beta, self.logp_floor)

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        template = ContextTemplate(self.texts(scorer)["teacher_template"])
        N, T = rollout.completion_ids.shape
        mask = rollout.completion_mask.float()  # [N, T]
        adv = self.pg_coef * self.group_advantages(rollout)  # [N]
        lengths = rollout.lengths.tolist()
        skip = rollout.correct.tolist() if self.apply_to == "failed" else [False] * N
        rows = [i for i in range(N) if lengths[i] > 0 and not skip[i]]

        def div_and_teacher(teacher: Tensor, student: Tensor) -> Tensor:  # [m, S, V] x2 -> [m, S, 1 + V]
            return torch.cat([self.divergence_fn(student, teacher)[..., None], teacher], dim=-1)

        scorer.policy()  # the student side, on every rank (FSDP: all ranks run the same forwards)
        teacher = self.teacher_scorer(scorer)
        both = SelfConditionedCredit.teacher_scores(
            teacher, rollout, rows, [template] * len(rows), [None] * len(rows), div_and_teacher
        )  # [N, T, 1 + V] (or [N, T] zeros when no row is distilled)
        div = both[..., 0] if both.dim() == 3 else both  # [N, T] at rollout time
        token_loss = None
        if rows:
            coef, fn = self.distill_coef, self.divergence_fn
            token_loss = teacher_token_loss(rollout, rows, both[..., 1:], lambda q, p: coef * fn(q, p))
        d = div[span_mask(rollout, rows, [(0, lengths[i]) for i in rows])]
        metrics = {
            "divergence_mean": float(d.mean()) if d.numel() else math.nan,
            "divergence_max": float(d.max()) if d.numel() else math.nan,
            "frac_distilled_rows": len(rows) / max(N, 1),
        }
        return Credit(advantages=adv[:, None] * mask, metrics=metrics, token_loss=token_loss)
