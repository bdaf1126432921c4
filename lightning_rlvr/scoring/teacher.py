"""``TeacherScorer``: ``compare`` under another, frozen model against the policy's own distributions.

Layer: scoring (imports only ``core`` and the scoring modules below it). Used by methods with an
external teacher (``credit/opd.py``); everything but the teacher's forwards is ``Scorer``'s.
"""

from __future__ import annotations

from torch import Tensor

from .scorer import Scorer, _scoring


class TeacherScorer(Scorer):
    """``compare`` under another, frozen model (an external teacher) against the policy's own distributions.

    The teacher sees the same rollout and contexts; the ``student_logp`` handed to ``fn`` still comes
    from ``policy`` (the rollout-time policy, in eval mode and without gradient), so methods such as
    OPD run the same code as their self-teacher variants. Tokens the teacher runs are added to
    ``policy.forward_tokens`` (the step's extra forward cost). Vocabularies must match.
    """

    def __init__(self, teacher, policy: Scorer) -> None:
        r = policy
        super().__init__(
            teacher,
            r.rollout,
            r.tokenizer,
            r.micro_batch_size,
            r.cache_bytes,
            micro_batch_tokens=r.micro_batch_tokens,
            render=r.render,
            task=r.task,
        )
        self.policy_scorer = policy

    def _student(self, rows: Tensor) -> Tensor:
        return _scoring(Scorer._student)(self.policy_scorer, rows)  # the policy in eval mode, no grad

    def _prepare_student(self, has_views: bool) -> None:
        _scoring(Scorer._prepare_student)(self.policy_scorer, has_views)

    def _idle_student(self) -> None:
        _scoring(Scorer._idle_student)(self.policy_scorer)

    def _fast_student(self) -> bool:
        return self.policy_scorer._fast_student()

    def _student_prefix(self, rows: Tensor, ends: Tensor) -> Tensor:
        return _scoring(Scorer._student_prefix)(self.policy_scorer, rows, ends)

    def compare(self, *args, **kwargs) -> Tensor:
        before = self.forward_tokens
        out = super().compare(*args, **kwargs)
        self.policy_scorer.forward_tokens += self.forward_tokens - before
        return out
