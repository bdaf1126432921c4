"""Text roles: what a task's, environment's or vocabulary's text is FOR, never which method reads it.

Layer: core (imports ``errors`` only). Tasks, environments and tokenizers provide texts by role in a
``role_texts`` mapping (role -> text); a credit method maps each of its text settings to the roles it
reads (``lightning_rlvr/credit/texts.py``). So a new method that shows a teacher the answer reads
``ANSWER_CONTEXT`` and edits no task, environment or vocabulary, and a new task provides its texts once
for every method. Placeholders: ``{prompt}`` the row's prompt, ``{reference}`` a peer's completion,
``{answer}`` ``problem.answer``; the hindsight's ``{future}``, ``{verdict}``, ``{feedback}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from .errors import RLVRError

PEER_CONTEXT = "peer_context"
PEER_ANSWER_CONTEXT = "peer_answer_context"
ANSWER_CONTEXT = "answer_context"
NO_PEER_CONTEXT = "no_peer_context"
STEP_DELIMITER = "step_delimiter"
HINDSIGHT = "hindsight"
HINDSIGHT_SEPARATOR = "hindsight_separator"
PASS_TEXT = "pass_text"
FAIL_TEXT = "fail_text"
SEGMENT_BOUNDARIES = "segment_boundaries"
REASONING_KEYWORDS = "reasoning_keywords"
ANSWER_CUE = "answer_cue"

# Every role and what its text is for (docs/privileged_contexts.md lists them from here).
ROLES: dict[str, str] = {
    PEER_CONTEXT: "a teacher's context holding a peer's solution: {prompt}, {reference}",
    PEER_ANSWER_CONTEXT: "a teacher's context holding a peer's solution and the answer: "
    "{prompt}, {reference}, {answer}",
    ANSWER_CONTEXT: "a teacher's context holding the reference answer: {prompt}, {answer}",
    NO_PEER_CONTEXT: "a teacher's context when no peer succeeded: {prompt} (and {answer} if it helps)",
    STEP_DELIMITER: "the text that ends a reasoning step (a string)",
    HINDSIGHT: "what follows the prompt in a hindsight view: {future}, {verdict}, {feedback}",
    HINDSIGHT_SEPARATOR: "the text between a hindsight and the causal prefix",
    PASS_TEXT: "the verdict of a passing completion",
    FAIL_TEXT: "the verdict of a failing completion",
    SEGMENT_BOUNDARIES: "texts after which a reasoning segment may end (a list)",
    REASONING_KEYWORDS: "words before which a reasoning segment may start (a list)",
    ANSWER_CUE: "the text between a partial solution and its answer in a value query",
}


@runtime_checkable
class TextSource(Protocol):
    """Anything that provides texts by role: a ``Task``, an ``Environment``, a tokenizer."""

    role_texts: Mapping[str, Any]


def provided_texts(source: object) -> Mapping[str, Any]:
    """``source.role_texts`` (empty when it has none); a role name not in ``ROLES`` is an error."""
    texts = getattr(source, "role_texts", None) or {}
    unknown = sorted(set(texts) - set(ROLES))
    if unknown:
        raise RLVRError(
            f"{type(source).__name__}.role_texts names unknown role(s) {unknown}; use one of {sorted(ROLES)} "
            "(lightning_rlvr/core/text_roles.py)"
        )
    return texts
