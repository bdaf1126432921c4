"""The environment seam and the multi-turn episode runner, on a small in-test game (no game library)."""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr.collect.episodes import action_text, engine_generate, expert_rollout, run_episodes
from lightning_rlvr.core.problem import Problem, Verdict
from lightning_rlvr.core.rollout import Rollout, concat_rollouts, policy_tokens
from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.envs.base import Environment, safe_step
from lightning_rlvr.envs.vocab import TextPolicy, build_word_tokenizer, word_vocabulary


class SayEnv(Environment):
    """Say the words of ``problem.meta['words']`` in order; a wrong word gets 'no' and costs the turn."""

    def __init__(self, max_turns: int = 4, explode_on: str | None = None) -> None:
        self.max_turns = max_turns
        self.explode_on = explode_on
        self._todo: list[str] = []

    def problem(self, split: str, index: int) -> Problem:
        words = [["go", "up"], ["go"], ["up", "go", "up"]][index % 3]
        return Problem(prompt="", answer="", solution="\n".join(words), meta={"words": words})

    def size(self, split: str) -> int:
        return 3

    def reset(self, problem: Problem) -> str:
        self._todo = list(problem.meta["words"])
        return f"say {self._todo[0]}"

    def step(self, action: str):
        if action == self.explode_on:
            raise ValueError("boom")
        if action != self._todo[0]:
            return "no", False, None
        self._todo = self._todo[1:]
        if not self._todo:
            return "done", True, Verdict(1.0, "all said")
        return f"say {self._todo[0]}", False, None


@pytest.fixture(scope="module")
def tok():
    return build_word_tokenizer(word_vocabulary(["say go up no done", "go", "up", "no"]))


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def scripted(tok, answers):
    """A generate callable that answers from ``answers[call][k]`` and records every call's contexts."""
    calls = []

    def generate(contexts):
        calls.append([list(c) for c in contexts])
        return [ids(tok, a) + [tok.eos_token_id] for a in answers[len(calls) - 1]]

    return generate, calls


def test_episode_layout_masks_turns_and_verdicts(tok):
    env = SayEnv(max_turns=3)
    problems = [env.problem("train", 0), env.problem("train", 1)]  # words: go up | go
    # group_size 2: rows 0,1 play problem 0; rows 2,3 play problem 1. answers[turn][k]: k-th live row.
    answers = [["go", "up", "go", "up"], ["up", "go", "up"], ["go", "go"]]
    generate, calls = scripted(tok, answers)
    r = run_episodes(env, problems, 2, generate, tok, observation_format=" {observation}\n")
    # One call per turn over every live episode: 4 rows, then 3 (row 2 won at turn 0), then 2.
    assert [len(c) for c in calls] == [4, 3, 2]
    assert r.rewards.tolist() == [1.0, 0.0, 1.0, 1.0]
    assert r.correct.tolist() == [True, False, True, True]
    assert r.feedback[0] == "all said" and "turn limit (3)" in r.feedback[1]
    eos = tok.eos_token_id
    # Row 0: "go"<eos> " say up\n" then "up"<eos> (won: the final observation is not appended).
    obs = ids(tok, " say up\n")
    row0 = ids(tok, "go") + [eos] + obs + ids(tok, "up") + [eos]
    assert r.completion_tokens(0).tolist() == row0
    assert r.completion_mask[0].sum() == len(row0) and r.completion_mask[0, len(row0) :].sum() == 0
    assert r.policy_mask[0, : len(row0)].tolist() == [1, 1] + [0] * len(obs) + [1, 1]
    assert r.turn_index[0, : len(row0)].tolist() == [0] * (2 + len(obs)) + [1, 1]
    assert (r.turn_index[0, len(row0) :] == -1).all() and (r.policy_mask[0, len(row0) :] == 0).all()
    # Row 2 won on its first action: two tokens, one turn.
    assert r.completion_tokens(2).tolist() == ids(tok, "go") + [eos]
    assert r.turn_index[2, :2].tolist() == [0, 0]
    # Row 1 said up (no), go (say up), go (no): three turns, its own tokens only in policy_tokens.
    assert int(r.turn_index[1].max()) == 2
    assert policy_tokens(r, 1).tolist() == [*ids(tok, "up"), eos, *ids(tok, "go"), eos, *ids(tok, "go"), eos]
    no = ids(tok, " no\n")
    assert r.completion_tokens(1).tolist() == [
        *ids(tok, "up"),
        eos,
        *no,
        *ids(tok, "go"),
        eos,
        *obs,
        *ids(tok, "go"),
        eos,
    ]
    # Contexts are the rendered first observation plus everything so far.
    assert calls[1][0] == ids(tok, "say go") + ids(tok, "go") + [eos] + obs
    assert r.prompt_tokens(3).tolist() == ids(tok, "say go")
    assert r.group.tolist() == [0, 0, 1, 1] and r.completions[2] == "go"


