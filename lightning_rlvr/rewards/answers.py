"""The one answer parser every task reads completions with: which text a completion commits to.

Layer: ``rewards`` (imports only the standard library). Real models state answers in many ways;
``AnswerParser`` tries its ``formats`` in order and returns the first that holds an answer of the
expected ``kind``, each format at its last occurrence in the completion:

========== ==========================================================================
``tag``     ``<answer>14</answer>`` (the tag name is configurable)
``boxed``   ``\\boxed{14}`` (braces balanced)
``hash``    ``#### 14`` (GSM8K), to the end of its line
``colon``   ``answer: 14`` / ``Final Answer: 14``, to the end of its line
``is``      ``the answer is 14`` / ``the final answer is: 14``, to the end of its line
``last``    the last number anywhere (a fallback: it finds a number in any prose)
========== ==========================================================================

Kinds decide what counts as an answer, so prose is never one: ``number`` keeps the first number of the
candidate (after its last ``=``: ``#### 5 + 9 = 14`` is 14); ``math`` keeps the candidate when it holds
a digit, a LaTeX command or a math operator, or is one plain word (``Monday``); ``text``
keeps any candidate of at most ``max_words`` words (for tasks whose answers are words). A candidate of
the wrong kind (``#### It's apropos`` for a number) is skipped and the next format is tried.
``formatted`` says whether the answer came from a marker rather than the ``last`` fallback: the
``train/format_ok`` metric, and what ``format_reward`` pays for a wrong answer in a recognised format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

FORMATS = ("tag", "boxed", "hash", "colon", "is", "last")
# A number as written: ``1,000,000`` (thousands groups of exactly three digits), ``12``, ``0.5``, ``.5``.
# Digits followed by a thousands group are never a number of their own, so ``1,000`` can not be read as
# the list ``1, 000``.
NUMBER_PATTERN = r"(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+(?!,\d{3}(?![\d,])))(?:\.\d+)?|\.\d+"
SIGNED_NUMBER = re.compile(rf"(?<![\d.])-?(?:{NUMBER_PATTERN})")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASH = re.compile(r"####")
_COLON = re.compile(r"\banswer\s*:", re.IGNORECASE)
_IS = re.compile(r"\banswer\s+(?:is|was|would be|will be)\s*:?", re.IGNORECASE)
_MATHY = re.compile(r"\d|\\[a-zA-Z]+|[=+*/^<>√π∞-]")
_WORDS = re.compile(r"\S+")
_ONE_WORD = re.compile(r"[A-Za-z]+")
Kind = Literal["number", "math", "text"]


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (braces balanced), or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    start, depth = starts[-1], 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None  # unbalanced: truncated completion


def _tail(text: str, marker: re.Pattern, lines: int) -> str | None:
    """The first ``lines`` non-blank lines after the last ``marker`` (None without a marker)."""
    hits = list(marker.finditer(text))
    if not hits:
        return None
    rest = [line for line in text[hits[-1].end() :].splitlines() if line.strip()]
    return "\n".join(line.rstrip() for line in rest[:lines]).strip()


def _clean(text: str) -> str:
    text = text.strip().strip("*").strip().strip("$").strip()
    return text.rstrip(".").strip()


@dataclass
class AnswerParser:
    """The final answer of a completion (module docstring: formats, kinds, prose rejection).

    Args:
        formats: the formats to try, in order (``tag``, ``boxed``, ``hash``, ``colon``, ``is``, ``last``).
        kind: what an answer looks like: ``number``, ``math`` (LaTeX or numbers) or ``text``.
        tag: the tag of the ``tag`` format (``answer``: ``<answer>...</answer>``).
        max_words: the longest ``text`` answer, in words (longer is prose); None: no limit (grids).
        format_reward: reward for a wrong answer given in a marker format (0: off). A correct
            answer gets 1 whatever its format; correctness never depends on this.
    """

    formats: list[str] = field(default_factory=lambda: list(FORMATS))
    kind: Kind = "math"
    tag: str = "answer"
    max_words: int | None = 6
    format_reward: float = 0.0

    def __post_init__(self) -> None:
        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown or not self.formats:
            raise ValueError(f"AnswerParser formats must be among {list(FORMATS)}, got {self.formats}")
        if self.kind not in ("number", "math", "text"):
            raise ValueError(f"AnswerParser kind must be 'number', 'math' or 'text', got {self.kind!r}")
        self._tag = re.compile(rf"<{re.escape(self.tag)}>(.*?)</{re.escape(self.tag)}>", re.DOTALL)

    def candidate(self, completion: str, fmt: str, lines: int = 1) -> str | None:
        """What format ``fmt`` reads in ``completion`` before the kind check (None: the format is absent)."""
        if fmt == "tag":
            found = self._tag.findall(completion)
            return "\n".join(line.rstrip() for line in found[-1].strip().splitlines()) if found else None
        if fmt == "boxed":
            return last_boxed(completion)
        if fmt == "last":
            numbers = SIGNED_NUMBER.findall(completion)
            return numbers[-1] if numbers else None
        marker = {"hash": _HASH, "colon": _COLON, "is": _IS}[fmt]
        return _tail(completion, marker, lines)

    def accept(self, text: str, fmt: str) -> str | None:
        """``text`` as an answer of this parser's kind, or None when it is not one (prose, empty)."""
        text = _clean(text)
        if not text:
            return None
        if self.kind == "number":
            numbers = SIGNED_NUMBER.findall(text.rsplit("=", 1)[-1])
            return numbers[0].replace(",", "") if numbers else None
        if self.kind == "math":
            return text if _MATHY.search(text) or _ONE_WORD.fullmatch(text) else None
        return text if self.max_words is None or len(_WORDS.findall(text)) <= self.max_words else None

    def find(self, completion: str, lines: int = 1) -> tuple[str, str] | None:
        """``(answer, format)`` of the first format that holds an answer, or None.

        ``lines``: how many non-blank lines a marker's answer spans (grids of some puzzles).
        """
        for fmt in self.formats:
            got = self.candidate(completion, fmt, lines)
            answer = None if got is None else self.accept(got, fmt)
            if answer is not None:
                return answer, fmt
        return None

    def start(self, completion: str, lines: int = 1) -> int | None:
        """Offset of the first non-blank character of the text ``find`` reads its answer from, or None."""
        found = self.find(completion, lines)
        if found is None:
            return None
        fmt = found[1]
        if fmt == "tag":
            pos = list(self._tag.finditer(completion))[-1].start(1)
        elif fmt == "boxed":
            pos = list(_BOXED.finditer(completion))[-1].end()
        elif fmt == "last":
            pos = list(SIGNED_NUMBER.finditer(completion))[-1].start()
        else:
            pos = list({"hash": _HASH, "colon": _COLON, "is": _IS}[fmt].finditer(completion))[-1].end()
        while pos < len(completion) and completion[pos].isspace():
            pos += 1
        return pos

    def __call__(self, completion: str, lines: int = 1) -> str | None:
        """The answer ``completion`` commits to, or None."""
        found = self.find(completion, lines)
        return None if found is None else found[0]

    def formatted(self, completion: str) -> bool:
        """Whether the answer was given in a marker format (anything but the ``last`` number fallback)."""
        found = self.find(completion)
        return found is not None and found[1] != "last"

    def reward(self, correct: bool, completion: str) -> float:
        """1 when correct, else ``format_reward`` for an answer in a marker format, else 0."""
        if correct:
            return 1.0
        return self.format_reward if self.format_reward and self.formatted(completion) else 0.0
