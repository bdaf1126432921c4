"""Procedural reasoning tasks from ``reasoning-gym``: any of its datasets by name and config.

Problems come from one stream of the dataset (``seed``); item ``j`` belongs to
``test``, ``val`` or ``train`` by a hash of its question and the seed, so the
splits are disjoint by content (two indices that generate the same question
always share a split), deterministic, and independent of each other's size.
The ``index``-th problem of a split is drawn from an RNG seeded by
``(seed, split, index)``, rejecting items of other splits; every split is an
endless stream. (Separate seeds per split would not do: most datasets seed item
``j`` with ``seed + j``, so seed 1 is seed 0 shifted by one.)

A completion's answer is its last ``<answer>...</answer>`` (reasoning-gym's
convention, and the cue of the default prompt), else the text after its last
``answer:``; the dataset's own ``score_answer`` gives the reward (some datasets give
partial credit). Many answers span several lines (the grids of ``rotate_matrix``,
``mini_sudoku``, ``rearc``): the tag keeps all of them, and after ``answer:`` the answer
is as many non-blank lines as the reference has. Outer blank lines and spaces at line
ends are dropped (they are layout, not answer; ``score_answer`` would count them); nothing else is
(a trailing ``.`` is the answer's: ``tests/test_reasoning_gym_gold.py`` scores every dataset's gold).
With ``answers: {kind: number}`` numbers compare as numbers: an answer equal in value to the reference
(``51.0``, ``1,000``, ``\u22123``) is scored as the reference's own text.

Pool size. Problems are drawn from the first ``pool_size`` items of the stream.
By default that is 1,000,000 items, capped by the dataset's own limits: a dataset
whose config accepts fewer (``word_ladder`` allows at most 20,000) gets the largest
size its config accepts, found by bisecting the config's own ``validate``; a dataset
that generates every item when it is built instead of on access (``acre``, about a
millisecond an item, so a million items would take minutes) gets its config's default
size (500). An explicit ``pool_size`` is used as given; one the dataset rejects is an
error that says the largest allowed.
"""

from __future__ import annotations

import random
from typing import Any

from ..core.arithmetic_steps import first_difference, first_wrong_result
from ..core.errors import RLVRError
from ..core.problem import SPLITS, Problem, Verdict, split_of
from ..rewards.answers import AnswerParser, number_value
from .base import Task

RG_ANSWERS = AnswerParser(formats=["tag", "colon"], kind="text", max_words=None)
DEFAULT_TEMPLATE = "{question}\nGive your final answer as <answer>...</answer>.\n"
DEFAULT_SOLUTION = "<answer>{answer}</answer>"
DEFAULT_POOL_SIZE = 1_000_000
# Datasets that generate all their items when built (measured with reasoning-gym 0.1.25: every other
# dataset builds a million-item pool in under 2 s); their default pool is their config's default size.
EAGER_DATASETS = frozenset({"acre"})


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def extract_answer(completion: str, lines: int = 1) -> str | None:
    """The last ``<answer>...</answer>`` content (all its lines), else the first ``lines`` non-blank lines
    after the last ``answer:``, else None (the default ``AnswerParser`` of the task)."""
    return RG_ANSWERS(completion, lines)


def _largest_valid_size(config_cls: type, config: dict[str, Any], seed: int, wanted: int) -> int:
    """The largest ``size <= wanted`` that the dataset's config accepts (its ``validate``), or ``wanted``."""

    def ok(size: int) -> bool:
        try:
            cfg = config_cls(**config, seed=seed, size=size)
            if hasattr(cfg, "validate"):
                cfg.validate()
        except (TypeError, ValueError, AssertionError):
            return False
        return True

    if ok(wanted) or not ok(1):  # no size limit, or a config problem that the build will report
        return wanted
    lo, hi = 1, wanted  # ok(lo), not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


