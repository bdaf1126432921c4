"""Paper claims the credit lab checks on its rollouts: SHEAR's divergence claim (and its control), HSD's.

Application layer (used by ``credit_eval``). Each claim collects per-rollout margins by group; a group
holds when its mean margin is > 0; ``Claim.summary`` gives the share of groups and of rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from .metrics import localisation, mean_before_after


@dataclass
class Claim:
    name: str
    statement: str
    per_group: dict[int, list[float]] = field(default_factory=dict)  # group -> per-rollout margins

    def add(self, group: int, margin: float) -> None:
        self.per_group.setdefault(group, []).append(margin)

    def summary(self) -> dict:
        groups = [sum(m) / len(m) > 0 for m in self.per_group.values()]
        rollouts = [x > 0 for m in self.per_group.values() for x in m]
        return {
            "claim": self.name,
            "groups": len(groups),
            "groups_holding": sum(groups),
            "frac_groups": sum(groups) / len(groups) if groups else None,
            "rollouts": len(rollouts),
            "frac_rollouts": sum(rollouts) / len(rollouts) if rollouts else None,
            "statement": self.statement,
        }


def record_claims(
    claims: dict[str, Claim], views, errors, rollout, grpo: Tensor, group_offset: int, d: int
) -> None:
    """SHEAR: mean token weight (span distance / mean hidden norm) after the first error minus before.
    SHEAR control: the same on the group's CORRECT rollouts, cut at the median first error of the
    group's failed ones (a rollout with no error: a margin there means position, not divergence).
    HSD: share of the distillation loss within +-d tokens of the first error minus the uniform share."""
    lengths = rollout.lengths.tolist()
    group_errors: dict[int, list[int]] = {}
    for i, e in enumerate(errors):
        if e is not None:
            group_errors.setdefault(int(rollout.group[i]), []).append(e)
    for v in views:
        for i, L in enumerate(lengths):
            e = errors[i]
            g = group_offset + int(rollout.group[i])
            mixed = abs(float(grpo[i])) > 0  # the opposite side exists
            if "shear_control" in v.claims and mixed and e is None and bool(rollout.correct[i]):
                peers = sorted(group_errors.get(int(rollout.group[i]), []))
                split = mean_before_after(v.weights[i, :L], peers[len(peers) // 2]) if peers else None
                if split is not None:
                    claims["shear_control"].add(g, split[1] - split[0])
            if e is None:
                continue
            if "shear" in v.claims and mixed:
                split = mean_before_after(v.weights[i, :L], e)
                if split is not None:
                    claims["shear"].add(g, split[1] - split[0])
            if v.token_loss is not None and "hsd" in v.claims:
                loss = v.token_loss[i, :L]
                if float(loss.abs().max()) > 0:  # the row was distilled
                    share, uniform = localisation(loss, e, d)
                    claims["hsd"].add(g, share - uniform)


def new_claims() -> dict[str, Claim]:
    return {
        "shear": Claim(
            "SHEAR", "span distance to the opposite group larger after the first error than before"
        ),
        "shear_control": Claim(
            "SHEAR control",
            "the same on correct rollouts, cut at the median first error of their failed peers",
        ),
        "hsd": Claim(
            "HSD", "distillation signal concentrated within +-d tokens of the first error (vs uniform)"
        ),
    }
