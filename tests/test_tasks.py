"""Tasks: worked solutions, deterministic disjoint splits, verifiers that never raise, data errors."""

from __future__ import annotations

import json

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.tasks import AdditionTask, JsonlTask, Problem, Task, Verdict, safe_check
from lightning_rlvr.tasks.addition import addition_solution


def test_addition_solution_is_the_carry_chain():
    assert addition_solution(347, 285, 3) == " 7+5+0=12;4+8+1=13;3+2+1=06; answer:632"
    assert addition_solution(999, 1, 3).endswith("answer:1000")


def test_worked_solutions_earn_reward_one():
    task = AdditionTask(digits=3)
    for i in range(50):
        p = task.problem("train", i)
        assert task.check(p.solution, p).reward == 1.0


def test_splits_are_deterministic_and_disjoint():
    a, b = AdditionTask(digits=2, seed=7), AdditionTask(digits=2, seed=7)
    assert [a.problem("test", i).prompt for i in range(20)] == [
        b.problem("test", i).prompt for i in range(20)
    ]
    pairs = {s: {a.problem(s, i).prompt for i in range(300)} for s in ("train", "val", "test")}
    assert not pairs["train"] & pairs["test"]
    assert not pairs["train"] & pairs["val"]
    assert not pairs["val"] & pairs["test"]
    other = AdditionTask(digits=2, seed=8)
    assert [other.problem("test", i).prompt for i in range(20)] != [
        a.problem("test", i).prompt for i in range(20)
    ]


@pytest.mark.parametrize(
    "completion", ["", "answer:", "answer: x", "🙂" * 100, "answer:99999999999999999999999", None]
)
def test_verifier_never_raises_on_malformed_completions(completion):
    task = AdditionTask(digits=1)
    p = task.problem("train", 0)
    verdict, raised = safe_check(task, completion, p)
    assert verdict.reward == 0.0
    assert isinstance(verdict.feedback, str)
    if completion is not None:
        assert task.check(completion, p).reward == 0.0


def test_a_raising_verifier_gives_zero_and_is_counted():
    class Broken(Task):
        def check(self, completion, problem):
            raise ZeroDivisionError("boom")

    verdict, raised = safe_check(Broken(), "x", Problem("q", "1"))
    assert (verdict.reward, raised) == (0.0, True)
    assert "ZeroDivisionError" in verdict.feedback
    assert safe_check(AdditionTask(), " answer:3", Problem("Q 1+2=", "3")) == (Verdict(1.0, "correct"), False)


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_jsonl_task_maps_columns_and_checks_answers(tmp_path):
    rows = [{"q": "What is 2+2?", "a": "4"}, {"q": "Half of 3000?", "a": "1,500"}]
    _write_jsonl(tmp_path / "train.jsonl", rows)
    _write_jsonl(tmp_path / "test.jsonl", rows[:1])
    task = JsonlTask(
        str(tmp_path / "train.jsonl"), str(tmp_path / "test.jsonl"), question_field="q", answer_field="a"
    )
    assert (task.size("train"), task.size("test"), task.size("val")) == (2, 1, 1)
    p = task.problem("train", 1)
    assert p.prompt == "Half of 3000?" and p.answer == "1,500"
    assert task.check("so the answer: 1500", p).reward == 1.0
    assert task.check("I think it is 1500.", p).reward == 1.0
    assert task.check("answer: 1499", p).reward == 0.0
    assert task.train_problem(3).prompt == rows[1]["q"]  # the training stream cycles a finite split


@pytest.mark.parametrize(
    "bad", [{"question": "q"}, {"question": "q", "answer": ""}, {"question": "q", "answer": None}]
)
def test_row_without_answer_names_file_and_row(tmp_path, bad):
    path = tmp_path / "train.jsonl"
    _write_jsonl(path, [{"question": "ok", "answer": "1"}, bad])
    with pytest.raises(RLVRError, match=r"train\.jsonl: row 1 has no 'answer'"):
        JsonlTask(str(path), str(path))


def test_missing_column_and_missing_file_are_clear(tmp_path):
    path = tmp_path / "train.jsonl"
    _write_jsonl(path, [{"question": "ok", "solution": "1"}])
    with pytest.raises(RLVRError, match="no column 'answer'"):
        JsonlTask(str(path), str(path))
    with pytest.raises(RLVRError, match="data file not found"):
        JsonlTask(str(tmp_path / "nope.jsonl"), str(path))


@pytest.mark.parametrize(
    "completion, gold, reward",
    [
        ("answer: 1500", "1,500", 1.0),
        ("answer: 1,500", "1500", 1.0),
        ("it is 1,500.", "1500", 1.0),
        ("answer: 15", "1, 5", 0.0),
        ("answer: 1, 5", "15", 0.0),
        ("answer: 1 5", "15", 0.0),
        ("answer: 1,5", "15", 0.0),
        ("answer: 1, 5", "1,5", 1.0),
        ("answer: 1,  5", "1, 5", 1.0),
        ("I count 1,2,3", "123", 0.0),
        ("I count 1,2,3", "3", 0.0),
        ("answer: -4", "4", 0.0),
        ("so -4", "-4", 1.0),
        ("answer: Yes.", "yes", 1.0),
        ("I get 2, 3, 5", "5", 0.0),
        ("I get 3, 5", "3, 5", 1.0),
        ("I get (1, 5)", "5", 0.0),
        ("from 3, 4 I get 7", "7", 1.0),
    ],
)
def test_exact_match_keeps_commas_between_numbers_and_drops_only_thousands_separators(
    tmp_path, completion, gold, reward
):
    path = tmp_path / "rows.jsonl"
    _write_jsonl(path, [{"question": "q", "answer": gold}])
    task = JsonlTask(str(path), str(path))
    assert task.check(completion, task.problem("train", 0)).reward == reward


def test_jsonl_config_tests_from_a_test_file_and_fit_without_train_file_is_one_line(
    run_cli, tmp_path, capsys
):
    from tests.conftest import QUICKSTART, REPO, TINY

    data = tmp_path / "test.jsonl"
    _write_jsonl(data, [{"question": f"{a}+{a}=", "answer": f"{2 * a}.0"} for a in range(4)])
    configs = (QUICKSTART, TINY, str(REPO / "configs/task/jsonl.yaml"))
    flags = ["--model.task.init_args.test_file", str(data), "--model.warm_start", "null"]
    cli = run_cli("test", *flags, "--data.test_size", "4", configs=configs)
    assert cli.model.task.prompt_template() == "{question}" and cli.model.task.answers.kind == "number"
    assert "test/pass@1" in cli.trainer.callback_metrics
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", *flags, configs=configs)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no train_file: fit needs one" in err and "Traceback" not in err
