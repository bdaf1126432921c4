"""A task is a source of prompts plus a verifier.

``Task.problem(split, index)`` is deterministic, so the training stream can
resume at any step and the splits never change under a fixed seed.
``Task.check`` scores a completion; ``safe_check`` wraps it so that a verifier
that raises gives reward 0 and a counted error instead of stopping the run.
"""

from __future__ import annotations

from typing import Any

from ..core import stop
from ..core.errors import RLVRError
from ..core.problem import Problem, Verdict
from ..core.rollout import Rollout
from ..rewards.answers import AnswerParser


class Task:
    """Base class. Subclasses implement ``problem``, ``size`` and ``check``.

    A task that reads final answers sets ``answers`` (the shared ``AnswerParser``); its rollouts then
    log ``train/format_ok``, the share of completions that give their answer in a marker format.
    """

    answers: AnswerParser | None = None

    # Texts for this task's plain layout (no prompt format) by role (what the text is for, never which
    # method reads it), e.g. {PEER_CONTEXT: "{prompt} | {reference} | {prompt}"}: text settings a method
    # file leaves unset come from here (lightning_rlvr/core/text_roles.py, credit/texts.py). Empty: the
    # methods' own (English) defaults.
    role_texts: dict[str, Any] = {}

    def problem(self, split: str, index: int) -> Problem:
        """The ``index``-th problem of ``split``; for infinite splits any index is valid."""
        raise NotImplementedError

    def size(self, split: str) -> int | None:
        """Number of problems in ``split``, or None for an endless procedural stream."""
        raise NotImplementedError

    def check(self, completion: str, problem: Problem) -> Verdict:
        """Score ``completion``; it may be malformed, and must then get a low reward, not raise."""
        raise NotImplementedError

    def extract_answer(self, completion: str) -> str | None:
        """The final answer ``completion`` commits to, as a comparable string, or None.

        Used by ``test/maj@k`` (majority vote over a prompt's samples): two completions vote
        for the same answer when these strings are equal, so a task should return a canonical
        form (e.g. ``"042"`` -> ``"42"``). The default returns None, meaning the task has no
        notion of a final answer (code, free text): maj@k is then not reported for it.
        """
        return None

    def check_batch(self, completions: list[str], problems: list[Problem]) -> list[tuple[Verdict, bool]]:
        """Score many completions (``problems[i]`` belongs to ``completions[i]``): ``(verdict, raised)`` each.

        The default loops ``safe_check``; tasks with slow verifiers (code execution) override it to
        run in parallel. Either way one raising completion gives reward 0 and ``raised=True`` while
        the rest of the batch is still scored.
        """
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions but {len(problems)} problems")
        return [safe_check(self, c, p) for c, p in zip(completions, problems)]

    def first_error(self, completion: str, problem: Problem) -> int | None:
        """Character offset in ``completion`` where a failed completion first goes wrong, or None.

        Defined only for tasks that can check a derivation step by step (procedural tasks with a
        worked solution): the offset of the first character after which no correct derivation
        in the task's format can continue. ``len(completion)`` means the text itself was right
        but stopped (the error is the end of the completion: its EOS). None when the completion
        is correct, or when the task cannot tell (the default).
        """
        return None

    def prompt_template(self) -> str:
        """How a question becomes this task's prompt, ``{question}`` marking it (``export`` bakes it, with
        the prompt format, into a chat template for tokenizers without one)."""
        return getattr(self, "template", "{question}")

    def policy_token_budget(self, max_new_tokens: int) -> int:
        """The most tokens the policy can write in one row: the constant of ``loss_agg: constant``."""
        return max_new_tokens

    def rollout_metrics(self, rollout: Rollout) -> dict[str, float]:
        """Extra ``train/<name>`` metrics of a rollout of this task (environments: turns, success)."""
        if self.answers is None or not rollout.completions:
            return {}
        ok = [self.answers.formatted(c) for c in rollout.completions]
        return {"format_ok": sum(ok) / len(ok)}

    def worked_example(self, problem: Problem, tokenizer, render=None) -> tuple[list[int], list[int]]:
        """The warm start's sequence of ``problem``: token ids and labels (-100 where no loss applies).

        The prompt as the rollouts show it, then the worked solution and EOS, with labels on the
        solution only. An ``Environment`` returns the expert's whole episode instead.
        """
        if problem.solution is None:
            raise RLVRError(f"{type(self).__name__} has no worked solutions; disable model.warm_start")
        text = render(problem.prompt) if render else problem.prompt  # as the rollouts will show it
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        completion = tokenizer(problem.solution, add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id
        ]
        return prompt + completion, [-100] * len(prompt) + completion

    def train_problem(self, step_index: int) -> Problem:
        """The problem at position ``step_index`` of the training stream (cycles a finite split)."""
        n = self.size("train")
        return self.problem("train", step_index if n is None else step_index % n)


def safe_check(task: Task, completion: str, problem: Problem) -> tuple[Verdict, bool]:
    """``task.check`` that never raises: returns (verdict, raised). A safe point for a stop signal first
    (``core/stop.py``), so a batch of slow verifiers ends between completions, in parallel ones too."""
    stop.check("while verifying completions")
    try:
        verdict = task.check(completion, problem)
        reward = float(verdict.reward)
        if reward != reward:  # NaN
            return Verdict(0.0, "verifier returned NaN"), True
        return Verdict(reward, verdict.feedback, verdict.correct), False
    except Exception as err:  # noqa: BLE001 - any verifier failure is a zero reward, counted
        return Verdict(0.0, f"verifier error: {type(err).__name__}"), True


def safe_extract_answer(task: Task, completion: str) -> str | None:
    """``task.extract_answer`` that never raises: a failing extractor is a sample without a vote."""
    try:
        return task.extract_answer(completion)
    except Exception:  # noqa: BLE001 - like a raising verifier, it must not stop the evaluation
        return None
