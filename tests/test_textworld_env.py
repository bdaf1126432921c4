"""TextWorld cooking games: a tiny pool (two one-room games) generated once per test session.

Generating a game takes seconds (most of it TextWorld's Inform 7 compiler), so the pool here is as
small as the claims allow: one train game and one val game.
"""

from __future__ import annotations

import csv
import json
import random

import pytest
import yaml

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.envs.base import safe_step
from lightning_rlvr.envs.textworld import TextWorldCooking, generate_game, trim_observation
from tests.conftest import REPO, TEXTWORLD_AFTER_QUICKSTART


@pytest.fixture(scope="session")
def pool():
    env = TextWorldCooking(train_games=1, val_games=1, test_games=0, max_turns=8)
    stats = env.ensure_pool()
    return env, stats


def test_pool_is_generated_once_and_cached(pool):
    env, stats = pool
    assert stats["generated"] in (0, 2) and stats["bytes"] > 0
    again = TextWorldCooking(train_games=1, val_games=1, test_games=0).ensure_pool()
    assert again["generated"] == 0 and again["bytes"] == stats["bytes"]
    names = sorted(p.name for p in env.pool_dir().iterdir() if not p.name.startswith("."))
    assert names == [
        "train-0.json",
        "train-0.meta.json",
        "train-0.z8",
        "val-0.json",
        "val-0.meta.json",
        "val-0.z8",
    ]


def canonical(x):
    """``x`` with every list sorted: TextWorld writes some sets as lists in hash order (PYTHONHASHSEED)."""
    if isinstance(x, dict):
        return {k: canonical(v) for k, v in x.items()}
    if isinstance(x, list):
        return sorted((canonical(v) for v in x), key=lambda v: json.dumps(v, sort_keys=True))
    return x


def test_games_regenerate_identically_from_their_seed(pool, tmp_path):
    env, _ = pool
    for split in ("train", "val"):
        meta = json.loads((env.pool_dir() / f"{split}-0.meta.json").read_text())
        assert meta["settings"] == env.settings(split, 0)
    # Regenerated, compiled and played again: the same game, walkthrough and observations.
    again = generate_game(env.settings("val", 0), tmp_path, "again")
    assert again == json.loads((env.pool_dir() / "val-0.meta.json").read_text())
    cached = json.loads((env.pool_dir() / "val-0.json").read_text())
    assert canonical(json.loads((tmp_path / "again.json").read_text())) == canonical(cached)
    assert (tmp_path / "again.z8").is_file() and not list(tmp_path.glob(".tmp*"))
    other = json.loads((env.pool_dir() / "train-0.json").read_text())
    assert canonical(other) != canonical(cached)  # a different seed is a different game


def test_splits_differ_by_seed_and_by_the_generators_food_split(pool):
    env, _ = pool
    train, val = env.settings("train", 0), env.settings("val", 0)
    assert (train["split"], val["split"], env.settings("test", 0)["split"]) == ("train", "valid", "test")
    assert train["game_seed"] != val["game_seed"]
    other = TextWorldCooking(seed=1)
    assert (
        other.settings("train", 0)["game_seed"] != train["game_seed"] and other.pool_dir() != env.pool_dir()
    )


def test_the_expert_wins_every_game_of_the_pool(pool):
    env, _ = pool
    for split in ("train", "val"):
        p = env.problem(split, 0)
        assert p.solution.splitlines() == p.meta["walkthrough"] and len(p.meta["walkthrough"]) >= 3
        verdict = env.check(p.solution, p)
        assert verdict.correct and verdict.reward == 1.0


def test_an_episode_sees_trimmed_observations_commands_and_sparse_reward(pool):
    env, _ = pool
    p = env.problem("train", 0)
    e = env.clone()
    first = e.reset(p)
    assert "$$" not in first and "Commands:" in first and "examine cookbook" in first
    obs, done, verdict = safe_step(e, "dance wildly")  # not a command: the game's own reply
    assert not done and verdict is None and "Commands:" in obs and len(obs.split("\n")[0]) > 0
    # Interpreter meta-commands and out-of-world verbs never reach the interpreter.
    for meta in ("\\q", "\\last", "quit", "Restart now", "undo"):
        obs, done, verdict = safe_step(e, meta)
        assert not done and verdict is None and "Commands:" in obs and "yes or no" not in obs
    assert safe_step(e, "inventory")[0].startswith("You are carrying nothing.")
    rewards = []
    for action in p.meta["walkthrough"]:
        obs, done, verdict = safe_step(e, action)
        rewards.append(None if verdict is None else verdict.reward)
    assert done and rewards[:-1] == [None] * (len(rewards) - 1) and rewards[-1] == 1.0  # sparse: only the win
    e.close()
    assert env.check("inventory\nlook", p).reward == 0.0


