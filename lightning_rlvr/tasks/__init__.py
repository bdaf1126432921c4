"""Prompt sources and their verifiers."""

from lightning_rlvr.tasks.addition import AdditionTask
from lightning_rlvr.tasks.base import Problem, Task, Verdict, safe_check
from lightning_rlvr.tasks.jsonl import JsonlTask

__all__ = ["AdditionTask", "JsonlTask", "Problem", "Task", "Verdict", "safe_check"]
