"""Credit assigners: one method a file, chosen in YAML by ``class_path``."""

from lightning_rlvr.credit.base import Credit, CreditAssigner
from lightning_rlvr.credit.dr_grpo import DrGRPOCredit
from lightning_rlvr.credit.grpo import GRPOCredit
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.credit.hsd import HSDCredit
from lightning_rlvr.credit.ktae import KTAECredit
from lightning_rlvr.credit.mc import MonteCarloCredit
from lightning_rlvr.credit.opd import OPDCredit
from lightning_rlvr.credit.opsd import OPSDCredit
from lightning_rlvr.credit.rredcot import RREDCoTCredit
from lightning_rlvr.credit.sc_grpo import SCGRPOCredit
from lightning_rlvr.credit.shear import SHEARCredit
from lightning_rlvr.credit.top_entropy import TopEntropyCredit

__all__ = [
    "Credit",
    "CreditAssigner",
    "DrGRPOCredit",
    "GRPOCredit",
    "HPRLVRCredit",
    "HSDCredit",
    "KTAECredit",
    "MonteCarloCredit",
    "OPDCredit",
    "OPSDCredit",
    "RREDCoTCredit",
    "SCGRPOCredit",
    "SHEARCredit",
    "TopEntropyCredit",
]