def test_action_text_takes_the_first_line_without_special_tokens(tok):
    assert action_text(tok, ids(tok, "go up\nsay") + [tok.eos_token_id]) == "go up"
    assert action_text(tok, [tok.eos_token_id]) == ""
    assert action_text(tok, ids(tok, "\n\n up")) == "up"


@pytest.mark.parametrize("max_turns", [1, 2, 3])
def test_turn_limit_ends_episodes_with_the_limit_verdict(tok, max_turns):
    env = SayEnv()
    generate, calls = scripted(tok, [["no"]] * 3)
    r = run_episodes(env, [env.problem("train", 2)], 1, generate, tok, max_turns=max_turns)
    assert len(calls) == max_turns
    assert r.rewards.tolist() == [0.0] and r.correct.tolist() == [False]
    assert int(r.turn_index[0].max()) == max_turns - 1
    assert int(r.policy_mask.sum()) == 2 * max_turns  # "no" + eos per turn
    assert int(r.completion_mask.sum()) == 2 * max_turns + len(ids(tok, "no\n")) * (max_turns - 1)


def test_long_actions_are_cut_and_a_full_context_ends_the_episode(tok):
    env = SayEnv()
    generate, calls = scripted(tok, [["go go go go"]] * 4)
    r = run_episodes(env, [env.problem("train", 1)], 1, generate, tok, max_new_tokens_per_turn=3)
    assert policy_tokens(r, 0).tolist() == ids(tok, "go go go") * 4  # cut to 3 tokens: never "go" alone
    assert r.rewards.tolist() == [0.0]
    generate, calls = scripted(tok, [["up"]] * 4)
    r = run_episodes(env, [env.problem("train", 1)], 1, generate, tok, max_context_tokens=3)
    assert len(calls) == 1 and "turn limit" in r.feedback[0]  # 2 prompt + 2 action tokens >= 3


def test_an_environment_that_raises_loses_the_episode_but_not_the_batch(tok):
    env = SayEnv(explode_on="up")
    generate, _ = scripted(tok, [["up", "go"], ["go"], ["go"], ["go"]])
    r = run_episodes(env, [env.problem("train", 0)], 2, generate, tok)
    assert r.rewards.tolist() == [0.0, 0.0]  # row 1 said "go" then "go": not won within the limit
    assert r.feedback[0].startswith("environment error: ValueError")
    assert "turn limit" in r.feedback[1]
    obs, done, verdict = safe_step(env, "up")
    assert done and verdict.reward == 0.0 and not verdict.correct and "boom" in obs


def test_generate_must_answer_every_context(tok):
    env = SayEnv()
    with pytest.raises(ValueError, match="2 contexts"):
        run_episodes(env, [env.problem("train", 0)], 2, lambda c: [[1]], tok)


def test_check_replays_lines_and_solutions_win():
    env = SayEnv()
    for i in range(3):
        p = env.problem("train", i)
        assert env.check(p.solution, p).correct
        assert env.check("\n\n" + p.solution + "\n", p).reward == 1.0
    p = env.problem("train", 2)
    assert env.check("up\ngo", p).reward == 0.0  # stopped early: the turn-limit verdict
    assert env.check("go\ngo\ngo\ngo", p).reward == 0.0


def rollout_of(n, t, policy):
    ids_ = torch.arange(n * t).view(n, t)
    return Rollout(
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        completion_ids=ids_,
        completion_mask=torch.ones(n, t, dtype=torch.long),
        group=torch.arange(n),
        problems=[Problem("p", "a") for _ in range(n)],
        completions=["c"] * n,
        pad_id=0,
        eos_id=1,
        policy_mask=policy,
        turn_index=None if policy is None else torch.zeros(n, t, dtype=torch.long),
    )


