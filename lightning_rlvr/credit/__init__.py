"""Credit assigners: one method a file, chosen in YAML by ``class_path``."""

from lightning_rlvr.credit.base import Credit, CreditAssigner
from lightning_rlvr.credit.grpo import GRPOCredit

__all__ = ["Credit", "CreditAssigner", "GRPOCredit"]
