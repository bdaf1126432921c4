"""What the credit lab accumulates over its batches, and the file that lets a killed lab resume.

Floor ``experiments`` (used by ``evaluate``; imports ``core`` and ``claims``). A lab on a real model runs
for hours, one batch of prompts at a time. After each batch ``save`` writes the totals so far and every
method's state (SC-GRPO's peer generator, HP-RLVR's baselines: they carry from batch to batch) to
``<out>/credit_eval.partial.pt``; a rerun with the same settings ``load``s it and runs only the batches
left. Each batch's rollouts, oracle and method credit are seeded by the batch alone
(``seeded(seed, ..., b)``), so the resumed lab gives the numbers one uninterrupted run gives. The file
is keyed by what those numbers depend on (the checkpoint, the method files' contents, the settings);
another key starts afresh, and the finished lab removes the file.
"""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ...core.files import write_bytes
from .claims import Claim, new_claims

log = logging.getLogger(__name__)

PARTIAL = "credit_eval.partial.pt"


@dataclass
class Records:
    """Per-rollout values of one method (None where undefined) with each value's group."""

    cls: str = ""
    spearman: list = field(default_factory=list)  # constant credit = 0; None where the oracle is constant
    ranked: list = field(default_factory=list)  # 1 where the credit varies (on the same rollouts), else 0
    sign: list = field(default_factory=list)
    coverage: list = field(default_factory=list)
    loc: list = field(default_factory=list)
    loc_uniform: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # for spearman / sign (every rollout)
    loc_groups: list = field(default_factory=list)  # for localisation (failed rollouts with a known error)
    tokens: float = 0.0
    seconds: float = 0.0
    metrics: dict = field(
        default_factory=dict
    )  # the method's own ``Credit.metrics``: name -> one value a batch


@dataclass
class Totals:
    """Everything the lab's tables are computed from, summed over the batches in ``done``."""

    records: dict[str, Records] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    half_r: list = field(default_factory=list)  # oracle halves' agreement per rollout (its reliability)
    half_g: list = field(default_factory=list)
    outcome_sign: list = field(default_factory=list)  # GRPO's one sign per rollout against the oracle
    outcome_g: list = field(default_factory=list)
    n_correct: int = 0
    n_failed: int = 0
    n_known: int = 0  # failed rollouts with a known first error
    oracle_tokens: int = 0
    done: list = field(default_factory=list)  # first prompt index of each finished batch

    @property
    def n_rows(self) -> int:
        return self.n_correct + self.n_failed


def run_key(ckpt: str | Path, method_paths: list[Path], settings: dict) -> dict:
    """What the lab's numbers depend on: the checkpoint file, each method file's text, the settings."""
    stat = Path(ckpt).stat()
    methods = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in method_paths}
    ckpt_id = [str(Path(ckpt).resolve()), stat.st_size, stat.st_mtime_ns]
    return {"ckpt": ckpt_id, "methods": methods, **settings}


def save(out: Path, key: dict, totals: Totals, methods: dict) -> None:
    """Write the totals and each method's state after a batch (atomically: a kill leaves the old file)."""
    state = {
        "key": key,
        "totals": {**asdict(totals), "records": {k: asdict(r) for k, r in totals.records.items()}},
        "methods": {name: credit.state_dict() for name, credit in methods.items()},
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_bytes(out / PARTIAL, buffer.getvalue())


def load(out: Path, key: dict, methods: dict) -> Totals:
    """The totals of a killed lab with the same ``key`` (its methods' states restored), else empty ones:
    also when the file cannot be read back (damaged, or written by another version), and then every
    method keeps the state it had."""
    path = out / PARTIAL
    if not path.is_file():
        return Totals(claims=new_claims())
    before = {name: credit.state_dict() for name, credit in methods.items()}
    try:
        state = torch.load(path, weights_only=True)
        if state.get("key") != key:
            log.warning("credit lab: %s is from other settings or files; starting afresh", path)
            return Totals(claims=new_claims())
        t = state["totals"]
        records = {name: Records(**r) for name, r in t.pop("records").items()}
        claims = {name: Claim(**c) for name, c in t.pop("claims").items()}
        totals = Totals(records=records, claims=claims, **t)
        for name, credit in methods.items():
            credit.load_state_dict(state["methods"][name])
    except Exception as err:  # noqa: BLE001 - a partial file is a cache: unreadable, it is set aside
        for name, credit in methods.items():
            credit.load_state_dict(before[name])
        log.warning("credit lab: %s cannot be read back (%s); starting afresh", path, err)
        return Totals(claims=new_claims())
    log.info("credit lab: resuming after %d finished batches (%s)", len(totals.done), path)
    return totals


def clear(out: Path) -> None:
    (out / PARTIAL).unlink(missing_ok=True)
