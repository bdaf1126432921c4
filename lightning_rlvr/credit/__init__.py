"""Credit assigners: one method a file, chosen in YAML by ``class_path``."""

from lightning_rlvr.credit.base import Credit, CreditAssigner
from lightning_rlvr.credit.dr_grpo import DrGRPOCredit
from lightning_rlvr.credit.grpo import GRPOCredit
from lightning_rlvr.credit.rredcot import RREDCoTCredit

__all__ = ["Credit", "CreditAssigner", "DrGRPOCredit", "GRPOCredit", "RREDCoTCredit"]
