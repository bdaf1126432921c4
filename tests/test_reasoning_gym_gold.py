"""Every reasoning-gym dataset: its gold answer, wrapped as the prompt asks, scores what its own scorer gives.

The parser may drop only what the answer format added (the ``<answer>`` tags and the whitespace around
the answer); the text a dataset's ``score_answer`` compares is never changed (a trailing ``.`` stays).
Every dataset in reasoning-gym's registry is built offline with its default config; one that cannot be
is listed in ``UNBUILDABLE`` with the reason, so none is left out silently.
"""

from __future__ import annotations

import time

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.tasks import ReasoningGymTask

ITEMS = 3  # problems per dataset: the parser's job is the same on each, and all ~100 datasets must stay fast
UNBUILDABLE = {"composite": "it mixes other datasets and has no default: its config must name them"}
WRAPS = ["<answer>{gold}</answer>", "Let me think.\n<answer>\n{gold}\n</answer>\nDone."]


def _build(name: str) -> ReasoningGymTask | str:
    try:
        return ReasoningGymTask(name, seed=1, pool_size=50)
    except (RLVRError, TypeError, ValueError, AssertionError) as err:
        return f"{type(err).__name__}: {err}"


def test_every_datasets_gold_answer_scores_as_its_own_scorer_scores_it():
    from reasoning_gym.factory import DATASETS

    start, unbuilt, mismatches, full = time.perf_counter(), {}, [], 0
    for name in sorted(DATASETS):
        task = _build(name)
        if isinstance(task, str):
            unbuilt[name] = task
            continue
        for i in range(ITEMS):
            p = task.problem("train", i)
            entry = p.meta["entry"]
            own = float(task.dataset.score_answer(p.answer, entry))
            full += own == 1.0
            for wrap in WRAPS:
                got = task.check(wrap.format(gold=p.answer), p).reward
                if got != own:
                    mismatches.append((name, p.answer[:60], own, got))
    assert set(unbuilt) == set(UNBUILDABLE), unbuilt
    assert not mismatches, mismatches
    assert full >= 0.9 * ITEMS * (len(DATASETS) - len(UNBUILDABLE))  # the golds are mostly full marks
    assert time.perf_counter() - start < 60  # measured 27 s on a shared 2-core machine


@pytest.mark.parametrize(
    "gold", ["8 or 1.", "This, too, is one of Mr.", "  a  b ", "$5", "**bold**", "x.\ny.", ""], ids=repr
)
def test_the_tag_keeps_the_answer_text_as_written(gold):
    task = ReasoningGymTask("leg_counting", seed=3, pool_size=50)
    lines = len(gold.strip().splitlines())
    assert task.answers(f"so <answer>{gold}</answer>", lines) == "\n".join(
        line.rstrip() for line in gold.strip().splitlines()
    )
