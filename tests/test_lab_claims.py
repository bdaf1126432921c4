"""The credit lab checks a paper's claim on the methods that declare it (``lab_claims``), not by class."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from lightning_rlvr.credit import GRPOCredit, HSDCredit, SHEARCredit
from lightning_rlvr.experiments.credit_lab.claims import new_claims, record_claims
from lightning_rlvr.experiments.credit_lab.view import MethodView


def view(cls: str, claims: tuple[str, ...]) -> MethodView:
    weights = torch.tensor([[0.1, 0.1, 0.9, 0.9], [0.5, 0.5, 0.5, 0.5]])
    loss = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    return MethodView("m", cls, weights, weights, {}, True, token_loss=loss, claims=claims)


def recorded(v: MethodView) -> dict[str, int]:
    rollout = SimpleNamespace(
        lengths=torch.tensor([4, 4]), group=torch.tensor([0, 0]), correct=torch.tensor([False, True])
    )
    claims = new_claims()
    record_claims(claims, [v], [2, None], rollout, torch.tensor([1.0, -1.0]), 0, d=0)
    return {key: len(claim.per_group) for key, claim in claims.items()}


def test_a_claim_is_checked_on_the_methods_that_declare_it_whatever_their_class_name():
    assert recorded(view("Renamed", ("shear", "shear_control", "hsd"))) == {
        "shear": 1,
        "shear_control": 1,
        "hsd": 1,
    }
    assert recorded(view("HSDCredit", ())) == {"shear": 0, "shear_control": 0, "hsd": 0}
    assert recorded(view("SHEARCredit", ("hsd",)))["shear"] == 0


def test_the_papers_methods_declare_their_claims_and_a_subclass_inherits_them():
    class MySHEAR(SHEARCredit):
        pass

    assert (
        SHEARCredit.lab_claims == ("shear", "shear_control") and MySHEAR.lab_claims == SHEARCredit.lab_claims
    )
    assert HSDCredit.lab_claims == ("hsd",) and GRPOCredit.lab_claims == ()
