"""Self-conditioned teachers: the policy, without gradient, shown a rollout of its own group.

SC-GRPO (``sc_grpo.py``) and HSD (``hsd.py``) both compare the policy's
next-token distributions over a rollout's completion tokens under two contexts:

* student: ``[prompt_i ; o_{i,<t}]`` -- the rollout as it was sampled;
* teacher: ``[template(prompt_i, o_peer, answer) ; o_{i,<t}]`` -- the same
  policy with a peer rollout of the group (and/or the reference answer) in
  its context, so it "knows" a solution while scoring o_i's tokens.

This module holds what the two share:

``ContextTemplate``
    A template string with the placeholders ``{prompt}``, ``{reference}`` and
    ``{answer}``: the privileged text of the teacher's prompt. Two layouts:

    * with a prompt format (``scorer.render``, e.g. a chat template): the template
      is the text of the *user* turn -- ``{prompt}`` the problem's prompt text,
      ``{reference}`` the peer's decoded completion, ``{answer}`` ``problem.answer``
      -- and ``render`` wraps it exactly as it wrapped the student's prompt (system
      message, user turn, assistant header), so the privileged text sits in the
      user turn and the completion follows the assistant header;
    * plain (no prompt format): context ids are built *on token ids*: ``{prompt}``
      is the row's own prompt ids (exactly what the student saw), ``{reference}``
      the peer's completion ids with its EOS removed (no re-tokenisation of
      decoded text), ``{answer}`` the encoded ``problem.answer``, and the literal
      text in between is encoded piece by piece, so a BPE merge across a
      placeholder boundary cannot shift the ids of the rollout's own tokens.

    Other braces in the template are literal. The completion follows the last
    context token, so the teacher scores completion token t at the position right
    after ``context + o_{i,<t}`` (``Scorer.compare`` pins the alignment).

``PeerSampler``
    Uniform peer choice from a seeded ``torch.Generator`` (CPU). Its state is
    part of the assigner's ``state_dict``, so a resumed run draws the same peers.

``SelfConditionedCredit``
    Base class with the sampler, the success test (the verifier's ``rollout.correct``),
    the group rows, and ``teacher_scores``: builds every view's context and runs
    them all through one ``Scorer.compare`` call (batched in micro-batches).

Divergences over the full vocabulary: ``kl_divergence`` (teacher || student) and
``generalized_jsd`` (beta-skewed Jensen-Shannon; beta = 0.5 is the symmetric JSD
in [0, ln 2]). ``first_divergence`` gives where a rollout first departs from its peer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import torch
from torch import Tensor

from ..core.rollout import Rollout
from ..prompts import fill
from ..scoring.logprobs import DivergenceFn, TopK
from ..scoring.scorer import Scorer
from .base import CreditAssigner

FIELDS = ("prompt", "reference", "answer")
_FIELD = re.compile(r"\{(prompt|reference|answer)\}")


# ---------------------------------------------------------------------------- divergences
def _finite(logp: Tensor) -> Tensor:
    """Log-probs with -inf (an exact zero probability) raised to a finite floor, half the dtype's min.

    exp(floor) is exactly 0, so a zero-probability entry contributes 0 * (finite) = 0
    instead of 0 * (-inf) = NaN (the convention 0 log 0 = 0), in the value and in the
    gradient (the floor is a clamp: no gradient flows into a -inf entry). Half the
    minimum keeps sums of sum_v p_v * (floor - x) finite.
    """
    return logp.clamp(min=torch.finfo(logp.dtype).min / 2)


def kl_divergence(teacher_logp: Tensor, student_logp: Tensor) -> Tensor:
    """KL(teacher || student) per position over the last (vocabulary) dim: [..., V] -> [...], >= 0.

    A teacher entry of probability 0 (log-prob -inf) contributes 0. A student zero where the
    teacher has mass makes the KL infinite; it comes out as a huge finite number instead,
    so D / (D + c) is ~1 rather than inf / inf.
    """
    lp, lq = _finite(teacher_logp), _finite(student_logp)
    return (lp.exp() * (lp - lq)).sum(-1).clamp(min=0.0)


def generalized_jsd(teacher_logp: Tensor, student_logp: Tensor, beta: float = 0.5) -> Tensor:
    """beta KL(P || M) + (1 - beta) KL(Q || M), M = beta P + (1 - beta) Q: [..., V] -> [...].

    P = teacher, Q = student. With beta = 0.5 this is the Jensen-Shannon divergence,
    in [0, ln 2]. Gradients flow through whichever argument requires them. Entries
    where P or Q is exactly 0 (log-prob -inf) contribute 0 (0 log 0 = 0), never NaN.
    """
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must lie in (0, 1), got {beta}")
    lp, lq = _finite(teacher_logp), _finite(student_logp)
    mix = torch.logaddexp(lp + math.log(beta), lq + math.log(1.0 - beta))  # [..., V] log M
    kl_p = (lp.exp() * (lp - mix)).sum(-1)
    kl_q = (lq.exp() * (lq - mix)).sum(-1)
    return (beta * kl_p + (1.0 - beta) * kl_q).clamp(min=0.0)


def quantile(values: Tensor, q: float) -> Tensor:
    """Linear-interpolation quantile of a 1-D tensor (as ``torch.quantile``, without its size limit)."""
    v = values.float().sort().values
    pos = q * (v.numel() - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def first_divergence(rollout: Rollout, rows: Sequence[int], peers: Sequence[int]) -> Tensor:
    """First completion position where ``rows[k]`` differs from ``peers[k]``: [n] long.

    A position differs when the tokens differ or only one of the two is still
    inside its completion; a rollout identical to its peer gets its length.
    """
    r = rollout
    if len(rows) == 0:
        return torch.zeros(0, dtype=torch.long)
    a, b = torch.as_tensor(list(rows)), torch.as_tensor(list(peers))
    ma, mb = r.completion_mask[a].bool(), r.completion_mask[b].bool()  # [n, T]
    differ = (ma | mb) & ((r.completion_ids[a] != r.completion_ids[b]) | (ma != mb))  # [n, T]
    T = differ.shape[1]
    idx = torch.arange(T, device=differ.device).expand_as(differ)
    first = torch.where(differ, idx, torch.full_like(idx, T)).min(-1).values  # [n]
    return torch.minimum(first, r.lengths[a])


# ---------------------------------------------------------------------------- contexts
class ContextTemplate:
    """A teacher-context template with ``{prompt}``, ``{reference}``, ``{answer}`` placeholders.

    Args:
        template: the text; each placeholder may appear any number of times (or not at all).
    """

    def __init__(self, template: str) -> None:
        self.template = template
        pieces = _FIELD.split(template)  # literal, field, literal, field, ..., literal
        self.parts: list[tuple[bool, str]] = []  # (is_field, text or field name)
        for k, piece in enumerate(pieces):
            if k % 2:
                self.parts.append((True, piece))
            elif piece:
                self.parts.append((False, piece))
        self.fields = {name for is_field, name in self.parts if is_field}

    def __repr__(self) -> str:
        return f"ContextTemplate({self.template!r})"

    @property
    def literals(self) -> list[str]:
        """The template's own text between its placeholders."""
        return [text for is_field, text in self.parts if not is_field]

    def build(
        self,
        scorer: Scorer,
        rollout: Rollout,
        row: int,
        reference: int | None = None,
        cache: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """Context ids [L] for completion ``row`` with peer rollout ``reference``.

        ``cache`` (text -> ids) avoids re-encoding the same literal text for every view.
        """
        cache = {} if cache is None else cache
        device = rollout.completion_ids.device
        if getattr(scorer, "render", None) is not None:  # privileged text in the user turn, rendered
            return scorer.encode(scorer.render(self.user_text(scorer, rollout, row, reference)))
        pieces: list[Tensor] = []
        for is_field, text in self.parts:
            if not is_field:
                pieces.append(_encode(scorer, text, cache))
            elif text == "prompt":
                pieces.append(rollout.prompt_tokens(row))
            elif text == "reference":
                if reference is None:
                    raise ValueError(f"template {self.template!r} needs a reference rollout")
                pieces.append(reference_ids(rollout, reference))
            else:  # answer
                pieces.append(_encode(scorer, rollout.problems[int(rollout.group[row])].answer, cache))
        if not pieces:
            return torch.zeros(0, dtype=torch.long, device=device)
        return torch.cat([p.to(device=device, dtype=torch.long) for p in pieces])

    def user_text(self, scorer: Scorer, rollout: Rollout, row: int, reference: int | None = None) -> str:
        """The teacher's user message for ``row``: the template filled with text (prompt-format layout)."""
        if reference is None and "reference" in self.fields:
            raise ValueError(f"template {self.template!r} needs a reference rollout")
        problem = rollout.problems[int(rollout.group[row])]
        peer = (
            ""
            if reference is None
            else scorer.tokenizer.decode(reference_ids(rollout, reference), skip_special_tokens=True)
        )
        return fill(self.template, prompt=problem.prompt, reference=peer, answer=problem.answer)


def _encode(scorer: Scorer, text: str, cache: dict[str, Tensor]) -> Tensor:
    if text not in cache:
        cache[text] = scorer.encode(text)
    return cache[text]


def reference_ids(rollout: Rollout, row: int) -> Tensor:
    """A peer rollout's completion ids as context: unpadded, trailing EOS removed: [L]."""
    ids = rollout.completion_tokens(row)
    if len(ids) and int(ids[-1]) == rollout.eos_id:
        ids = ids[:-1]
    return ids


# ---------------------------------------------------------------------------- peers
class PeerSampler:
    """Uniform choices from a seeded CPU ``torch.Generator`` whose state is checkpointed."""

    def __init__(self, seed: int = 0) -> None:
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)

    def choice(self, candidates: Sequence[int]) -> int:
        """One element of ``candidates`` (non-empty), uniformly."""
        if len(candidates) == 0:
            raise ValueError("no candidates to choose from")
        k = int(torch.randint(len(candidates), (1,), generator=self.generator))
        return int(candidates[k])

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


