"""The one answer parser every task reads completions with: which text a completion commits to.

Layer: ``rewards`` (imports only the standard library). Real models state answers in many ways;
``AnswerParser`` tries its ``formats`` in order and returns the first that holds an answer of the
expected ``kind``, each format at its last occurrence in the completion:

========== ==========================================================================
``tag``     ``<answer>14</answer>`` (the tag name is configurable)
``boxed``   ``\\boxed{14}`` (braces balanced)
``hash``    ``#### 14`` (GSM8K), to the end of its sentence
``colon``   ``answer: 14`` / ``Final Answer: 14``, to the end of its sentence
``is``      ``the answer is 14`` / ``the final answer is: 14``, to the end of its sentence
``last``    the last number anywhere (a fallback: it finds a number in any prose)
========== ==========================================================================

A marker's answer ends where its line ends and, for ``number`` and ``math``, where its sentence ends
(``The answer is 18. I used 3 steps.`` is 18; ``approx. 5`` and ``3.5`` go on). Numbers are read as
math-verify reads them: digit groups of three after a comma, a space, a thin or no-break space or
LaTeX's ``\\,`` are one number (``1,000``, ``1 000``, ``1\u2009000``), and the unicode minus ``\u2212``
is a minus. ``number_value`` gives a number's value, so number tasks compare ``51 == 51.0``.

Kinds decide what counts as an answer, so prose is never one: ``number`` keeps the first number of the
candidate (after its last ``=``: ``#### 5 + 9 = 14`` is 14), written canonically (``1,000.50`` ->
``1000.5``); ``math`` keeps the candidate when it holds a digit, a LaTeX command or a math operator, or
is one plain word (``Monday``); ``text`` keeps any candidate of at most ``max_words`` words (for tasks
whose answers are words) exactly as written: only the marker and the whitespace around it are dropped
(a dataset's own scorer compares that text, so ``<answer>8 or 1.</answer>`` stays ``8 or 1.``).
A candidate of the wrong kind (``#### It's apropos`` for a number) is skipped and the next format is
tried. For ``number``, ``last`` skips numbers after the last equation's result that restate numbers
written before its ``=`` (``25 + 31 = 56  This is the result of 25 + 31`` is 56, not 31); a completion
still commits to one number, so listing many never helps.
``formatted`` says whether the answer came from a marker rather than the ``last`` fallback: the
``train/format_ok`` metric, and what ``format_reward`` pays for a wrong answer in a recognised format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

FORMATS = ("tag", "boxed", "hash", "colon", "is", "last")
# What may sit between digit groups of three: a comma, a space, a no-break, thin or narrow no-break
# space, or LaTeX's thin space ``\,``, ``{,}`` and ``\ ``.
GROUP_SEPARATOR = r"(?:,|[ \u00a0\u2009\u202f]|\\,|\{,\}|\\ )"
# A number as written: ``1,000,000`` / ``1 000`` (groups of exactly three digits), ``12``, ``0.5``, ``.5``.
# Digits followed by a group are never a number of their own, so ``1,000`` can not be read as the list
# ``1, 000``; a group followed by more digits (``1,0000``) is not one.
NUMBER_PATTERN = (
    rf"(?:\d{{1,3}}(?:{GROUP_SEPARATOR}\d{{3}})+(?!\d|,\d)|\d+(?!\d|{GROUP_SEPARATOR}\d{{3}}(?!\d|,\d)))"
    r"(?:\.\d+)?|\.\d+"
)
MINUS = "-\u2212"  # ASCII hyphen-minus and the unicode minus sign
SIGNED_NUMBER = re.compile(rf"(?<![\d.])[{MINUS}]?(?:{NUMBER_PATTERN})")
_SEPARATORS = re.compile(GROUP_SEPARATOR)
_RESULT = re.compile(rf"=\s*({SIGNED_NUMBER.pattern})")
# A sentence ends at '.' or '?' before a space or the end (not a decimal point, not '...', not an
# abbreviation before a number: ``approx. 5``).
_SENTENCE_END = re.compile(r"(?<!\.)(?:\?|(?<![a-z])\.|\.(?!\s+\d))(?!\.)(?=\s|$)")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASH = re.compile(r"####")
_COLON = re.compile(r"\banswer\s*:", re.IGNORECASE)
_IS = re.compile(r"\banswer\s+(?:is|was|would be|will be)\s*:?", re.IGNORECASE)
_MATHY = re.compile(r"\d|\\[a-zA-Z]+|[=+*/^<>√π∞\u2212-]")
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


def number_value(text: str) -> Decimal | None:
    """The value of ``text`` when it is one number as written (``1,000``, ``1 000``, ``\u22123``, ``51.00``,
    a trailing period allowed), else None."""
    text = text.strip()
    text = text[:-1] if text.endswith(".") else text
    if not SIGNED_NUMBER.fullmatch(text):
        return None
    return Decimal(_SEPARATORS.sub("", text).replace("\u2212", "-"))


def canonical_number(text: str) -> str:
    """A number as written, in one canonical form: ``1,000.50`` -> ``1000.5``, ``\u22123`` -> ``-3``."""
    value = number_value(text)
    if value is None:
        raise ValueError(f"not a number: {text!r}")
    return "0" if value == 0 else format(value.normalize(), "f")


def last_number(text: str) -> re.Match | None:
    """The number the ``last`` format reads: the last one, except that after the result of the last
    equation, numbers that restate numbers written before its ``=`` are skipped (see the module)."""
    numbers = list(SIGNED_NUMBER.finditer(text))
    results = list(_RESULT.finditer(text))
    if not numbers or not results:
        return numbers[-1] if numbers else None
    result = results[-1]
    before = {number_value(m.group()) for m in numbers if m.end() <= result.start()}
    after = [m for m in numbers if m.start() >= result.end()]
    if not before:
        return numbers[-1]
    new = [m for m in after if number_value(m.group()) not in before]
    return new[-1] if new else next(m for m in numbers if m.start() == result.start(1))


def first_sentence(text: str) -> str:
    """``text`` up to where its first sentence ends (``18. I used 3 steps`` -> ``18``)."""
    end = _SENTENCE_END.search(text)
    return text if end is None else text[: end.start()]


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
            number = last_number(completion)
            return None if number is None else number.group()
        marker = {"hash": _HASH, "colon": _COLON, "is": _IS}[fmt]
        got = _tail(completion, marker, lines)
        if fmt == "colon" and got is not None and _IS.search(got):  # Final Answer: the final answer is 5
            got = got[list(_IS.finditer(got))[-1].end() :].strip()
        return got

    def accept(self, text: str, fmt: str) -> str | None:
        """``text`` as an answer of this parser's kind, or None when it is not one (prose, empty)."""
        if self.kind == "text":  # as written: only the marker's own layout is dropped (module)
            if fmt in ("tag", "boxed"):
                text = text.strip()  # an empty tag is an answer: some datasets' answer is the empty text
            else:
                text = text.strip().strip("*").strip()
                if not text:
                    return None
            return text if self.max_words is None or len(_WORDS.findall(text)) <= self.max_words else None
        text = _clean(first_sentence(text) if fmt in ("hash", "colon", "is") else text)
        if not text:
            return None
        if self.kind == "number":
            numbers = SIGNED_NUMBER.findall(text.rsplit("=", 1)[-1])
            return canonical_number(numbers[0]) if numbers else None
        return text if _MATHY.search(text) or _ONE_WORD.fullmatch(text) else None

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
            pos = last_number(completion).start()
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
