"""Prompt sources and their verifiers."""

from ..core.problem import Problem, Verdict
from .addition import AdditionTask
from .base import Task, safe_check
from .code import CodeTask, HumanEvalTask
from .jsonl import JsonlTask
from .math import MathTask
from .reasoning_gym import ReasoningGymTask

__all__ = [
    "AdditionTask",
    "CodeTask",
    "HumanEvalTask",
    "JsonlTask",
    "MathTask",
    "Problem",
    "ReasoningGymTask",
    "Task",
    "Verdict",
    "safe_check",
]