# ---------------------------------------------------------------------------- base class
class SelfConditionedCredit(CreditAssigner):
    """Shared base of the self-conditioned methods (see the module docstring).

    Args:
        seed: seed of the peer-choice generator (its state is checkpointed).
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages.
    """

    # The student side of every view is the policy on the rollout's own prompt: with one epoch and one
    # minibatch the update's own forwards give it (``RLVRModule.fused_policy_pass``), so ``compare``
    # reads the cached distributions instead of running the student again.
    uses_policy_pass = True

    def __init__(self, seed: int = 0, scale_by_std: bool = True) -> None:
        super().__init__(scale_by_std=scale_by_std)
        self.seed = seed
        self.peers = PeerSampler(seed)

    def correct(self, rollout: Rollout) -> list[bool]:
        """[N] whether each row is a verified success (the verifier's verdict, not the shaped reward)."""
        if rollout.correct is None:
            raise ValueError("a self-conditioned teacher needs the verifier's verdicts (rollout.correct)")
        return rollout.correct.tolist()

    @staticmethod
    def group_rows(rollout: Rollout) -> list[list[int]]:
        """Rows of each group, in row order (groups are laid out consecutively)."""
        groups: dict[int, list[int]] = {}
        for i, g in enumerate(rollout.group.tolist()):
            groups.setdefault(g, []).append(i)
        return list(groups.values())

    @staticmethod
    def teacher_scores(
        scorer: Scorer,
        rollout: Rollout,
        rows: list[int],
        templates: list[ContextTemplate],
        references: list[int | None],
        fn: DivergenceFn,
        spans: list[tuple[int, int]] | None = None,
        teacher_top_k: int | None = None,
    ) -> Tensor | tuple[Tensor, TopK]:
        """``fn(teacher, student)`` at the completion tokens of every view, in one ``compare`` call.

        View ``v`` scores row ``rows[v]`` under ``templates[v]`` filled with peer
        ``references[v]``. Returns [N, T] (0 where no view covers a token); with
        ``teacher_top_k`` also the teacher's sparse distributions (``Scorer.compare``).
        """
        cache: dict[str, Tensor] = {}  # every rank calls compare, with views or not (FSDP collectives)
        contexts = [
            tpl.build(scorer, rollout, i, ref, cache) for i, tpl, ref in zip(rows, templates, references)
        ]
        if teacher_top_k is not None:
            return scorer.compare(contexts, rows, fn, spans, teacher_top_k=teacher_top_k)
        return scorer.compare(contexts, rows, fn, spans)

    def state_dict(self) -> dict:
        return {"peer_rng": self.peers.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if "peer_rng" in state_dict:
            self.peers.load_state_dict(state_dict["peer_rng"])


def span_mask(rollout: Rollout, rows: Sequence[int], spans: Sequence[tuple[int, int]]) -> Tensor:
    """[N, T] bool: the policy's tokens covered by the views (``loss_mask``: observations excluded)."""
    N, T = rollout.completion_ids.shape
    t = torch.arange(T, device=rollout.completion_ids.device)
    out = torch.zeros(N, T, dtype=torch.bool, device=t.device)
    if rows:
        r = torch.as_tensor(list(rows), device=t.device)
        s = torch.as_tensor([a for a, _ in spans], device=t.device)
        e = torch.as_tensor([b for _, b in spans], device=t.device)
        out[r] = (t[None] >= s[:, None]) & (t[None] < e[:, None])  # [n, T]
    return out & rollout.loss_mask.bool()
