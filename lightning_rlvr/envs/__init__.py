"""Multi-turn environments: the policy acts, the environment answers (see ``base`` and ``episodes``).

Adapters import their game library lazily, so ``import lightning_rlvr.envs`` stays cheap.
"""

from lightning_rlvr.envs.base import Environment, safe_reset, safe_step
from lightning_rlvr.envs.episodes import hf_generate, run_episodes
from lightning_rlvr.envs.textarena import TextArenaGame
from lightning_rlvr.envs.textworld import TextWorldCooking

__all__ = [
    "Environment",
    "TextArenaGame",
    "TextWorldCooking",
    "hf_generate",
    "run_episodes",
    "safe_reset",
    "safe_step",
]
