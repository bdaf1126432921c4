"""Math word problems and competition math from local files, scored by ``math-verify``.

GSM8K rows (``question``, ``answer`` = worked solution ending in ``#### 42``)
and MATH rows (``problem``, ``solution`` with a ``\\boxed{}``, optionally a
plain ``answer``) load through ``JsonlTask``'s column mapping. The reference is
the final answer inside the answer cell (``lightning_rlvr.rewards.math.reference_answer``);
a row whose final answer is missing or empty is an error naming the file and row.
A completion earns reward 1 when its answer (the shared ``AnswerParser``, ``kind: math``: tag,
``\\boxed{}``, ``####``, ``answer:``, "the answer is", else what ``math-verify`` finds) equals the
reference symbolically: ``0.5``, ``1/2`` and ``\\frac{1}{2}`` all match. Answers with several parts are
compared whole: ``(1, 5)`` is not ``(3, 5)``, ``[1, 5]`` is not ``(1, 5)``, ``2, 3, 5`` is not
``3, 5``, while the sets ``5, 3`` and ``\\{3, 5\\}`` equal ``3, 5``.
"""

from __future__ import annotations

from ..core.problem import SPLITS, Problem, Verdict
from ..rewards.answers import AnswerParser
from ..rewards.math import MATH_ANSWERS, completion_answer, math_reward, reference_answer
from .jsonl import JsonlTask, check_rows


class MathTask(JsonlTask):
    """Math problems from local JSONL / JSON / CSV / parquet, checked by answer equivalence.

    Args:
        train_file, test_file, val_file: rows per split (``val`` defaults to ``test``; ``train`` is
            needed by ``fit`` only).
        question_field: column with the problem (GSM8K: ``question``; MATH: ``problem``).
        answer_field: column with the answer or a worked solution that ends in it
            (GSM8K: ``answer`` with ``#### 42``; MATH: ``answer``, or ``solution`` with ``\\boxed{}``).
        solution_field: optional column with a worked solution (used by the warm start).
        template: how a question becomes a prompt; ``{question}`` is replaced.
        answers: how a completion's answer is read (default: ``AnswerParser(kind="math")``, every format;
            its ``last`` fallback is the list the last number ends, else ``math-verify``'s reading).
    """

    def __init__(
        self,
        train_file: str | None = None,
        test_file: str | None = None,
        val_file: str | None = None,
        question_field: str = "question",
        answer_field: str = "answer",
        solution_field: str | None = None,
        template: str = "{question}",
        answers: AnswerParser | None = None,
    ) -> None:
        super().__init__(
            train_file,
            test_file,
            val_file,
            question_field,
            answer_field,
            solution_field,
            template,
            answers or MATH_ANSWERS,
        )
        final = lambda field, cell: reference_answer(cell) if field == answer_field else cell
        for split in SPLITS:
            check_rows(self.files[split], self._rows[split], [answer_field], value=final)

    def problem(self, split: str, index: int) -> Problem:
        p = super().problem(split, index)
        p.meta["answer_text"] = p.answer
        p.answer = reference_answer(p.answer)
        return p

    def check(self, completion: str, problem: Problem) -> Verdict:
        reward, feedback = math_reward(completion, problem.answer, self.answers)
        return Verdict(reward, feedback, feedback == "correct")

    def extract_answer(self, completion: str) -> str | None:
        """The answer ``check`` takes from a completion (last ``\\boxed{}``, ``####`` or ``answer:``).

        Votes compare these strings as written, so ``1/2`` and ``0.5`` count as different answers.
        """
        return completion_answer(completion, self.answers)
