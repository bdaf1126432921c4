"""The shared answer parser: every format, every kind, and never prose as an answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_rlvr.rewards.answers import FORMATS, AnswerParser
from lightning_rlvr.tasks import JsonlTask, MathTask, ReasoningGymTask

PROSE = [
    "It's apropos",
    "I am not sure.",
    "it depends on the context",
    "Let me think about this step by step",
]
# every marker, with {x} where the answer goes
MARKED = {
    "tag": "<answer>{x}</answer>",
    "boxed": "\\boxed{{{x}}}",
    "hash": "#### {x}",
    "colon": "Answer: {x}",
    "is": "The answer is {x}",
}


@pytest.mark.parametrize("fmt", list(MARKED))
@pytest.mark.parametrize("kind", ["number", "math"])
@pytest.mark.parametrize("prose", PROSE)
def test_prose_after_any_marker_is_never_an_answer(fmt, kind, prose):
    parser = AnswerParser(kind=kind)
    text = "Some reasoning.\n" + MARKED[fmt].format(x=prose)
    assert parser(text) is None
    assert not parser.formatted(text)
    # a number earlier in the text is found by the last-number fallback, never the prose
    assert parser("We have 3 apples.\n" + MARKED[fmt].format(x=prose)) == "3"


@pytest.mark.parametrize("fmt", list(MARKED))
def test_every_marker_gives_its_number(fmt):
    parser = AnswerParser(kind="number")
    for written, value in [
        ("14", "14"),
        ("14.", "14"),
        ("$14", "14"),
        ("-3", "-3"),
        ("1,234", "1234"),
        ("5 + 9 = 14", "14"),
        ("**14**", "14"),
        ("14 apples", "14"),
    ]:
        text = "5 + 9 is worked out below.\n" + MARKED[fmt].format(x=written)
        assert parser.find(text) == (value, fmt), (fmt, written)
        assert parser.formatted(text)


def test_formats_are_tried_in_order_each_at_its_last_occurrence():
    text = "answer: 1\nanswer: 2\n#### 3\nthen 4"
    assert AnswerParser(kind="number").find(text) == ("3", "hash")
    assert AnswerParser(kind="number", formats=["colon", "hash"]).find(text) == ("2", "colon")
    assert AnswerParser(kind="number", formats=["last"]).find(text) == ("4", "last")
    assert AnswerParser(kind="number", formats=["tag"]).find(text) is None
    assert AnswerParser(kind="number", tag="final").find("<final>7</final>") == ("7", "tag")


def test_kinds_keep_what_an_answer_of_that_kind_looks_like():
    assert AnswerParser(kind="math")("so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert AnswerParser(kind="math")("answer: Monday") == "Monday"
    assert AnswerParser(kind="text")("<answer>New York</answer>") == "New York"
    assert AnswerParser(kind="text", max_words=2)("answer: the city that never sleeps") is None
    grid = "<answer>\n1 2\n3 4\n</answer>"
    assert AnswerParser(kind="text", max_words=None)(grid) == "1 2\n3 4"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="formats"):
        AnswerParser(formats=["hash", "guess"])
    with pytest.raises(ValueError, match="kind"):
        AnswerParser(kind="words")
    assert set(FORMATS) == {"tag", "boxed", "hash", "colon", "is", "last"}


def test_format_reward_pays_wrong_answers_in_a_marker_format_only():
    parser = AnswerParser(kind="number", format_reward=0.1)
    assert parser.reward(True, "14") == 1.0
    assert parser.reward(False, "#### 13") == 0.1
    assert parser.reward(False, "I think 13") == 0.0  # last-number fallback: no format
    assert AnswerParser(kind="number").reward(False, "#### 13") == 0.0


def _rows(tmp_path, answers):
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": a}) + "\n" for i, a in enumerate(answers))
    )
    return str(path)


def test_every_task_reads_answers_with_the_shared_parser(tmp_path):
    gsm = MathTask(_rows(tmp_path, ["so #### 14"]), _rows(tmp_path, ["so #### 14"]))
    p = gsm.problem("test", 0)
    assert gsm.check("#### It's apropos", p).reward == 0.0
    assert gsm.extract_answer("#### It's apropos") is None
    assert gsm.check("5 + 9 = 14. The answer is 14.", p).correct
    numbers = JsonlTask(_rows(tmp_path, ["14"]), _rows(tmp_path, ["14"]))
    assert numbers.answers.kind == "number"
    assert numbers.check("#### 14 apples", numbers.problem("test", 0)).correct
    assert numbers.extract_answer("#### It's apropos") is None
    words = JsonlTask(_rows(tmp_path, ["Paris"]), _rows(tmp_path, ["Paris"]))
    assert words.answers.kind == "text" and words.check("answer: Paris", words.problem("test", 0)).correct
    one_digit = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    sums = ReasoningGymTask("chain_sum", config=one_digit, answers=AnswerParser(kind="number"))
    q = sums.problem("test", 0)
    assert sums.check(f"The sum is {q.answer}.", q).correct
    assert sums.check(f"#### It's apropos. Then {q.answer}", q).correct  # prose skipped, the number found


def test_rollouts_log_the_share_in_a_marker_format(tmp_path):
    from types import SimpleNamespace

    task = JsonlTask(_rows(tmp_path, ["14"]), _rows(tmp_path, ["14"]))
    rollout = SimpleNamespace(completions=["#### 14", "I say 14", "answer: 3", "nothing"])
    assert task.rollout_metrics(rollout) == {"format_ok": 0.5}


FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_completions.jsonl"


def test_the_parser_reads_real_smollm2_completions_as_a_person_does():
    """Real SmolLM2-135M-Instruct replies (chat template, greedy, reasoning-gym chain_sum questions), each
    with the number a reader sees it commit to and the verdict, checked by hand."""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert len(rows) >= 60
    parser = AnswerParser(kind="number")
    for row in rows:
        got = parser(row["completion"])
        assert got == row["answer"], row
        assert (got is not None and int(got) == int(row["reference"])) is row["correct"], row


@pytest.mark.parametrize(
    "completion, fmt",
    [
        ("First 3+4=7. <answer>  7</answer> and <answer> 12</answer>", "tag"),
        ("so \\boxed{ 12} but really \\boxed{12}", "boxed"),
        ("#### 5\nthen #### 12", "hash"),
        ("Answer: 5. Final answer:   12", "colon"),
        ("the answer is 5, no, the answer is 12", "is"),
        ("5 then 7 then 12", "last"),
    ],
)
def test_start_points_at_the_text_the_answer_is_read_from(completion, fmt):
    parser = AnswerParser(formats=[fmt], kind="number")
    start = parser.start(completion)
    assert parser.find(completion) == ("12", fmt)
    assert completion[start:].startswith("12")  # the last occurrence, blanks skipped
    assert AnswerParser(formats=[fmt], kind="number").start("no number here") is None
