"""lightning_rlvr: RLVR for language models on PyTorch Lightning, with pluggable token-level credit."""

from .core.rollout import Rollout
from .credit import Credit, CreditAssigner, GRPOCredit
from .data import RLVRDataModule
from .models.policies import PretrainedPolicy, TinyPolicy
from .module import RLVRModule
from .scoring.scorer import Scorer
from .tasks import AdditionTask, JsonlTask, Problem, Task, Verdict
from .warmstart import WarmStart

__all__ = [
    "AdditionTask",
    "Credit",
    "CreditAssigner",
    "GRPOCredit",
    "JsonlTask",
    "PretrainedPolicy",
    "Problem",
    "RLVRDataModule",
    "RLVRModule",
    "Rollout",
    "Scorer",
    "Task",
    "TinyPolicy",
    "Verdict",
    "WarmStart",
]
