"""Measure the environments: pool generation time and size, the expert's and a random player's success.

    python benchmarks/env_baselines.py --games 8 --episodes 100 [--imitation-steps 120]

The random player picks uniformly among the admissible commands (TextWorld) or among the game's
legal move strings (TextArena) each turn, up to the turn limit. ``--imitation-steps`` also trains the
in-code ``TextPolicy`` on the expert's TextWorld episodes (loss on the expert's action tokens only,
as the warm start would) and reports its sampled success on those games: can the small model on CPU
reach a band where RL has signal?
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from lightning_rlvr.collect.episodes import engine_generate, expert_rollout, run_episodes
from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.envs.base import safe_step
from lightning_rlvr.envs.textarena import TextArenaGame
from lightning_rlvr.envs.textworld import TextWorldCooking
from lightning_rlvr.envs.vocab import TextPolicy

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
    return {
        "family": "textworld",
        "pool_games": games,
        "generated": stats["generated"],
        "generation_s_per_game": stats["seconds"] / max(1, stats["generated"]),
        "pool_bytes": stats["bytes"],
        "expert_success": expert,
        "random_success": wins / episodes,
        "random_episodes": episodes,
        "random_s": time.perf_counter() - start,
        "walkthrough_turns": [len(p.meta["walkthrough"]) for p in problems],
    }


def textarena(env_id: str, episodes: int, seed: int) -> dict:
    env = TextArenaGame(env_id)
    rng = random.Random(seed)
    moves = TEXTARENA_MOVES[env_id]
    start = time.perf_counter()
    wins = sum(random_episode(env, env.problem("train", i), rng, lambda o: moves) for i in range(episodes))
    return {
        "family": "textarena",
        "env_id": env_id,
        "random_success": wins / episodes,
        "random_episodes": episodes,
        "random_s": time.perf_counter() - start,
    }


def textworld_imitation(games: int, steps: int, seed: int) -> dict:
    env = TextWorldCooking(train_games=games, val_games=0, test_games=0)
    problems = [env.problem("train", i) for i in range(games)]
    torch.manual_seed(seed)
    model, tok = TextPolicy(env, vocab_games=games).load()
    expert = expert_rollout(env, problems, tok)
    ids, mask, P = expert.input_ids, expert.attention_mask, expert.prompt_ids.shape[1]
    labels = ids.clone()
    labels[:, :P] = -100
    labels[:, P:][expert.policy_mask == 0] = -100  # the expert's actions only, never the observations
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    start = time.perf_counter()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, position_ids=positions, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    generate = engine_generate(HFGenerateEngine(), model, tok, Sampling(max_new_tokens=12))
    rollout = run_episodes(env, problems, 2, generate, tok, max_turns=8)
    return {
        "family": "textworld",
        "imitation_steps": steps,
        "train_s": train_s,
        "vocab": len(tok),
        "sampled_success_on_train_games": rollout.correct.float().mean().item(),
        "rollout_s": time.perf_counter() - start,
        "episodes": rollout.num_rows,
        "mean_episode_tokens": rollout.completion_mask.sum(-1).float().mean().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=8, help="TextWorld pool size to generate and play")
    parser.add_argument("--episodes", type=int, default=100, help="random-player episodes per game family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--imitation-steps", type=int, default=0, help="TextPolicy steps on expert episodes")
    args = parser.parse_args()
    for env_id in TEXTARENA_MOVES:
        print(json.dumps(textarena(env_id, args.episodes, args.seed)))
    print(json.dumps(textworld(args.games, args.episodes, args.seed)))
    if args.imitation_steps:
        print(json.dumps(textworld_imitation(args.games, args.imitation_steps, args.seed)))


if __name__ == "__main__":
    main()
