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
convention), else the text after its last ``answer:``; the dataset's own
``score_answer`` gives the reward (some datasets give partial credit).
"""

from __future__ import annotations

import random
import re
from typing import Any

from lightning_rlvr.errors import RLVRError
from lightning_rlvr.tasks.base import SPLITS, Problem, Task, Verdict, split_of

_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
DEFAULT_TEMPLATE = "{question}\nGive your final answer as <answer>...</answer>.\n"


def extract_answer(completion: str) -> str | None:
    """The last ``<answer>...</answer>`` content, else the line after the last ``answer:``, else None."""
    tags = _TAG.findall(completion)
    if tags:
        return tags[-1].strip()
    if "answer:" in completion:
        tail = completion.rsplit("answer:", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    return None


class ReasoningGymTask(Task):
    """A ``reasoning-gym`` dataset as an endless task with disjoint hash splits.

    Args:
        name: dataset name (``reasoning_gym.factory.DATASETS``), e.g. ``leg_counting``.
        config: the dataset's config fields, e.g. ``{min_animals: 1, max_animals: 3}``.
        seed: fixes the item stream and the split assignment.
        test_fraction: share of questions reserved for ``test`` (the same again for ``val``).
        pool_size: items of the stream that problems are drawn from (the dataset's ``size``).
        template: how a question becomes a prompt; ``{question}`` is replaced.
        max_draws: draws per problem before giving up (a dataset with too few distinct questions
            for a split).
    """

    def __init__(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        seed: int = 0,
        test_fraction: float = 0.1,
        pool_size: int = 1_000_000,
        template: str = DEFAULT_TEMPLATE,
        max_draws: int = 1000,
    ) -> None:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS

        if name not in DATASETS:
            raise RLVRError(f"unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
        if not 0 < test_fraction < 0.5:
            raise ValueError("test_fraction must be in (0, 0.5)")
        self.name, self.config, self.seed = name, dict(config or {}), seed
        self.test_fraction, self.pool_size, self.template, self.max_draws = (
            test_fraction, pool_size, template, max_draws,
        )  # fmt: skip
        try:
            self.dataset = reasoning_gym.create_dataset(name, **self.config, seed=seed, size=pool_size)
        except (TypeError, ValueError, AssertionError) as err:
            raise RLVRError(f"reasoning-gym {name!r} rejected config {self.config}: {err}") from err

    def split_of(self, question: str) -> str:
        return split_of(f"{self.seed}:{question}", self.test_fraction)

    def problem(self, split: str, index: int) -> Problem:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        rng = random.Random(f"{self.seed}:{split}:{index}")
        for _ in range(self.max_draws):
            j = rng.randrange(self.pool_size)
            entry = self.dataset[j]
            if self.split_of(entry["question"]) == split:
                return Problem(
                    prompt=self.template.format(question=entry["question"]),
                    answer=str(entry["answer"]),
                    solution=f"<answer>{entry['answer']}</answer>",
                    meta={"entry": entry, "item": j},
                )
        raise RLVRError(
            f"reasoning-gym {self.name!r}: no {split!r} question in {self.max_draws} draws; "
            "the config allows too few distinct questions (widen it or lower test_fraction)"
        )

    def size(self, split: str) -> int | None:
        return None

    def check(self, completion: str, problem: Problem) -> Verdict:
        got = extract_answer(completion)
        if got is None:
            return Verdict(0.0, "no <answer> found")
        reward = float(self.dataset.score_answer(got, problem.meta["entry"]))
        return Verdict(reward, "correct" if reward >= 1.0 else f"wrong answer {got[:80]}")

    def extract_answer(self, completion: str) -> str | None:
        """The ``<answer>`` (or ``answer:``) text that ``check`` scores (for ``test/maj@k``)."""
        return extract_answer(completion)
