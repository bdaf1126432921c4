"""Credit assigners: one method a file, chosen in YAML by ``class_path``."""

from .base import Credit, CreditAssigner
from .dr_grpo import DrGRPOCredit
from .grpo import GRPOCredit
from .hp_rlvr import HPRLVRCredit
from .hsd import HSDCredit
from .ktae import KTAECredit
from .mc import MonteCarloCredit
from .opd import OPDCredit
from .opsd import OPSDCredit
from .rredcot import RREDCoTCredit
from .sc_grpo import SCGRPOCredit
from .shear import SHEARCredit
from .top_entropy import TopEntropyCredit

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
