"""SC-GRPO: self-conditioned GRPO -- token weights from a teacher that has seen a correct peer.

The teacher is the same policy, gradients stopped, with a verified-correct
rollout tau of the same group placed in its context; teacher and student score
the same completion prefix o_{i,<t} (``docs/methods.md``, SC-GRPO). Tokens where the
informed teacher disagrees most with the student are the ones that matter:

    D_{i,t} = KL(pi(. | teacher ctx, o_{i,<t}) || pi(. | x, o_{i,<t}))    (full vocabulary)
    f(D)    = D / (D + c),   c = max(q75(D over the step's scored tokens), 1e-4)   in [0, 1)

A teacher entry of probability 0 contributes 0 to D (0 log 0 = 0); a student zero
where the teacher has mass (infinite KL) gives a huge finite D, hence f ~ 1.

Routing by n_c = #correct in the group of G:

* 2 <= n_c < G: tau uniform over the correct rollouts other than o_i (a correct
  o_i gets a *different* correct peer; an incorrect one any correct);
  A_{i,t} = A_i * f(D_{i,t}) -- a multiplicative weight (the paper reports that
  KL as an additive loss fails).
* n_c = 0: no correct peer exists. One random rollout o_r is the reference;
  s_i = mean f(D_{i,t}) over the first min(|o_i|, |o_r|) tokens;
  A_div = (s - mean s) / (std s + eps) over the group without o_r (exactly 0
  when every s_i is equal, decided by exact equality: a float std of equal
  values can be ~1e-8, not 0); every token of o_i gets alpha * A_div_i
  (alpha = 0.1); o_r gets 0 [proposed].
  An all-wrong group, which carries no GRPO signal, thus rewards diversity.
* n_c = 1 or n_c = G: plain GRPO.

The "micro-batch" of the percentile is the whole step here (one scorer per
step). Cost: one extra no-grad forward per scored rollout over a longer
context, all views batched through ``Scorer.compare``.
"""

from __future__ import annotations

import math

import torch

from ..core.distributed import gather_values
from ..core.objectives import standardize
from ..core.rollout import Rollout
from ..core.text_roles import PEER_CONTEXT
from ..scoring.scorer import Scorer
from .base import Credit
from .self_conditioned import (
    ContextTemplate,
    SelfConditionedCredit,
    first_divergence,
    kl_divergence,
    quantile,
    span_mask,
)
from .texts import TextSettings

DEFAULT_TEMPLATE = (
    "{prompt}\nA verified correct solution to this problem follows; use it as a reference.\n"
    "<reference>\n{reference}\n</reference>"
)


