"""reasoning-gym: any dataset by name and config, disjoint deterministic splits, its own scorer."""

from __future__ import annotations

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.tasks import ReasoningGymTask, safe_check
from lightning_rlvr.tasks.reasoning_gym import extract_answer


@pytest.fixture(scope="module")
def legs():
    return ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=3)


def test_reference_answers_score_one_and_wrong_ones_zero(legs):
    for i in range(10):
        p = legs.problem("train", i)
        assert legs.check(p.solution, p).reward == 1.0
        assert legs.check(f"<answer>{int(p.answer) + 1}</answer>", p).reward == 0.0
        assert legs.check(f"thinking... answer: {p.answer}", p).reward == 1.0


def test_splits_are_deterministic_and_disjoint(legs):
    again = ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=3)
    assert [legs.problem("test", i).prompt for i in range(10)] == [
        again.problem("test", i).prompt for i in range(10)
    ]
    qs = {s: {legs.problem(s, i).prompt for i in range(150)} for s in ("train", "val", "test")}
    assert not qs["train"] & qs["test"] and not qs["train"] & qs["val"] and not qs["val"] & qs["test"]
    other = ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=4)
    assert [other.problem("test", i).prompt for i in range(10)] != [
        legs.problem("test", i).prompt for i in range(10)
    ]


def test_another_dataset_by_name_and_config():
    task = ReasoningGymTask(
        "basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    )
    p = task.problem("val", 0)
    assert task.check(p.solution, p).reward == 1.0


def test_a_solution_template_the_tiny_vocabulary_can_write_round_trips():
    """The in-code tokenizer has no '<', '>' or '/': a warm start on the tag would teach '<unk>answer<unk>',
    which decodes to 'answer12answer' and scores 0; the 'answer:' cue survives the vocabulary."""
    from lightning_rlvr.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    config = {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}
    task = ReasoningGymTask(
        "basic_arithmetic", config, template="{question}", solution_template=" answer:{answer}"
    )
    for i in range(8):
        p = task.problem("train", i)
        assert p.solution == f" answer:{p.answer}"
        decoded = tok.decode(tok(p.solution, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
        assert decoded == p.solution and task.check(decoded, p).reward == 1.0
        tagged = ReasoningGymTask("basic_arithmetic", config).problem("train", i).solution
        lost = tok.decode(tok(tagged, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
        assert task.check(lost, p).reward == 0.0  # why the default tag does not suit that vocabulary
    with pytest.raises(RLVRError, match="solution_template must contain"):
        ReasoningGymTask("basic_arithmetic", config, solution_template="answer:")


def test_the_warm_start_cache_key_is_the_same_for_the_same_task():
    """The key hashes the task's public fields; the dataset object (repr with a memory address) is not one."""
    from lightning_rlvr.models import TinyPolicy
    from lightning_rlvr.warmstart import WarmStart

    config = {"min_animals": 1, "max_animals": 3}
    keys = {WarmStart().key(TinyPolicy(), ReasoningGymTask("leg_counting", config, seed=3)) for _ in range(2)}
    assert len(keys) == 1
    other = WarmStart().key(TinyPolicy(), ReasoningGymTask("leg_counting", config, seed=4))
    assert other not in keys


def test_unknown_dataset_and_bad_config_are_clear_errors():
    with pytest.raises(RLVRError, match="unknown reasoning-gym dataset 'no_such'"):
        ReasoningGymTask("no_such")
    with pytest.raises(RLVRError, match="rejected config"):
        ReasoningGymTask("leg_counting", {"no_such_field": 1})


@pytest.mark.parametrize("completion", ["", "<answer>", "<answer></answer>", "answer:", "🙂" * 50, None])
def test_verifier_never_raises_on_malformed_completions(legs, completion):
    verdict, _ = safe_check(legs, completion, legs.problem("train", 0))
    assert verdict.reward == 0.0


def test_answer_extraction():
    assert extract_answer("a <answer>1</answer> b <answer> 2 </answer>") == "2"
    assert extract_answer("so answer: 7\nmore") == "7"
    assert extract_answer("nothing") is None


def test_multi_line_answer_extraction():
    grid = "1 2 3\n4 5 6\n7 8 9"
    assert extract_answer(f"<answer>{grid}</answer>") == grid
    assert extract_answer(f"so\n<answer>\n\n{grid}\n\n</answer> done") == grid
    assert (
        extract_answer("<answer>\n1 2 3  \n4 5 6\t\n7 8 9 \n</answer>") == grid
    )  # spaces at line ends dropped
    assert extract_answer(f"<answer>0</answer> then <answer>{grid}</answer>") == grid
    assert extract_answer(f"answer:\n{grid}\nHope this helps.", lines=3) == grid
    assert extract_answer(f"Answer: {grid}", lines=3) == grid
    assert extract_answer("answer:\n\n1 2 3\n\n4 5 6\n7 8 9\nmore", lines=3) == grid  # blank lines skipped
    assert extract_answer(f"answer: {grid}") == "1 2 3"  # a one-line reference takes one line
    assert extract_answer("answer:\n1 2 3", lines=3) == "1 2 3"


@pytest.mark.parametrize("name", ["rotate_matrix", "mini_sudoku", "manipulate_matrix", "binary_matrix"])
def test_grid_answers_are_scored_whole(name):
    task = ReasoningGymTask(name, seed=1)
    grids = [p for p in map(lambda i: task.problem("train", i), range(20)) if "\n" in p.answer][:3]
    assert len(grids) == 3
    for p in grids:
        rows = p.answer.splitlines()
        assert task.check(p.solution, p).reward == 1.0
        assert task.check(f"Thinking...\n<answer>\n{p.answer}\n</answer>", p).reward == 1.0
        assert task.check(f"Thinking...\nAnswer:\n{p.answer}\nThat is all.", p).reward == 1.0
        spaced = "\n".join(r + "  " for r in rows)
        assert task.check(f"<answer>{spaced}</answer>", p).reward == 1.0
        assert task.check(f"<answer>{rows[0]}</answer>", p).reward < 1.0
        assert task.check(f"answer: {rows[0]}", p).reward < 1.0
        wrong = "\n".join(rows[:-1] + [rows[-1][::-1] + " x"])
        assert task.check(f"<answer>{wrong}</answer>", p).reward < 1.0


def test_pool_size_respects_each_datasets_limits():
    assert ReasoningGymTask("leg_counting").pool_size == 1_000_000
    ladder = ReasoningGymTask("word_ladder", seed=2)  # its config rejects sizes above 20,000
    assert ladder.pool_size == 20_000 and len(ladder.dataset) == 20_000
    p = ladder.problem("train", 0)
    assert ladder.check(p.solution, p).reward == 1.0
    assert ReasoningGymTask("word_ladder", pool_size=300).pool_size == 300
    with pytest.raises(RLVRError, match="'word_ladder' allows pool_size at most 20000, got 20001"):
        ReasoningGymTask("word_ladder", pool_size=20_001)
    acre = ReasoningGymTask("acre")  # builds every item up front: its own default size
    assert acre.pool_size == 500
    p = acre.problem("test", 0)
    assert acre.check(p.solution, p).reward == 1.0
    with pytest.raises(RLVRError, match="pool_size must be at least 1"):
        ReasoningGymTask("leg_counting", pool_size=0)
    with pytest.raises(RLVRError, match="rejected config"):  # a config error is not mistaken for a size limit
        ReasoningGymTask("word_ladder", {"max_word_length": 9})
