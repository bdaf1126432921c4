"""The warm-start cache: written whole, checked against its manifest, rebuilt (one line) when damaged.

And reproducible: the warm start trains with a fixed number of torch threads, and the run names the
warm start it used (key, steps, accuracy, where it was trained).
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import yaml

from lightning_rlvr import AdditionTask, TinyPolicy
from lightning_rlvr import warmstart as ws
from lightning_rlvr.warmstart import WarmStart, manifest_problem

POLICY = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
TASK = AdditionTask(digits=1)


def warm(**kwargs) -> WarmStart:
    args = dict(min_accuracy=1.1, max_steps=3, eval_every=3, eval_prompts=4, batch_size=4, max_new_tokens=4)
    return WarmStart(**{**args, **kwargs})


def run(warm_start: WarmStart) -> tuple[dict, dict]:
    torch.manual_seed(0)  # the model's initial weights (the warm start seeds its own training)
    model, tokenizer = POLICY.for_task(TASK).load()
    summary = warm_start.run(model, tokenizer, POLICY.for_task(TASK), TASK)
    return summary, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path))
    return tmp_path / "warmstart"


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_a_byte(path):  # same size: only the checksum can tell
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated weights": lambda e: truncate(e / "model.safetensors"),
    "corrupted weights": lambda e: flip_a_byte(e / "model.safetensors"),
    "missing weights": lambda e: os.remove(e / "model.safetensors"),
    "missing summary": lambda e: os.remove(e / "summary.json"),
    "truncated summary": lambda e: truncate(e / "summary.json"),
    "missing config": lambda e: os.remove(e / "config.json"),
    "missing manifest": lambda e: os.remove(e / "manifest.json"),
    "garbage manifest": lambda e: (e / "manifest.json").write_text("{not json"),
}


def test_an_entry_is_written_with_a_manifest_and_loaded_intact(cache, capsys):
    first, weights = run(warm())
    (entry,) = cache.iterdir()
    assert entry.name == first["key"] and first["cached"] is False and first["steps"] == 3
    listed = json.loads((entry / "manifest.json").read_text())["files"]
    assert {"model.safetensors", "config.json", "summary.json"} <= set(listed)
    assert manifest_problem(entry) is None
    again, loaded = run(warm())
    assert again["cached"] is True and again["key"] == first["key"]
    assert all(torch.equal(weights[k], loaded[k]) for k in weights)
    err = capsys.readouterr().err
    assert f"warm start {first['key']}: 3 steps to sampled accuracy" in err and "loaded from" in err


def test_without_an_accuracy_target_the_warm_start_trains_max_steps_and_does_not_warn(cache, capsys):
    # an unreachable target stops at max_steps with a warning; no target trains the same steps silently
    capped, capped_weights = run(warm(min_accuracy=1.1, max_steps=4, eval_every=2))
    assert capped["steps"] == 4 and "WARNING: warm start stopped at max_steps=4" in capsys.readouterr().err
    fixed, fixed_weights = run(warm(min_accuracy=None, max_steps=4, eval_every=2))
    err = capsys.readouterr().err
    assert fixed["steps"] == 4 and "WARNING" not in err and fixed["key"] != capped["key"]
    assert 0.0 <= fixed["accuracy"] <= 1.0  # the checks still run and report
    assert all(torch.equal(capped_weights[k], fixed_weights[k]) for k in capped_weights)  # the same 4 steps
    # a target of 0 is met before the first step: no training at all
    assert run(warm(min_accuracy=0.0, max_steps=4))[0]["steps"] == 0


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_never_loaded_but_rebuilt_with_one_line(damage, cache, capsys):
    _, weights = run(warm())
    (entry,) = cache.iterdir()
    DAMAGE[damage](entry)
    capsys.readouterr()
    again, rebuilt = run(warm())
    err = capsys.readouterr().err
    assert again["cached"] is False
    assert err.count("is damaged") == 1 and "training it again" in err
    assert all(torch.equal(weights[k], rebuilt[k]) for k in weights)  # trained again, same result
    assert manifest_problem(entry) is None  # and the entry is whole again
    assert run(warm())[0]["cached"] is True


def test_a_write_that_dies_leaves_no_entry(cache, monkeypatch):
    def die(folder):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ws, "write_manifest", die)
    with pytest.raises(OSError):
        run(warm())
    assert not cache.exists() or [p.name for p in cache.iterdir() if not p.name.startswith(".")] == []


def test_the_warm_start_trains_with_its_own_thread_count_and_records_it(cache, monkeypatch):
    seen = []
    train = WarmStart._train

    def spy(self, *args):
        seen.append(torch.get_num_threads())
        return train(self, *args)

    monkeypatch.setattr(WarmStart, "_train", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        summary, _ = run(warm(cache=False))
        assert seen == [1] and torch.get_num_threads() == 2  # pinned while training, restored after
        assert summary["machine"]["threads"] == 1 and summary["machine"]["torch"] == torch.__version__
    finally:
        torch.set_num_threads(before)
    key = warm().key(POLICY.for_task(TASK), TASK)
    assert warm(threads=2).key(POLICY.for_task(TASK), TASK) != key  # another thread count, another entry


def test_a_run_names_its_warm_start_in_hparams_and_metrics(run_cli, tmp_path):
    cli = run_cli("fit")
    summary = cli.model.warm_start_summary
    (hparams,) = (tmp_path / "runs").glob("**/hparams.yaml")
    logged = yaml.safe_load(hparams.read_text())
    assert logged["warm_start/key"] == summary["key"] and len(summary["key"]) == 16
    assert logged["warm_start/steps"] == summary["steps"] and logged["warm_start/trained_threads"] == 1
    (metrics,) = (tmp_path / "runs").glob("**/metrics.csv")
    header = metrics.read_text().splitlines()[0].split(",")
    assert "warm_start/steps" in header and "warm_start/accuracy" in header