class ReasoningGymTask(Task):
    """A ``reasoning-gym`` dataset as an endless task with disjoint hash splits.

    Args:
        name: dataset name (``reasoning_gym.factory.DATASETS``), e.g. ``leg_counting``.
        config: the dataset's config fields, e.g. ``{min_animals: 1, max_animals: 3}``.
        seed: fixes the item stream and the split assignment.
        test_fraction: share of questions reserved for ``test`` (the same again for ``val``).
        pool_size: items of the stream that problems are drawn from (the dataset's ``size``); None: as
            many as the dataset allows, at most 1,000,000 (see the module).
        template: how a question becomes a prompt; ``{question}`` is replaced.
        solution_template: the worked solution a warm start trains on; ``{answer}`` is replaced. The
            default tag suits a real tokenizer; a vocabulary without ``<``, ``>`` and ``/`` (the in-code
            ``TinyPolicy``'s) cannot write the tag, and uses the ``answer:`` cue instead
            (``" answer:{answer}"``), which ``extract_answer`` reads too.
        max_draws: draws per problem before giving up (a dataset with too few distinct questions
            for a split).
        answers: how a completion's answer is read (default: the ``<answer>`` tag, else ``answer:``,
            any text; a numeric dataset for a model that writes "5 + 9 = 14" can use
            ``{kind: number}``, every format, ``rewards/answers.py``).
    """

    def __init__(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        seed: int = 0,
        test_fraction: float = 0.1,
        pool_size: int | None = None,
        template: str = DEFAULT_TEMPLATE,
        max_draws: int = 1000,
        solution_template: str = DEFAULT_SOLUTION,
        answers: AnswerParser | None = None,
    ) -> None:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS

        if name not in DATASETS:
            raise RLVRError(f"unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
        if not 0 < test_fraction < 0.5:
            raise ValueError("test_fraction must be in (0, 0.5)")
        self.name, self.config, self.seed = name, dict(config or {}), seed
        self.answers = answers or RG_ANSWERS
        self.test_fraction, self.template, self.max_draws = test_fraction, template, max_draws
        if "{answer}" not in solution_template:
            raise RLVRError(f"solution_template must contain {{answer}}, got {solution_template!r}")
        self.solution_template = solution_template
        config_cls = DATASETS[name][1]
        if pool_size is None:
            default = getattr(config_cls, "size", DEFAULT_POOL_SIZE)
            wanted = default if name in EAGER_DATASETS else DEFAULT_POOL_SIZE
            pool_size = _largest_valid_size(config_cls, self.config, seed, wanted)
        elif pool_size < 1:
            raise RLVRError(f"reasoning-gym {name!r}: pool_size must be at least 1, got {pool_size}")
        else:
            allowed = _largest_valid_size(config_cls, self.config, seed, pool_size)
            if allowed < pool_size:
                raise RLVRError(
                    f"reasoning-gym {name!r} allows pool_size at most {allowed}, got {pool_size}; "
                    f"set pool_size <= {allowed} (or leave it unset)"
                )
        self.pool_size = pool_size
        try:
            self._dataset = reasoning_gym.create_dataset(name, **self.config, seed=seed, size=pool_size)
        except (TypeError, ValueError, AssertionError) as err:
            raise RLVRError(f"reasoning-gym {name!r} rejected config {self.config}: {err}") from err

    @property
    def dataset(self):
        """The reasoning-gym dataset. Private underneath: the warm-start cache key is the task's public
        fields, and an object's repr (its memory address) would make that key new in every process."""
        return self._dataset

    def split_of(self, question: str) -> str:
        return split_of(f"{self.seed}:{question}", self.test_fraction)

    def problem(self, split: str, index: int) -> Problem:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        rng = random.Random(f"{self.seed}:{split}:{index}")
        for _ in range(self.max_draws):
            j = rng.randrange(self.pool_size)
            try:
                entry = self._dataset[j]
            except IndexError:  # a dataset that ran out of distinct items (word_ladder): draw again
                continue
            if self.split_of(entry["question"]) == split:
                return Problem(
                    prompt=self.template.format(question=entry["question"]),
                    answer=str(entry["answer"]),
                    solution=self.solution_template.format(answer=entry["answer"]),
                    meta={"entry": entry, "item": j},
                )
        raise RLVRError(
            f"reasoning-gym {self.name!r}: no {split!r} question in {self.max_draws} draws; "
            "the config allows too few distinct questions (widen it or lower test_fraction)"
        )

    def size(self, split: str) -> int | None:
        return None

    def check(self, completion: str, problem: Problem) -> Verdict:
        got = self.answers(completion, lines=len(problem.answer.strip().splitlines()) or 1)
        if got is None:
            return Verdict(0.0, "no answer found")
        value = number_value(got) if self.answers.kind == "number" else None
        if value is not None and value == number_value(problem.answer):
            got = problem.answer  # numbers compare as numbers (51.0 is 51); the dataset scores its own text
        reward = float(self._dataset.score_answer(got, problem.meta["entry"]))
        correct = reward >= 1.0  # reasoning-gym scores partial credit: only a full score is a success
        reward = reward if correct else max(reward, self.answers.reward(False, completion))
        return Verdict(reward, "correct" if correct else f"wrong answer {got[:80]}", correct)

    def first_error(self, completion: str, problem: Problem) -> int | None:
        """Where a failed completion first goes wrong (character offset; None when it is correct).

        Checkable intermediate results first: the first arithmetic equation ``<expr> = <number>`` in
        the completion whose result is wrong (``core.arithmetic_steps.first_wrong_result``: at its first
        wrong digit), whatever the dataset. Then the answer, which ``check`` found wrong: the first character
        where it departs from the reference (its end when it is a proper prefix of it). No answer at all:
        ``len(completion)`` (it ended, or was cut, before answering).
        """
        if self.check(completion, problem).correct:
            return None
        wrong = first_wrong_result(completion)
        if wrong is not None:
            return wrong
        span = self.answers.start(completion, lines=len(problem.answer.strip().splitlines()) or 1)
        if span is None:
            return len(completion)
        reference = _tidy(problem.answer)
        return span + first_difference(completion[span:], reference)

    def extract_answer(self, completion: str) -> str | None:
        """The ``<answer>`` (or ``answer:``) text that ``check`` scores (for ``test/maj@k``)."""
        return self.answers(completion)