class SCGRPOCredit(TextSettings, SelfConditionedCredit):
    """SC-GRPO token weights (see the module docstring).

    Args:
        template: the teacher's prompt with ``{prompt}`` and ``{reference}`` (the reference rollout's
            completion) [proposed]; None = the task's ``peer_context`` for its plain layout, else
            ``DEFAULT_TEMPLATE`` (``credit/texts.py``). With a prompt format it is the user turn's text.
        alpha: scale of the diversity advantage in all-wrong groups [proposed].
        quantile_level: percentile of D that sets c [paper: 0.75].
        c_min: floor of c [paper: 1e-4].
        eps: added to the std of s in all-wrong groups.
        seed: peer-choice generator seed (checkpointed).
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages.
    """

    def __init__(
        self,
        template: str | None = None,
        alpha: float = 0.1,
        quantile_level: float = 0.75,
        c_min: float = 1e-4,
        eps: float = 1e-6,
        seed: int = 0,
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(seed=seed, scale_by_std=scale_by_std)
        self.template = template
        if template is not None:
            self.check_texts({"template": template})
        self.alpha = alpha
        self.quantile_level = quantile_level
        self.c_min = c_min
        self.eps = eps

    text_roles = {"template": (PEER_CONTEXT,)}
    text_defaults = {"template": DEFAULT_TEMPLATE}

    def check_texts(self, texts: dict) -> None:
        if "reference" not in ContextTemplate(texts["template"]).fields:
            raise ValueError("the SC-GRPO template must contain {reference}")

    def literal_texts(self, texts: dict) -> dict[str, list[str]]:
        return {"template": ContextTemplate(texts["template"]).literals}

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        template = ContextTemplate(self.texts(scorer)["template"])
        mask = rollout.completion_mask.float()  # [N, T]
        adv = self.group_advantages(rollout)  # [N]
        correct = self.correct(rollout)
        lengths = rollout.lengths.tolist()

        # ---- routing: which rows are scored, against which reference, over which span
        rows: list[int] = []
        refs: list[int | None] = []
        spans: list[tuple[int, int]] = []
        weighted: list[int] = []  # rows of 2 <= n_c < G groups
        all_wrong: list[tuple[list[int], int]] = []  # (group rows, reference row r)
        n_groups = {"weighted": 0, "all_wrong": 0, "plain": 0}
        for members in self.group_rows(rollout):
            good = [i for i in members if correct[i]]
            if 2 <= len(good) < len(members):
                n_groups["weighted"] += 1
                for i in members:
                    tau = self.peers.choice([j for j in good if j != i])
                    rows.append(i)
                    refs.append(tau)
                    spans.append((0, lengths[i]))
                weighted.extend(members)
            elif not good:
                n_groups["all_wrong"] += 1
                r = self.peers.choice(members)
                for i in members:
                    if i != r and min(lengths[i], lengths[r]) > 0:
                        rows.append(i)
                        refs.append(r)
                        spans.append((0, min(lengths[i], lengths[r])))
                all_wrong.append((members, r))
            else:  # n_c == 1 or n_c == G
                n_groups["plain"] += 1

        # ---- one batched teacher pass: D_{i,t} = KL(teacher || student)
        D = self.teacher_scores(
            scorer, rollout, rows, [template] * len(rows), refs, kl_divergence, spans
        )  # [N, T]
        active = span_mask(rollout, rows, spans)  # [N, T] scored tokens
        d_active = gather_values(D[active])  # the percentile is over the whole batch, on every rank
        c = (
            max(float(quantile(d_active, self.quantile_level)), self.c_min)
            if d_active.numel()
            else self.c_min
        )
        f = D / (D + c)  # [N, T] in [0, 1)

        # ---- advantages
        token_adv = adv[:, None] * mask  # [N, T] plain GRPO
        if weighted:
            w = torch.as_tensor(weighted, device=mask.device)
            token_adv[w] = adv[w, None] * f[w] * mask[w]
        for members, r in all_wrong:
            others = [i for i in members if i != r]
            token_adv[members] = 0.0
            if len(others) < 2:
                continue
            o = torch.as_tensor(others, device=mask.device)
            # mean in float64, rounded back: equal f values give bit-identical s_i at any length
            fo, ao = f[o].double(), active[o].double()
            s = ((fo * ao).sum(-1) / ao.sum(-1).clamp(min=1)).float()  # [G-1]
            a_div = standardize(s, self.eps)  # [G-1]; exactly 0 when every s_i is equal
            token_adv[o] = self.alpha * a_div[:, None] * mask[o]

        # ---- metrics
        total = max(sum(n_groups.values()), 1)
        metrics = {f"groups_{k}": v / total for k, v in n_groups.items()}
        metrics["kl_mean"] = float(d_active.mean()) if d_active.numel() else math.nan
        metrics["kl_c"] = c
        wmask = torch.zeros_like(active)
        if weighted:
            wmask[torch.as_tensor(weighted, device=mask.device)] = True
        wmask &= mask.bool()  # [N, T] tokens whose advantage is A_i * f
        fw = f[wmask]
        metrics["weight_mean"] = float(fw.mean()) if fw.numel() else math.nan
        metrics["frac_over_half"] = float((fw > 0.5).float().mean()) if fw.numel() else math.nan
        for q in (0.1, 0.5, 0.9):
            metrics[f"weight_p{int(q * 100)}"] = float(quantile(fw, q)) if fw.numel() else math.nan
        metrics.update(self._divergence_metrics(rollout, rows, refs, weighted, f))
        return Credit(advantages=token_adv, metrics=metrics)

    @staticmethod
    def _divergence_metrics(rollout: Rollout, rows: list[int], refs: list, weighted: list[int], f) -> dict:
        """Where the weight lands relative to the first token where o_i departs from its peer tau."""
        keep = set(weighted)
        pairs = [(i, tau) for i, tau in zip(rows, refs) if i in keep]
        if not pairs:
            return {"first_div_pos_mean": math.nan, "weight_mass_after_div": math.nan}
        a = [i for i, _ in pairs]
        div = first_divergence(rollout, a, [p for _, p in pairs]).to(f.device)  # [n]
        fa = f[torch.as_tensor(a, device=f.device)] * rollout.completion_mask[a]  # [n, T]
        after = torch.arange(fa.shape[1], device=f.device)[None] >= div[:, None]  # [n, T]
        return {
            "first_div_pos_mean": float(div.float().mean()),
            "weight_mass_after_div": float((fa * after).sum() / fa.sum().clamp(min=1e-12)),
        }
