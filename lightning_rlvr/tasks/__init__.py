"""Prompt sources and their verifiers."""

from lightning_rlvr.tasks.addition import AdditionTask
from lightning_rlvr.tasks.base import Problem, Task, Verdict, safe_check
from lightning_rlvr.tasks.code import CodeTask, HumanEvalTask
from lightning_rlvr.tasks.jsonl import JsonlTask
from lightning_rlvr.tasks.math import MathTask
from lightning_rlvr.tasks.reasoning_gym import ReasoningGymTask

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
