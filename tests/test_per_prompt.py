"""Per-prompt results: every validation and test writes one row per prompt and sample with a stable id."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from lightning_rlvr.core.per_prompt import (
    COMPLETION,
    file_name,
    id_of,
    placed,
    prompt_id,
    read_results,
    rollout_rows,
    write_results,
)
from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from tests.conftest import QUICKSTART, REPO, TINY

EVAL = str(REPO / "configs" / "eval" / "jsonl.yaml")


def _per_prompt(root: Path, name: str) -> list[dict]:
    folders = sorted(root.rglob("per_prompt"))
    assert len(folders) == 1, folders
    return read_results(folders[0], name)


def test_fit_and_test_write_per_prompt_results_with_the_right_counts(run_cli, tmp_path):
    fit = run_cli("fit", "--model.log_samples", "3")
    folder = Path(fit.trainer.log_dir) / "per_prompt"
    assert sorted(p.name for p in folder.iterdir()) == ["val_step0.csv.gz", "val_step2.csv.gz"]
    val_prompts, samples = fit.datamodule.val_size, fit.model.eval_samples  # 4 prompts x 2 samples
    for name in ("val_step0", "val_step2"):
        rows = read_results(folder, name)
        assert len(rows) == val_prompts * samples
        ids = {r["prompt_id"] for r in rows}
        assert len(ids) == val_prompts and all(i.startswith("val:") for i in ids)
        assert sorted(r["sample"] for r in rows) == sorted(list(range(samples)) * val_prompts)
        assert sum(COMPLETION in r for r in rows) == 3  # log_samples: the first 3 rows' completions
    # the same prompts under the same ids at both validations: pairing needs nothing else
    assert {r["prompt_id"] for r in read_results(folder, "val_step0")} == ids
    # val pass@1 logged at step 2 is the mean of the per-prompt verdicts
    logged = float(fit.trainer.callback_metrics["val/pass@1"])
    rows = read_results(folder, "val_step2")
    assert logged == pytest.approx(sum(r["correct"] for r in rows) / len(rows))

    ckpt = fit.trainer.checkpoint_callback.last_model_path
    test = run_cli("test", "--ckpt_path", ckpt, "--data.test_size", "6", configs=(), root=tmp_path / "eval")
    rows = _per_prompt(tmp_path / "eval", "test")
    assert len(rows) == 6 * samples
    assert len({r["prompt_id"] for r in rows}) == 6
    assert all(r["prompt_id"].startswith("test:") for r in rows)
    assert {r["prompt_id"].split(":")[1] for r in rows} == {str(i) for i in range(6)}
    pass1 = float(test.trainer.callback_metrics["test/pass@1"])
    assert pass1 == pytest.approx(sum(r["correct"] for r in rows) / len(rows))
    assert all(r["reward"] in (0.0, 1.0) and r["correct"] == (r["reward"] > 0.5) for r in rows)


def test_the_untouched_model_is_tested_on_the_same_prompt_ids(run_cli, tmp_path):
    """No checkpoint: the model as configured is the baseline, and its prompts carry the same ids."""
    run_cli("test", "--data.test_size", "5", "--model.eval_samples", "3", root=tmp_path / "base")
    run_cli("test", "--data.test_size", "5", "--model.eval_samples", "3", root=tmp_path / "again")
    base, again = _per_prompt(tmp_path / "base", "test"), _per_prompt(tmp_path / "again", "test")
    assert len(base) == 15 and {r["prompt_id"] for r in base} == {r["prompt_id"] for r in again}


def test_a_prompt_id_names_split_index_and_text():
    a = prompt_id("test", 3, "1+2=")
    assert a == prompt_id("test", 3, "1+2=")  # stable
    assert a.startswith("test:3:") and len(a.split(":")[2]) == 8
    assert (
        len({a, prompt_id("val", 3, "1+2="), prompt_id("test", 4, "1+2="), prompt_id("test", 3, "1+3=")}) == 4
    )
    problem = placed(Problem("1+2=", "3", meta={"a": 1}), "test", 3)
    assert id_of(problem) == a and problem.meta["a"] == 1
    assert id_of(Problem("1+2=", "3")).startswith("?:?:")  # evaluated without a place: still its text


def _rollout(problems: list[Problem], correct: list[bool], completions: list[str]) -> Rollout:
    n = len(correct) // len(problems)
    empty = torch.zeros(len(correct), 1, dtype=torch.long)
    return Rollout(
        empty,
        empty,
        empty,
        empty,
        group=torch.arange(len(problems)).repeat_interleave(n),
        problems=problems,
        completions=completions,
        pad_id=0,
        eos_id=1,
        rewards=torch.tensor([float(c) for c in correct]),
        correct=torch.tensor(correct),
    )


def test_files_round_trip_compactly_and_ranks_join(tmp_path):
    problems = [placed(Problem(f"{i}+1=", str(i + 1)), "test", i) for i in range(512)]
    correct = [(i * 7) % 3 == 0 for i in range(512 * 4)]
    rows = rollout_rows(_rollout(problems, correct, ["x"] * len(correct)), completions=2)
    assert [r["sample"] for r in rows[:8]] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [COMPLETION in r for r in rows[:3]] == [True, True, False]
    path = write_results(tmp_path / file_name("test"), rows, completions=True)
    assert path.stat().st_size < 20_000  # 512 prompts x 4 samples: small enough to commit
    again = write_results(tmp_path / "again" / file_name("test"), rows, completions=True)
    assert path.read_bytes() == again.read_bytes()  # no timestamp: the same rows, the same bytes
    back = read_results(tmp_path, "test")
    assert [(r["prompt_id"], r["sample"], r["correct"]) for r in back] == [
        (r["prompt_id"], r["sample"], r["correct"]) for r in rows
    ]
    # rank 1 wrote the last prompts and repeated the first one (a distributed sampler pads its share)
    write_results(tmp_path / file_name("test", 1), rows[:4] + rows[-8:])
    assert len(read_results(tmp_path, "test")) == len(rows)
    assert read_results(tmp_path, "val_step3") == []
    with gzip.open(path, "rt") as f:
        assert f.readline().strip() == "prompt_id,sample,reward,correct,completion"


def test_held_out_evaluation_of_a_checkpoint_and_the_untouched_model_on_a_data_file(
    run_cli, tmp_path, capsys
):
    """configs/eval/jsonl.yaml: every row of a file, a chosen budget and sample count, per-prompt results;
    the untouched model is the baseline the checkpoint pairs with prompt by prompt."""
    from lightning_rlvr.experiments.prompt_level import main as compare

    rows = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(3) for b in range(3)]
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = ["--model.task.init_args.test_file", str(data)]  # a test file alone: no training data needed
    budget = ["--model.max_new_tokens", "12", "--model.eval_samples", "3"]
    run_cli("test", *task, *budget, configs=(QUICKSTART, TINY, EVAL), root=tmp_path / "base")
    base = _per_prompt(tmp_path / "base", "test")
    assert len(base) == 9 * 3 and {r["prompt_id"].split(":")[1] for r in base} == {str(i) for i in range(9)}

    fit = run_cli("fit", root=tmp_path / "fit")
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    # the checkpoint's own task is the addition task: the config's class replaces it
    args = ["--ckpt_path", ckpt, "--config", EVAL, *task, *budget]
    cli = run_cli("test", *args, configs=(), root=tmp_path / "trained")
    assert cli.model.max_new_tokens == 12 and cli.model.eval_samples == 3
    trained = _per_prompt(tmp_path / "trained", "test")
    assert {r["prompt_id"] for r in trained} == {r["prompt_id"] for r in base}  # the same 9 rows, same ids
    capsys.readouterr()  # what the runs printed
    compare([str(tmp_path / "trained"), str(tmp_path / "base")])
    said = capsys.readouterr().out
    assert said.startswith("9 prompts in both: pass@1 ") and "prompt-paired interval" in said
    with pytest.raises(SystemExit) as exit_:
        compare([str(data), str(tmp_path / "base")])
    assert exit_.value.code == 2 and "not a per-prompt results file" in capsys.readouterr().err
