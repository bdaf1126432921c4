"""First errors beyond addition: checkable intermediate results in reasoning-gym completions."""

from __future__ import annotations

import pytest

from lightning_rlvr.core.arithmetic_steps import evaluate, first_difference, first_wrong_result
from lightning_rlvr.core.problem import Problem


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0-4=-4;-4-8=-12;", None),
        ("0-4=-4;-4-8=-13;", 14),  # the '3' of -13
        ("0-4=-5;-5-8=-13;", 5),  # the first wrong one wins, even if later steps follow from it
        ("2*(3+4)=14, 14/4=3.5", None),
        ("2 x 3 = 7", 8),
        ("7+5=1", 4),  # a written prefix of the value: its last character is where it stops too early
        ("3+4=17", 4),
        ("step 3: the answer is 12", None),  # nothing checkable
        ("1/0=3", None),  # not a value: skipped, not an error
        ("v2+3=5", None),  # '2' belongs to a word: not an equation
    ],
)
def test_first_wrong_result_points_at_the_first_wrong_digit(text, expected):
    assert first_wrong_result(text) == expected


def test_exact_arithmetic_and_prefixes():
    assert evaluate("0.1+0.2") == evaluate("0.3") and evaluate("1/3*3") == 1
    assert evaluate("__import__('os')") is None and evaluate("2**10") is None
    assert first_difference("-12", "-13") == 2 and first_difference("", "x") == 0


@pytest.fixture(scope="module")
def arithmetic():
    from lightning_rlvr.tasks.reasoning_gym import ReasoningGymTask

    config = {
        "min_terms": 3,
        "max_terms": 3,
        "min_digits": 1,
        "max_digits": 1,
        "operators": ["+", "-"],
        "allow_parentheses": False,
        "allow_negation": False,
    }
    return ReasoningGymTask("basic_arithmetic", config, template="{question}", pool_size=100)


@pytest.mark.parametrize(
    "completion,expected",
    [
        (" 0-4=-4;-4-8=-12; answer:-12", None),  # correct
        (" 0-4=-4;-4-8=-13; answer:-13", 15),  # a wrong intermediate result: its wrong digit
        (" 0-4=-5;-4-8=-12; answer:-12", None),  # right answer, wrong step: correct is correct
        (" 0-4=-4;-4-8=-12; answer:-11", 27),  # every step right, the answer's second digit wrong
        (" answer:-14", 10),  # no steps: the answer's first wrong character
        (" answer:-1", 10),  # a proper prefix of the answer: its end
        (" answer: 12", 9),  # the sign is missing: the first character of the answer
        (" 0-4=-4;-4-8=", 13),  # no answer: the end
        ("", 0),
        (" <answer>-13</answer>", 11),
    ],
)
def test_reasoning_gym_first_error(arithmetic, completion, expected):
    problem = Problem("Calculate 0 - 4 - 8.", "-12", meta={"entry": {"answer": "-12", "metadata": {}}})
    assert arithmetic.first_error(completion, problem) == expected
    if expected is not None and expected < len(completion):
        assert completion[:expected] in (
            " 0-4=-4;-4-8=-1",
            " 0-4=-4;-4-8=-12; answer:-1",
            " answer:-1",
            " answer: ",
            " <answer>-1",
        )


# ---------------------------------------------------------------------------- episodes
def _echo(max_turns: int):
    from tests.toy_env import EchoWords

    env = EchoWords(max_turns=max_turns)
    problem = Problem("say go", "won", solution="go\nup", meta={"words": ["go", "up"]})
    return env, problem


@pytest.mark.parametrize(
    "actions,turns,expected",
    [
        (["go", "left", "left", "left"], 4, 3),  # two spare turns: the third wasted one is fatal
        (["left", "left", "left"], 4, 2),  # after it one turn is left for two words
        (["left", "go", "left", "up"], 4, None),  # won on the limit: nothing fatal
        (["up", "up", "up", "up"], 4, 2),
        (["left"], 2, 0),  # no spare turn at all: the first wasted one is fatal
        (["go", "up"], 2, None),
    ],
)
def test_the_first_fatal_action_is_the_first_after_which_no_plan_wins_in_time(actions, turns, expected):
    from lightning_rlvr.experiments.credit_lab.first_error import first_fatal_action, winnable

    env, problem = _echo(turns)
    assert first_fatal_action(env, problem, actions, turns) == expected
    if expected is not None:  # monotone: never winnable again after the fatal action
        assert not any(winnable(env, problem, actions[: k + 1], turns) for k in range(expected, len(actions)))
        assert all(winnable(env, problem, actions[:k], turns) for k in range(expected + 1))


def test_episode_first_errors_point_at_the_fatal_actions_first_token():
    from lightning_rlvr.collect.episodes import run_episodes
    from lightning_rlvr.core.rollout import turn_starts
    from lightning_rlvr.envs.vocab import build_word_tokenizer, word_vocabulary
    from lightning_rlvr.experiments.credit_lab.first_error import episode_first_errors

    tok = build_word_tokenizer(word_vocabulary(["say go up left no won"]))
    env, problem = _echo(3)
    answers = [["go", "left"], ["left", "left"], ["left", "go"]]  # row 0: go left left; row 1: left left go

    def generate(contexts):
        turn = generate.calls
        generate.calls += 1
        return [tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for a in answers[turn]]

    generate.calls = 0
    r = run_episodes(env, [problem], 2, generate, tok, observation_format=" {observation}\n")
    assert r.correct.tolist() == [False, False]
    errors = episode_first_errors(env, r, tok)
    starts = [[0, *turn_starts(r.policy_mask[i, : int(r.lengths[i])].tolist())] for i in range(2)]
    # row 0: go (1 turn left after the next for 'up') left -> 1 turn left, needs 1: fine; left -> 0: fatal
    # row 1: left -> 2 turns left for two words: fine; left -> 1 left for two: fatal (its second action)
    assert errors == [starts[0][2], starts[1][1]]
