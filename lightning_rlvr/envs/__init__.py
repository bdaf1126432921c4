"""Multi-turn environments: the policy acts, the environment answers (see ``base`` and ``episodes``).

Adapters import their game library lazily, so ``import lightning_rlvr.envs`` stays cheap.
"""

from .base import Environment, safe_reset, safe_step
from .textarena import TextArenaGame
from .textworld import TextWorldCooking

__all__ = [
    "Environment",
    "TextArenaGame",
    "TextWorldCooking",
    "safe_reset",
    "safe_step",
]
