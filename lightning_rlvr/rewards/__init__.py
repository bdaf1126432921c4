"""Reward shaping applied after the verifier (composable with any task)."""

from lightning_rlvr.rewards.overlong import OverlongPenalty, RewardShaper

__all__ = ["OverlongPenalty", "RewardShaper"]
