"""OPD: on-policy distillation from a separate, frozen teacher model.

The same loss as OPSD (``opsd.py``) -- per-token reverse KL(student || teacher)
over the full vocabulary on the student's own samples, optionally with the
GRPO term -- but the teacher is another model, given as any ``PolicySource``
(``TinyPolicy``, ``PretrainedPolicy``), shown the same prompt by default
[paper: the teacher scores the student's rollout under the student's prompt].

The teacher lives on the credit assigner, never on the ``RLVRModule``: it is
not a submodule, so it is neither in the checkpoint's ``state_dict`` nor in the
optimiser, and it is frozen (``eval()``, ``requires_grad_(False)``). It is
loaded in ``prepare``, which the module calls at the start of a fit (after the
student's warm start), optionally warm-started there by its own
``WarmStart`` on the module's task -- cached on disk exactly like the
student's warm start, under a key of the teacher's recipe -- and moved to the
module's device. A rerun or a resumed fit reloads it from that cache.

Vocabularies must match (the divergence compares distributions entry by
entry): the teacher's tokenizer must map every token to the same id as the
student's, and both models must predict over the same number of logits;
otherwise ``setup`` raises one ``RLVRError`` naming both sizes.
"""

from __future__ import annotations

from typing import Literal, Protocol

from ..core.errors import RLVRError
from ..core.rollout import Rollout
from ..models.policies import PolicySource
from ..scoring.scorer import Scorer
from ..scoring.teacher import TeacherScorer
from .opsd import Divergence, OPSDCredit


class TeacherWarmStart(Protocol):
    """What OPD asks of the teacher's warm start: ``lightning_rlvr.warmstart.WarmStart`` is one.

    A protocol, so that credit methods never import the warm start (it samples, which credit never
    does); YAML names the class as usual (``class_path: lightning_rlvr.warmstart.WarmStart``).
    """

    def run(self, model, tokenizer, policy, task, engine=None, render=None) -> dict: ...


def output_size(model) -> int:
    """How many logits the model predicts per position."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def check_same_vocabulary(student_model, student_tokenizer, teacher_model, teacher_tokenizer) -> None:
    """Raise one ``RLVRError`` unless the two tokenizers and output layers agree entry by entry."""
    s_vocab, t_vocab = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if s_vocab != t_vocab:
        differ = sorted(k for k in s_vocab.keys() | t_vocab.keys() if s_vocab.get(k) != t_vocab.get(k))
        raise RLVRError(
            f"OPD teacher vocabulary differs from the student's ({len(t_vocab)} vs {len(s_vocab)} tokens, "
            f"{len(differ)} mismatched, e.g. {differ[:3]}); choose a teacher with the student's tokenizer"
        )
    s_out, t_out = output_size(student_model), output_size(teacher_model)
    if s_out != t_out:
        raise RLVRError(
            f"OPD teacher predicts {t_out} logits per token but the student {s_out}; "
            "choose a teacher whose output layer has the student's size"
        )


class OPDCredit(OPSDCredit):
    """On-policy distillation from a frozen teacher (see the module docstring).

    Args:
        teacher: where the teacher model and tokenizer come from.
        teacher_warm_start: supervised warm start of the teacher before RL (cached); None = as loaded.
        teacher_template: the teacher's context (``{prompt}``, ``{answer}``) [paper: the prompt alone];
            None = ``{prompt}`` (a different model reads no task's text).
        distill_coef: weight of the divergence term [proposed: 1].
        pg_coef: weight of the GRPO term; 0 = pure distillation [proposed: 0].
        divergence: ``reverse_kl`` [paper] or ``jsd``.
        beta: skew of the JSD when ``divergence="jsd"``.
        logp_floor: log-probs are raised to this before the divergence [proposed: -100].
        apply_to: ``all`` rollouts [paper] or only ``failed`` ones.
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages for the PG term.
    """

    def __init__(
        self,
        teacher: PolicySource,
        teacher_warm_start: TeacherWarmStart | None = None,
        teacher_template: str | None = None,
        distill_coef: float = 1.0,
        pg_coef: float = 0.0,
        divergence: Divergence = "reverse_kl",
        beta: float = 0.5,
        logp_floor: float = -100.0,
        apply_to: Literal["all", "failed"] = "all",
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(
            teacher_template=teacher_template,
            distill_coef=distill_coef,
            pg_coef=pg_coef,
            divergence=divergence,
            beta=beta,
            logp_floor=logp_floor,
            apply_to=apply_to,
            scale_by_std=scale_by_std,
        )
        self.teacher = teacher
        self.teacher_warm_start = teacher_warm_start
        self.teacher_warm_start_summary: dict | None = None
        self._teacher: list = []  # [model] once loaded; a list keeps it out of any module registration

    text_roles = {"teacher_template": ()}  # a different model's teacher: no task text, its own prompt
    text_defaults = {"teacher_template": "{prompt}"}

    @property
    def teacher_model(self):
        return self._teacher[0] if self._teacher else None

    def load_teacher(self, student_model, student_tokenizer, task=None, device=None) -> None:
        """Load (and warm-start, when configured and ``task`` is given) the frozen teacher."""
        source = self.teacher if task is None else self.teacher.for_task(task)
        model, tokenizer = source.load()
        check_same_vocabulary(student_model, student_tokenizer, model, tokenizer)
        if device is not None:
            model.to(device)
        if self.teacher_warm_start is not None and task is not None:
            self.teacher_warm_start_summary = self.teacher_warm_start.run(model, tokenizer, source, task)
        model.eval().requires_grad_(False)
        self._teacher[:] = [model]

    def prepare(self, model, tokenizer, task, device) -> None:
        if not self._teacher:
            self.load_teacher(model, tokenizer, task, device)

    def teacher_scorer(self, scorer: Scorer) -> Scorer:
        if not self._teacher:
            raise RLVRError("OPDCredit has no teacher loaded: fit runs setup first (or call load_teacher)")
        return TeacherScorer(self.teacher_model, scorer)

    def assign(self, rollout: Rollout, scorer: Scorer):
        credit = super().assign(rollout, scorer)
        if self.teacher_warm_start_summary is not None:
            credit.metrics["teacher_warm_start_accuracy"] = float(self.teacher_warm_start_summary["accuracy"])
        return credit
