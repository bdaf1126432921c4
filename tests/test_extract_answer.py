"""``Task.extract_answer`` (what maj@k votes on) per task, and maj@k in ``test``."""

from __future__ import annotations

import json

import pytest
from lightning.pytorch import Trainer

from lightning_rlvr import AdditionTask, RLVRDataModule, RLVRModule, TinyPolicy
from lightning_rlvr.tasks import CodeTask, JsonlTask, MathTask, ReasoningGymTask, Task


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    "completion,answer",
    [
        (" 7+5+0=12;0+0+1=01; answer:12", "12"),
        ("answer:042", "42"),
        ("answer: -3 then more", "-3"),
        ("answer:5 answer:6", "5"),
        ("no answer here", None),
        ("", None),
    ],
)
def test_addition_answers_are_canonical_integers(completion, answer):
    task = AdditionTask(digits=2)
    assert task.extract_answer(completion) == answer
    if answer is not None:  # the vote agrees with the verifier: same answer, same verdict
        problem = task.problem("test", 0)
        voted_right = answer == str(int(problem.answer))
        assert (task.check(completion, problem).reward == 1.0) is voted_right


def test_jsonl_answers_are_normalised_like_the_verifier(tmp_path):
    f = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q", "answer": "1,000"}])
    task = JsonlTask(f, f)
    assert task.extract_answer("so answer: 1,000.") == "1000"
    assert task.extract_answer("it is 12 or 1000") == "1000"  # the last number, as check reads it
    assert task.extract_answer("no idea") is None
    assert task.extract_answer("answer: 1000") == task.extract_answer("answer:1,000")


def test_math_answers_are_what_the_verifier_reads(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"question": "q", "answer": "#### 3"}])
    task = MathTask(f, f)
    assert task.extract_answer("first \\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert task.extract_answer("... #### 42") == "42"
    assert task.extract_answer("The answer is: 7.") == "7"
    assert task.extract_answer("no marker at all") is None


def test_reasoning_gym_answers_are_the_answer_tags():
    task = ReasoningGymTask("leg_counting", {"min_animals": 1, "max_animals": 3}, seed=3)
    assert task.extract_answer("a <answer>1</answer> b <answer> 2 </answer>") == "2"
    assert task.extract_answer("so answer: 7\nmore") == "7"
    assert task.extract_answer("nothing") is None


def test_tasks_without_a_final_answer_return_none(tmp_path):
    f = write_jsonl(tmp_path / "c.jsonl", [{"text": "add", "test_list": "assert add(1, 2) == 3"}])
    code = CodeTask(f, f, prompt_field="text", tests_field="test_list")
    assert code.extract_answer("def add(a, b):\n    return 3\n# answer: 3") is None  # not JsonlTask's
    assert Task().extract_answer("answer: 3") is None


class NoAnswerAddition(AdditionTask):
    extract_answer = Task.extract_answer


class CountingAddition(AdditionTask):
    def __init__(self):
        super().__init__(digits=1)
        self.extracted = 0

    def extract_answer(self, completion):
        self.extracted += 1
        return super().extract_answer(completion)


@pytest.mark.parametrize("task", [CountingAddition(), NoAnswerAddition(digits=1)], ids=["answers", "none"])
def test_test_reports_maj_at_n_only_for_tasks_with_answers(task, tmp_path):
    policy = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)
    module = RLVRModule(task=task, policy=policy, max_new_tokens=12, eval_samples=4, micro_batch_size=8)
    trainer = Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path
    )
    trainer.test(module, RLVRDataModule(test_size=6, eval_batch_size=4))
    metrics = trainer.callback_metrics
    assert {"test/pass@1", "test/pass@4"} <= set(metrics)
    if isinstance(task, NoAnswerAddition):
        assert "test/maj@4" not in metrics and module.test_maj is None
    else:
        assert task.extracted == 6 * 4  # every sample of every prompt had its say
        assert 0.0 <= float(metrics["test/maj@4"]) <= float(metrics["test/pass@4"])
