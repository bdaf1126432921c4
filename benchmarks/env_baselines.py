"""Measure the environments: pool generation time and size, the expert's and a random player's success.

    python benchmarks/env_baselines.py --games 8 --episodes 100

The random player picks uniformly among the admissible commands (TextWorld) or among the game's
legal move strings (TextArena) each turn, up to the turn limit.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from lightning_rlvr.envs.base import safe_step
from lightning_rlvr.envs.textarena import TextArenaGame
from lightning_rlvr.envs.textworld import TextWorldCooking

TEXTARENA_MOVES = {
    "GuessTheNumber-v0": [f"[{k}]" for k in range(1, 21)],
    "FrozenLake-v0": ["[up]", "[down]", "[left]", "[right]"],
}


def random_episode(env, problem, rng, commands_of) -> bool:
    e = env.clone()
    obs = e.reset(problem)
    try:
        for _ in range(env.max_turns):
            obs, done, verdict = safe_step(e, rng.choice(commands_of(obs)))
            if done:
                return bool(verdict.correct)
        return False
    finally:
        e.close()


def textworld(games: int, episodes: int, seed: int) -> dict:
    env = TextWorldCooking(train_games=games, val_games=0, test_games=0)
    stats = env.ensure_pool()
    problems = [env.problem("train", i) for i in range(games)]
    expert = sum(env.check(p.solution, p).correct for p in problems) / games
    rng = random.Random(seed)
    start = time.perf_counter()
    wins = sum(
        random_episode(env, problems[i % games], rng, lambda o: o.split("Commands: ")[-1].split(", "))
        for i in range(episodes)
    )
    return {"family": "textworld", "pool_games": games, "generated": stats["generated"],
            "generation_s_per_game": stats["seconds"] / max(1, stats["generated"]),
            "pool_bytes": stats["bytes"], "expert_success": expert, "random_success": wins / episodes,
            "random_episodes": episodes, "random_s": time.perf_counter() - start,
            "walkthrough_turns": [len(p.meta["walkthrough"]) for p in problems]}  # fmt: skip


def textarena(env_id: str, episodes: int, seed: int) -> dict:
    env = TextArenaGame(env_id)
    rng = random.Random(seed)
    moves = TEXTARENA_MOVES[env_id]
    start = time.perf_counter()
    wins = sum(random_episode(env, env.problem("train", i), rng, lambda o: moves) for i in range(episodes))
    return {"family": "textarena", "env_id": env_id, "random_success": wins / episodes,
            "random_episodes": episodes, "random_s": time.perf_counter() - start}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=8, help="TextWorld pool size to generate and play")
    parser.add_argument("--episodes", type=int, default=100, help="random-player episodes per game family")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for env_id in TEXTARENA_MOVES:
        print(json.dumps(textarena(env_id, args.episodes, args.seed)))
    print(json.dumps(textworld(args.games, args.episodes, args.seed)))


if __name__ == "__main__":
    main()
