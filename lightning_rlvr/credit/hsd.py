"""HSD: hindsight self-distillation from a successful peer of the same group.

The teacher is the same policy, without gradient, conditioned on a successful
peer rollout of the current group plus the reference answer; when the group
has no success, on the reference answer alone (``docs/methods.md``, HSD). No
extra sampling: the peer is already in the batch. The student is the policy
on the rollout's own prompt. Per completion token t of a distilled rollout o_i:

    P_t = pi(. | teacher ctx, o_{i,<t})   (stored at rollout time, no grad)
    Q_t = pi_theta(. | x, o_{i,<t})       (the current policy, with grad)
    D_t = JSD_beta(P_t, Q_t) = beta KL(P || M) + (1 - beta) KL(Q || M),  M = beta P + (1 - beta) Q
    loss = PG loss (plain GRPO advantages) + lambda * agg(min(D_t, clip))

with beta = 0.5 (D in [0, ln 2]), clip = 0.05, lambda = 1, applied to failed
rollouts by default (``apply_to="all"`` distils every rollout) [proposed].
Clipping makes tokens whose divergence exceeds ``clip`` stop pushing (zero
gradient), so a few wildly different tokens cannot dominate; credit
concentrates where the failed rollout first departs from its peer, which
``first_div_pos_mean`` and ``jsd_mass_after_div`` track.

``agg`` is ``distill_agg``. By default (None) the term is added to each
token's policy-gradient loss and aggregated with it by the policy loss's
``loss_agg``; under GRPO's ``seq_mean`` that is the mean over *all* N rows of
each row's token mean, rows without the term counting 0 (not a token mean).
``token_mean`` instead divides the summed term by the completion tokens of
the minibatch, ``constant`` by N * max_new_tokens.

``assign`` runs every teacher view through one ``Scorer.compare`` call that
returns the per-token JSD together with the teacher's distributions for the
distilled rows; ``token_loss`` compares them with the student's current
logits in each update. Dense (``teacher_top_k=None``) keeps the teacher's
full log-probs, [n, T, V]: fine for small vocabularies, about 30 GB at
V = 150k, T = 1,024, n = 48. With ``teacher_top_k=k`` it keeps the k most
likely teacher tokens per position plus the rest's mass ([n, T, k]), and the
divergence is taken over those k + 1 buckets, with the student's
probabilities of the same k tokens and of the rest. That JSD never exceeds
the full one (merging outcomes cannot increase a divergence) and equals it at
k = V; the ``jsd_mean`` metric stays the full-vocabulary JSD.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ..core.objectives import AGGREGATIONS
from ..core.rollout import Rollout
from ..core.text_roles import ANSWER_CONTEXT, NO_PEER_CONTEXT, PEER_ANSWER_CONTEXT, PEER_CONTEXT
from ..scoring.logprobs import TopK
from ..scoring.scorer import Scorer
from .base import Credit
from .distill import teacher_token_loss
from .self_conditioned import (
    ContextTemplate,
    SelfConditionedCredit,
    first_divergence,
    generalized_jsd,
    span_mask,
)
from .texts import TextSettings

DEFAULT_PEER_TEMPLATE = (
    "{prompt}\nA successful solution to this problem follows; use it as a reference.\n"
    "<reference>\n{reference}\n</reference>\nThe correct final answer is {answer}."
)
DEFAULT_ANSWER_TEMPLATE = "{prompt}\nThe correct final answer is {answer}."


class HSDCredit(TextSettings, SelfConditionedCredit):
    """Hindsight self-distillation (see the module docstring).

    Args:
        peer_template: teacher context with a successful peer; placeholders ``{prompt}``,
            ``{reference}`` (the peer's completion), ``{answer}`` (``problem.answer``) [proposed].
            None = the task's ``peer_answer_context`` (else ``peer_context``) for its plain layout, else
            ``DEFAULT_PEER_TEMPLATE``
            (``credit/texts.py``); with a prompt format it is the user turn's text.
        answer_template: teacher context when no peer success exists (``{prompt}``, ``{answer}``);
            None = the task's ``no_peer_context`` (else ``answer_context``), else
            ``DEFAULT_ANSWER_TEMPLATE``.
        distill_coef: lambda, the weight of the distillation term [proposed: 1].
        beta: skew of the JSD [proposed: 0.5, the symmetric JSD].
        clip: per-token clip of the JSD [proposed: 0.05].
        apply_to: ``failed`` (rollouts that are not correct) or ``all`` [proposed: failed].
        teacher_top_k: keep the teacher's k most likely tokens (+ tail mass) instead of its
            full distribution (None = dense; see the module docstring).
        distill_agg: aggregation of the distillation term (``seq_mean``, ``token_mean``,
            ``constant``); None = the policy loss's ``loss_agg``.
        seed: peer-choice generator seed (checkpointed).
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages for the PG part.
    """

    lab_claims = ("hsd",)  # the credit lab checks where its distillation signal concentrates

    def __init__(
        self,
        peer_template: str | None = None,
        answer_template: str | None = None,
        distill_coef: float = 1.0,
        beta: float = 0.5,
        clip: float = 0.05,
        apply_to: Literal["failed", "all"] = "failed",
        teacher_top_k: int | None = None,
        distill_agg: Literal["seq_mean", "token_mean", "constant"] | None = None,
        seed: int = 0,
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(seed=seed, scale_by_std=scale_by_std)
        if apply_to not in ("failed", "all"):
            raise ValueError(f"apply_to must be 'failed' or 'all', got {apply_to!r}")
        if not 0.0 < beta < 1.0:
            raise ValueError(f"beta must lie in (0, 1), got {beta}")
        self.peer_template = peer_template
        self.answer_template = answer_template
        if answer_template is not None:
            self.check_texts({"answer_template": answer_template})
        self.distill_coef = distill_coef
        self.beta = beta
        self.clip = clip
        self.apply_to = apply_to
        if teacher_top_k is not None and teacher_top_k < 1:
            raise ValueError(f"teacher_top_k must be >= 1 or None, got {teacher_top_k}")
        if distill_agg is not None and distill_agg not in AGGREGATIONS:
            raise ValueError(
                f"distill_agg must be one of {sorted(AGGREGATIONS)} or None, got {distill_agg!r}"
            )
        self.teacher_top_k = teacher_top_k
        self.distill_agg = distill_agg

    text_roles = {
        "peer_template": (PEER_ANSWER_CONTEXT, PEER_CONTEXT),
        "answer_template": (NO_PEER_CONTEXT, ANSWER_CONTEXT),
    }
    text_defaults = {"peer_template": DEFAULT_PEER_TEMPLATE, "answer_template": DEFAULT_ANSWER_TEMPLATE}

    def check_texts(self, texts: dict) -> None:
        if "answer_template" in texts and "reference" in ContextTemplate(texts["answer_template"]).fields:
            raise ValueError("the answer-only template cannot contain {reference}")

    def literal_texts(self, texts: dict) -> dict[str, list[str]]:
        return {k: ContextTemplate(v).literals for k, v in texts.items()}

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        texts = self.texts(scorer)
        peer_template = ContextTemplate(texts["peer_template"])
        answer_template = ContextTemplate(texts["answer_template"])
        N, T = rollout.completion_ids.shape
        mask = rollout.completion_mask.float()  # [N, T]
        adv = self.group_advantages(rollout)  # [N]
        correct = self.correct(rollout)
        lengths = rollout.lengths.tolist()

        # ---- which rows get the term, under which teacher context
        rows: list[int] = []
        templates: list[ContextTemplate] = []
        refs: list[int | None] = []
        for members in self.group_rows(rollout):
            good = [j for j in members if correct[j]]
            for i in members:
                if (self.apply_to == "failed" and correct[i]) or lengths[i] == 0:
                    continue
                peers = [j for j in good if j != i]
                rows.append(i)
                if peers:
                    templates.append(peer_template)
                    refs.append(self.peers.choice(peers))
                else:  # no other success in the group: answer-only teacher
                    templates.append(answer_template)
                    refs.append(None)

        # ---- one batched teacher pass returning, per token, the JSD and the teacher's distribution
        def jsd_and_teacher(teacher: Tensor, student: Tensor) -> Tensor:  # [m, S, V] x2 -> [m, S, 1 + V]
            return torch.cat([generalized_jsd(teacher, student, self.beta)[..., None], teacher], dim=-1)

        if self.teacher_top_k is None:  # dense: [N, T, 1 + V]
            both = self.teacher_scores(scorer, rollout, rows, templates, refs, jsd_and_teacher)
            jsd = both[..., 0] if both.dim() == 3 else both  # [N, T] unclipped
            teacher: Tensor | TopK = both[..., 1:]
        else:  # sparse: JSD [N, T] and the teacher's top-k [N, T, k]
            jsd, teacher = self.teacher_scores(
                scorer,
                rollout,
                rows,
                templates,
                refs,
                lambda t, s: generalized_jsd(t, s, self.beta),
                teacher_top_k=self.teacher_top_k,
            )
        token_loss = teacher_token_loss(rollout, rows, teacher, self._distill_term) if rows else None
        active = span_mask(rollout, rows, [(0, lengths[i]) for i in rows])  # [N, T] distilled tokens

        # ---- metrics
        d = jsd[active]
        metrics = {
            "jsd_mean": float(d.mean()) if d.numel() else math.nan,
            "frac_clipped": float((d > self.clip).float().mean()) if d.numel() else math.nan,
            "frac_distilled_rows": len(rows) / max(N, 1),
            "frac_answer_only": sum(r is None for r in refs) / len(rows) if rows else math.nan,
        }
        metrics.update(self._divergence_metrics(rollout, rows, refs, jsd))
        return Credit(
            advantages=adv[:, None] * mask,
            metrics=metrics,
            token_loss=token_loss,
            token_loss_agg=self.distill_agg,
        )

    def _distill_term(self, student: Tensor, teacher: Tensor) -> Tensor:
        """lambda * min(JSD_beta(teacher, student), clip) per token: [h, T, V] x2 -> [h, T]."""
        return self.distill_coef * generalized_jsd(teacher, student, self.beta).clamp(max=self.clip)

    @staticmethod
    def _divergence_metrics(rollout: Rollout, rows: list[int], refs: list, jsd: Tensor) -> dict:
        """Where the divergence lands relative to the first token where o_i departs from its peer."""
        pairs = [(i, p) for i, p in zip(rows, refs) if p is not None]
        if not pairs:
            return {
                "first_div_pos_mean": math.nan,
                "peak_minus_div_mean": math.nan,
                "jsd_mass_after_div": math.nan,
            }
        a = [i for i, _ in pairs]
        div = first_divergence(rollout, a, [p for _, p in pairs]).to(jsd.device)  # [n]
        ja = jsd[torch.as_tensor(a, device=jsd.device)] * rollout.completion_mask[a].to(jsd.device)  # [n, T]
        after = torch.arange(ja.shape[1], device=jsd.device)[None] >= div[:, None]  # [n, T]
        return {
            "first_div_pos_mean": float(div.float().mean()),
            "peak_minus_div_mean": float((ja.argmax(-1) - div).float().mean()),
            "jsd_mass_after_div": float((ja * after).sum() / ja.sum().clamp(min=1e-12)),
        }
