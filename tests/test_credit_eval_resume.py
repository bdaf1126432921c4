"""A killed credit lab resumes after its last finished batch and gives the numbers of an uninterrupted run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.credit.sc_grpo import SCGRPOCredit
from lightning_rlvr.experiments.credit_lab import evaluate as ce
from lightning_rlvr.experiments.credit_lab import totals
from lightning_rlvr.experiments.credit_lab.totals import PARTIAL
from tests.conftest import REPO

# SC-GRPO and HSD draw peers from a generator of their own, HP-RLVR keeps baselines: state that carries from
# one batch to the next, which the resumed lab must restore
METHODS = [str(REPO / f"configs/method/{m}.yaml") for m in ("grpo", "sc_grpo", "hsd", "hp_rlvr", "mc")]


def lab_args(ckpt: Path, out: Path, *extra: str) -> list[str]:
    args = ["--ckpt_path", str(ckpt), "--methods", *METHODS, "--prompts", "3", "--batch-prompts", "1"]
    return [
        *args,
        "--group-size",
        "4",
        "--oracle-samples",
        "2",
        "--bootstrap",
        "20",
        "--out",
        str(out),
        *extra,
    ]


def tables(out: Path) -> tuple[list[dict], list[dict]]:
    """credit_eval.csv without its timing columns (wall time differs between runs), and credit_claims.csv."""
    with open(out / "credit_eval.csv") as f:
        rows = [{k: v for k, v in r.items() if "seconds" not in k} for r in csv.DictReader(f)]
    with open(out / "credit_claims.csv") as f:
        return rows, list(csv.DictReader(f))


class Batches:
    """Counts the batches a lab runs (one oracle each); raises KeyboardInterrupt in batch ``kill_at``."""

    def __init__(self, monkeypatch, kill_at: int | None = None) -> None:
        self.n, self.kill_at, real = 0, kill_at, ce.split_oracle

        def counted(*args, **kwargs):
            self.n += 1
            if self.n == self.kill_at:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(ce, "split_oracle", counted)


def test_a_killed_lab_resumes_after_its_last_batch_to_the_numbers_of_one_run(
    tiny_ckpt, tmp_path, monkeypatch
):
    ce.evaluate(lab_args(tiny_ckpt, tmp_path / "whole"))
    whole = tables(tmp_path / "whole")
    assert not (tmp_path / "whole" / PARTIAL).exists()  # a finished lab leaves no partial file

    with monkeypatch.context() as m:
        Batches(m, kill_at=3)  # killed in its third and last batch
        with pytest.raises(KeyboardInterrupt):
            ce.evaluate(lab_args(tiny_ckpt, tmp_path / "killed"))
    assert (tmp_path / "killed" / PARTIAL).is_file() and not (
        tmp_path / "killed" / "credit_eval.csv"
    ).exists()
    with monkeypatch.context() as m:
        rerun = Batches(m)
        ce.evaluate(lab_args(tiny_ckpt, tmp_path / "killed"))
    assert rerun.n == 1  # only the batch that was cut short
    assert tables(tmp_path / "killed") == whole
    assert not (tmp_path / "killed" / PARTIAL).exists()


def test_a_partial_lab_with_other_settings_is_not_mixed_in(tiny_ckpt, tmp_path, monkeypatch, caplog):
    with monkeypatch.context() as m:
        Batches(m, kill_at=2)
        with pytest.raises(KeyboardInterrupt):
            ce.evaluate(lab_args(tiny_ckpt, tmp_path / "out"))
    with monkeypatch.context() as m:
        rerun = Batches(m)
        ce.evaluate(lab_args(tiny_ckpt, tmp_path / "out", "--seed", "1"))  # other samples: start afresh
    assert rerun.n == 3
    assert "starting afresh" in caplog.text
    ce.evaluate(lab_args(tiny_ckpt, tmp_path / "fresh", "--seed", "1"))
    assert tables(tmp_path / "out") == tables(tmp_path / "fresh")


def test_the_partial_file_restores_every_methods_state_and_the_totals(tmp_path):
    """What carries from batch to batch inside the methods (SC-GRPO's peer generator, HP-RLVR's baselines)
    comes back as it was saved; the end-to-end test above can miss it, as few of its draws matter."""
    methods = {"sc_grpo": SCGRPOCredit(seed=3), "hp_rlvr": HPRLVRCredit()}
    for _ in range(5):
        methods["sc_grpo"].peers.choice([0, 1, 2])  # the generator moves on
    methods["hp_rlvr"].update_baselines([11, 12], [1.0, 0.0])
    t = totals.Totals(claims={}, n_correct=5, n_failed=3, done=[0, 4])
    t.records["grpo"] = totals.Records(cls="GRPOCredit", spearman=[0.5, None], groups=[0, 1], tokens=3.0)
    key = {"ckpt": ["a", 1, 2], "seed": 0}
    totals.save(tmp_path, key, t, methods)

    fresh = {"sc_grpo": SCGRPOCredit(seed=3), "hp_rlvr": HPRLVRCredit()}
    back = totals.load(tmp_path, key, fresh)
    assert back.records == t.records and back.done == [0, 4] and back.n_rows == 8
    for name in methods:
        assert repr(fresh[name].state_dict()) == repr(methods[name].state_dict())
    draws = [methods["sc_grpo"].peers.choice(range(100)) for _ in range(5)]
    assert [fresh["sc_grpo"].peers.choice(range(100)) for _ in range(5)] == draws

    other = {"sc_grpo": SCGRPOCredit(seed=3), "hp_rlvr": HPRLVRCredit()}
    empty = totals.load(tmp_path, {**key, "seed": 1}, other)  # another key: nothing restored
    assert empty.done == [] and empty.records == {} and set(empty.claims) == {"shear", "shear_control", "hsd"}
    assert other["hp_rlvr"].state_dict()["keys"] == []


@pytest.mark.parametrize("damage", [b"not a torch file", None])  # garbage; a file from another version
def test_a_partial_file_that_cannot_be_read_back_is_set_aside_and_changes_no_method(tmp_path, damage, caplog):
    methods = {"sc_grpo": SCGRPOCredit(seed=3), "hp_rlvr": HPRLVRCredit()}
    methods["hp_rlvr"].update_baselines([11], [1.0])
    key = {"seed": 0}
    if damage is None:
        totals.save(tmp_path, key, totals.Totals(claims={}), methods)
        state = torch.load(tmp_path / PARTIAL, weights_only=True)
        state["totals"]["a_field_this_version_lacks"] = 1
        torch.save(state, tmp_path / PARTIAL)
    else:
        (tmp_path / PARTIAL).write_bytes(damage)
    fresh = {"sc_grpo": SCGRPOCredit(seed=3), "hp_rlvr": HPRLVRCredit()}
    expected = {name: repr(c.state_dict()) for name, c in fresh.items()}
    back = totals.load(tmp_path, key, fresh)
    assert back.done == [] and back.records == {} and "cannot be read back" in caplog.text
    assert {name: repr(c.state_dict()) for name, c in fresh.items()} == expected
