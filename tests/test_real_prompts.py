"""Real-tokenizer runs: chat prompts by default, greedy evaluation, sample logs and progress lines.

A tiny random Llama carries SmolLM2's tokenizer and chat template (``tests/real_model.py``).
"""

from __future__ import annotations

import json

import pytest

from lightning_rlvr.models import PretrainedPolicy, TinyPolicy
from lightning_rlvr.module import RLVRModule
from lightning_rlvr.prompts import PromptFormat
from tests.real_model import tiny_real_llama

SUMS = [
    "--model.task",
    "lightning_rlvr.tasks.ReasoningGymTask",
    "--model.task.init_args.name",
    "chain_sum",
    "--model.task.init_args.config",
    '{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}',
    "--model.task.init_args.template",
    "{question}",
    "--model.task.init_args.answers.kind",
    "number",
    "--model.warm_start",
    "null",
    "--model.validate_at_start",
    "false",
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(tiny_real_llama(tmp_path_factory.mktemp("tiny_real")))


def test_the_chat_template_is_the_default_prompt_format(tiny_dir):
    module = RLVRModule(policy=PretrainedPolicy(tiny_dir))
    text = module.render("What is 2 + 3?")
    assert text.startswith("<|im_start|>system") and text.endswith(
        "What is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert RLVRModule(policy=TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64)).render is None
    plain = RLVRModule(policy=PretrainedPolicy(tiny_dir), prompt_format=PromptFormat(chat="never"))
    assert plain.render is None


def test_samples_greedy_evaluation_and_progress_are_logged(tiny_dir, run_cli, tmp_path, capfd):
    policy = [
        "--model.policy",
        "lightning_rlvr.models.PretrainedPolicy",
        "--model.policy.init_args.name_or_path",
        tiny_dir,
    ]
    extra = [*policy, *SUMS, "--model.log_samples", "3", "--model.max_new_tokens", "6"]
    cli = run_cli("fit", *extra, "--trainer.max_steps", "1", "--model.eval_greedy", "true")
    run_dir = cli.trainer.log_dir
    ckpt = cli.trainer.checkpoint_callback.last_model_path or cli.trainer.checkpoint_callback.best_model_path
    eval_args = ["--data.test_size", "4", "--data.eval_batch_size", "1", "--model.log_samples", "4"]
    run_cli("test", "--ckpt_path", ckpt, *eval_args, configs=(), root=tmp_path / "eval")
    fit = [json.loads(x) for x in open(f"{run_dir}/samples/fit.jsonl")]
    assert len(fit) == 3 and fit[0]["stage"] == "fit" and fit[0]["step"] == 1
    assert set(fit[0]) >= {"prompt", "completion", "answer", "reward", "correct", "reference", "feedback"}
    assert (
        "=" in fit[0]["prompt"] and "<|im_start|>" not in fit[0]["prompt"]
    )  # the task's prompt, not rendered
    (test_file,) = (tmp_path / "eval").rglob("samples/test.jsonl")
    test = [json.loads(x) for x in open(test_file)]
    assert len(test) == 4  # the first 4 rows of the evaluation: 2 prompts x 2 samples
    assert test[0]["completion"] == test[1]["completion"] and test[2]["completion"] == test[3]["completion"]
    # output to a file (not a terminal): plain progress lines, the test's closing one with its count
    progress = [x for x in capfd.readouterr().err.splitlines() if x.startswith("lightning-rlvr: test: ")]
    assert progress and progress[-1].startswith("lightning-rlvr: test: 4/4 batches")
    assert "pass@1" in progress[-1]
