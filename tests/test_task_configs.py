"""Every real-task config runs 2 RL steps end to end with the tiny model (the pipeline, not accuracy)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QUICKSTART, REPO, TINY

TASKS = REPO / "configs" / "task"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def gsm8k_files(tmp_path):
    rows = [
        {"question": f"Tom has {a} apples, gets {b} more. How many?", "answer": f"{a}+{b}\n#### {a + b}"}
        for a, b in [(1, 2), (3, 4), (5, 6), (7, 1)]
    ]
    return [
        "--model.task.init_args.train_file",
        write_jsonl(tmp_path / "train.jsonl", rows),
        "--model.task.init_args.test_file",
        write_jsonl(tmp_path / "test.jsonl", rows),
    ]


def math_files(tmp_path):
    rows = [
        {"problem": f"What is ${a}/{b}$?", "solution": f"It is $\\boxed{{\\frac{{{a}}}{{{b}}}}}$."}
        for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]
    ]
    return [
        "--model.task.init_args.train_file",
        write_jsonl(tmp_path / "train.jsonl", rows),
        "--model.task.init_args.test_file",
        write_jsonl(tmp_path / "test.jsonl", rows),
    ]


def code_files(tmp_path):
    rows = [{"prompt": f"Write f(x) returning x+{k}.", "tests": f"assert f(1) == {1 + k}"} for k in range(4)]
    return [
        "--model.task.init_args.train_file",
        write_jsonl(tmp_path / "train.jsonl", rows),
        "--model.task.init_args.test_file",
        write_jsonl(tmp_path / "test.jsonl", rows),
        "--model.task.init_args.sandbox.wall_s",
        "2",
    ]


OVERRIDES = {
    "gsm8k.yaml": gsm8k_files,
    "math.yaml": math_files,
    "code_jsonl.yaml": code_files,
    "reasoning_gym.yaml": lambda tmp_path: [],
    "small_sums.yaml": lambda tmp_path: [],
    "humaneval.yaml": lambda tmp_path: ["--model.task.init_args.sandbox.wall_s", "2"],
}


def test_every_new_task_config_is_tested():
    assert {p.name for p in TASKS.glob("*.yaml")} - {"addition.yaml", "jsonl.yaml"} == set(OVERRIDES)


@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_fit_two_steps_on_a_task_config(name, run_cli, tmp_path):
    extra = OVERRIDES[name](tmp_path)
    cli = run_cli("fit", "--model.warm_start", "null", *extra, configs=(QUICKSTART, TINY, str(TASKS / name)))
    assert cli.trainer.global_step == 2
    assert type(cli.model.task).__name__ in {"MathTask", "ReasoningGymTask", "HumanEvalTask", "CodeTask"}
    reward = float(cli.trainer.callback_metrics["train/reward_mean"])
    assert 0.0 <= reward <= 1.0
