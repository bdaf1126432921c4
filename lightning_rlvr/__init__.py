"""lightning_rlvr: RLVR for language models on PyTorch Lightning, with pluggable token-level credit."""

from lightning_rlvr.credit import Credit, CreditAssigner, GRPOCredit
from lightning_rlvr.data import RLVRDataModule
from lightning_rlvr.models import PretrainedPolicy, TinyPolicy
from lightning_rlvr.module import RLVRModule
from lightning_rlvr.rollout import Rollout
from lightning_rlvr.scoring import Scorer
from lightning_rlvr.tasks import AdditionTask, JsonlTask, Problem, Task, Verdict
from lightning_rlvr.warmstart import WarmStart

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