def test_random_admissible_commands_never_raise(pool):
    env, _ = pool
    rng = random.Random(0)
    e = env.clone()
    obs = e.reset(env.problem("val", 0))
    for _ in range(env.max_turns):
        commands = obs.split("Commands: ")[-1].split(", ")
        obs, done, verdict = safe_step(e, rng.choice(commands))
        assert not obs.startswith("environment error")
        if done:
            assert verdict.reward in (0.0, 1.0)
            break
    e.close()


def test_vocabulary_texts_cover_the_experts_commands(pool):
    env, _ = pool
    texts = env.vocabulary_texts()
    assert "Commands:" in texts
    for command in env.problem("train", 0).meta["walkthrough"]:
        assert command in texts


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("\n\nYou take the apple.\n\n\n\n>   -= Kitchen =-0/1", "You take the apple."),
        ("  ______  \n |  $$  \\ \n\nYou are carrying nothing.\n\n>", "You are carrying nothing."),
        (
            "-= Kitchen =-\nWhat a day. A fridge hums. Wow, TextWorld! Exits lead north. Nice.\n\n>",
            "-= Kitchen =- A fridge hums. Exits lead north.",
        ),
        (  # the generator's fixed sentences go; the recipe's own words stay, in order
            '\nYou open the copy of "Cooking: A Modern Approach (3rd Ed.)" and start reading:\n\nRecipe #2'
            "\n---------\nGather all following ingredients and follow the directions to prepare this tasty"
            " meal.\n\nIngredients:\nred apple\n\nDirections:\nslice the red apple\nprepare meal\n\n>",
            "Ingredients: red apple Directions: slice the red apple prepare meal",
        ),
        (
            "You are hungry! Let's cook a delicious meal. Check the cookbook in the kitchen for the recipe."
            " Once done, enjoy your meal!\n\n-= Kitchen =-\nYou see a fridge.\n>",
            "-= Kitchen =- You see a fridge.",
        ),
    ],
)
def test_trim_observation(raw, expected):
    assert trim_observation(raw, ["fridge", "Kitchen"], 100) == expected


def test_trim_observation_caps_words_and_bad_knobs_are_one_line_errors():
    assert trim_observation("one two three four", [], 2) == "one two ..."
    with pytest.raises(RLVRError, match="rooms=5"):
        TextWorldCooking(rooms=5)
    with pytest.raises(RLVRError, match="take=3"):
        TextWorldCooking(recipe=2, take=3)


def test_a_fit_runs_through_textworld_episodes(pool, run_cli, tmp_path):
    """Warm start on the expert's episodes, then 2 GRPO steps and a validation on the tiny pool."""
    cli = run_cli("fit", configs=TEXTWORLD_AFTER_QUICKSTART)
    assert cli.model.rl_step == 2 and cli.model.warm_start_summary["steps"] == 10
    (path,) = (tmp_path / "runs").glob("**/metrics.csv")
    rows = [r for r in csv.DictReader(open(path)) if r.get("train/success")]
    assert len(rows) == 2
    for r in rows:
        assert 1.0 <= float(r["train/turns"]) <= 4.0
        assert 0.0 <= float(r["train/invalid_actions"]) <= float(r["train/turns"])
        assert float(r["train/skipped_updates"]) == 0.0


def test_the_agent_quickstart_shows_the_recipe_it_must_follow(pool):
    """At the quickstart's observation cap the cookbook names the ingredient the expert takes.

    Under a tighter cap the recipe is cut before its ingredients and no policy can tell which
    ingredient to take (the agent quickstart used to show 20 words and could only guess).
    """
    with open(REPO / "configs" / "quickstart_agent.yaml") as f:
        words = yaml.safe_load(f)["model"]["task"]["init_args"]["max_observation_words"]
    env, _ = pool
    env = TextWorldCooking(train_games=1, val_games=1, test_games=0, max_observation_words=words)
    for split in ("train", "val"):
        problem = env.problem(split, 0)
        walk = problem.meta["walkthrough"]
        take = next(a for a in walk if a.startswith("take "))
        ingredient = take.removeprefix("take ").split(" from ")[0]
        game = env.clone()
        game.reset(problem)
        for action in walk[: walk.index("examine cookbook") + 1]:
            obs, _, _ = safe_step(game, action)
        game.close()
        recipe = obs.split("\nCommands:")[0]
        assert recipe.startswith("Ingredients:"), recipe  # the ingredients come first, no preamble
        assert "Ingredients:" in recipe and ingredient in recipe.split("Ingredients:")[1], recipe