def test_rollout_carries_policy_mask_and_turns_through_select_and_concat():
    multi = rollout_of(2, 3, torch.tensor([[1, 0, 1], [1, 1, 0]]))
    multi.turn_index = torch.tensor([[0, 0, 1], [0, 0, 0]])
    single = rollout_of(1, 2, None)
    sub = multi.index_select(torch.tensor([1]))
    assert sub.policy_mask.tolist() == [[1, 1, 0]] and sub.turn_index.tolist() == [[0, 0, 0]]
    both = concat_rollouts([multi, single])
    # The single-turn rollout is the one-turn case: all its tokens are the policy's, turn 0; padding -1.
    assert both.policy_mask.tolist() == [[1, 0, 1], [1, 1, 0], [1, 1, 0]]
    assert both.turn_index.tolist() == [[0, 0, 1], [0, 0, 0], [0, 0, -1]]
    assert concat_rollouts([single, rollout_of(1, 1, None)]).policy_mask is None


@pytest.mark.parametrize(
    "text", ["take red potato from counter", "Score: 3/4 (12%)\n  ok", "-= Kitchen =-\nYou see a fridge."]
)
def test_word_tokenizer_round_trips_known_text_and_spells_any_ascii(text):
    tok = build_word_tokenizer(word_vocabulary([text]))
    enc = ids(tok, text)
    assert tok.decode(enc) == text
    assert tok.unk_token_id not in enc
    words = [w for w in text.split() if w.isalpha()]
    assert len(enc) < len(text) or not words  # words are single tokens, not characters


def test_word_vocabulary_orders_by_frequency_and_caps_size():
    base = word_vocabulary([], 10**6)
    vocab = word_vocabulary(["bb aa aa", "aa cc"], max_size=10**6)
    assert vocab[: len(base)] == base
    # Each word in both forms: aa 3 times, bb and cc once each; ties by text (" " sorts first).
    assert vocab[len(base) :] == [" aa", "aa", " bb", " cc", "bb", "cc"]
    assert len(word_vocabulary(["xx yy zz ww"], max_size=len(base) + 3)) == len(base) + 3
    tok = build_word_tokenizer(word_vocabulary(["go"]))
    assert ids(tok, "go flurb")[-1] == tok.unk_token_id  # a word never seen


def test_text_policy_plays_episodes_with_batched_generation():
    env = SayEnv()
    policy = TextPolicy(env, layers=1, hidden=32, heads=2, intermediate=64, max_positions=256, vocab_games=3)
    model, tok = policy.load()
    assert {"go", " go", "say", " up"} <= set(tok.get_vocab())
    gen = engine_generate(HFGenerateEngine(), model, tok, Sampling(max_new_tokens=4))
    torch.manual_seed(0)
    r = run_episodes(env, [env.problem("train", i) for i in range(2)], 3, gen, tok, max_turns=3)
    assert r.num_rows == 6 and r.rewards.shape == (6,)
    assert (r.policy_mask <= r.completion_mask).all()
    for row in range(6):
        turns = r.turn_index[row][r.completion_mask[row].bool()]
        assert (turns.diff() >= 0).all() and int(turns.max()) <= 2
        acted = r.policy_mask[row].bool()
        assert int(acted.sum()) <= 4 * 3
    assert policy.cache_key()["env"] == "SayEnv"


def test_expert_rollout_wins_and_marks_only_the_experts_actions(tok):
    env = SayEnv()
    problems = [env.problem("train", i) for i in range(3)]  # go up | go | up go up
    r = expert_rollout(env, problems, tok)
    assert r.rewards.tolist() == [1.0, 1.0, 1.0] and r.group.tolist() == [0, 1, 2]
    eos = tok.eos_token_id
    for row, words in enumerate([["go", "up"], ["go"], ["up", "go", "up"]]):
        assert policy_tokens(r, row).tolist() == [t for w in words for t in ids(tok, w) + [eos]]
        assert int(r.turn_index[row].max()) == len(words) - 1
    nl = tok.convert_tokens_to_ids("\n")
    r = expert_rollout(env, problems[:1], tok, end_ids=[nl])
    assert policy_tokens(r, 0).tolist() == ids(tok, "go") + [nl] + ids(tok, "up") + [nl]
