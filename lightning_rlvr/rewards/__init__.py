"""Verifiers and reward shaping: math answer equivalence, a code sandbox, DAPO's overlong penalty."""

from .math import completion_answer, math_equal, math_reward, reference_answer
from .overlong import OverlongPenalty, RewardShaper
from .sandbox import SandboxLimits, SandboxResult, run_python, run_tests, sandbox_report

__all__ = [
    "OverlongPenalty",
    "RewardShaper",
    "SandboxLimits",
    "SandboxResult",
    "completion_answer",
    "math_equal",
    "math_reward",
    "reference_answer",
    "run_python",
    "run_tests",
    "sandbox_report",
]
