"""Math answer equivalence through ``math-verify``: boxed and plain answers, numeric and LaTeX forms.

``reference_answer`` turns a dataset's answer cell into the final answer
(GSM8K's ``... #### 42`` keeps ``42``; a MATH solution keeps its last
``\\boxed{...}``). ``completion_answer`` finds the answer a model gave through the
shared ``AnswerParser`` (``rewards/answers.py``: tag, ``\\boxed{}``, ``####``, ``answer:``,
"the answer is"; never prose).
``math_equal`` then compares the two symbolically (``0.5``, ``1/2`` and
``\\frac{1}{2}`` are equal; ``2`` and ``3`` are not), with a normalised string
comparison as the fallback for answers sympy cannot parse.

Answers with several parts are compared whole. An answer is read as LaTeX
(``math-verify``'s LaTeX parser keeps ``(1, 5)`` an open interval / ordered pair,
``[1, 5]`` a closed interval, ``\\{1, 2\\}`` and a bare ``1, 5`` unordered sets). Digit groups
(``1,000``, ``1 000``, ``1\\,000``, thin spaces) are one number and the unicode minus is a minus
before math-verify sees them; math followed by words, its units (``3/4 cup``), is the math.
``math-verify``'s plain-text parser keeps only the last
number it sees, so it is used for one case only: a single number among words
(``18 dollars``). An answer of words without numbers (``\\text{Monday}``) is compared
as a string: the LaTeX parser would read ``Monday`` as a product of the letters,
which equals any anagram. A completion without a marker is read by ``math-verify``
from the free text, except that when its last number ends a list (``... 3, 5``)
the whole list is the answer (the free-text parser would keep the ``5``).

``math-verify`` bounds its parsing time with ``signal.alarm``, which only
works on the main thread; off the main thread the bound is dropped rather than
raising.
"""

from __future__ import annotations

import re
import threading

from .answers import GROUP_SEPARATOR, NUMBER_PATTERN, AnswerParser, last_boxed

_TIMEOUT_S = 5
_NUMBER = re.compile(rf"(?<![\d.])(?:{NUMBER_PATTERN})")
_THOUSANDS = re.compile(rf"(?<![\d.,])\d{{1,3}}(?:{GROUP_SEPARATOR}\d{{3}})+(?!\d|,\d)")
_SEPARATOR = re.compile(GROUP_SEPARATOR)
# A list of numbers, optionally bracketed: ``3, 5``, ``(1, -2)``, ``[0, 1]``.
_LIST = re.compile(
    rf"(?:[(\[{{]\s*|(?<![\d.,]))-?(?:{NUMBER_PATTERN})(?:\s*,\s*-?(?:{NUMBER_PATTERN}))+(?:\s*[)\]}}])?"
)
# Words (two letters or more, not a LaTeX command) that are not names of math functions or constants.
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")
_MATH_WORDS = frozenset(
    "sqrt pi sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln exp lg infty inf "
    "max min gcd lcm mod det deg".split()
)
_UNITS = re.compile(r"(?:\s+(?:\\text\s*\{[^{}]*\}|[a-zA-Z]{2,})\.?)+\s*$")  # trailing words: units
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")


def _timeout() -> int | None:
    return _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _clean(text: str) -> str:
    text = text.strip().strip("$").strip()
    return text.rstrip(".").strip()


def drop_thousands_separators(text: str) -> str:
    """``1,234,567`` / ``1 234 567`` -> ``1234567``, and the unicode minus as ``-`` (numbers as math-verify
    reads them, ``answers.GROUP_SEPARATOR``); commas between other numbers (``1, 5``, ``1,5``, ``1,0000``)
    are kept."""
    return _THOUSANDS.sub(lambda m: _SEPARATOR.sub("", m.group()), text.replace("\u2212", "-"))


def reference_answer(text: str) -> str:
    """The final answer inside a dataset's answer cell (GSM8K ``#### 42``, a MATH ``\\boxed{}``, or as is)."""
    text = str(text)
    if "####" in text:
        return drop_thousands_separators(_clean(text.rsplit("####", 1)[1]))
    boxed = last_boxed(text)
    return _clean(boxed if boxed is not None else text)


MATH_ANSWERS = AnswerParser(kind="math")  # MathTask's default parser


def completion_answer(completion: str, parser: AnswerParser = MATH_ANSWERS) -> str | None:
    """The answer a completion commits to in a marker format (``parser`` without its ``last`` fallback)."""
    found = parser.find(completion)
    return None if found is None or found[1] == "last" else found[0]


def trailing_list(completion: str, at: int | None = None) -> str | None:
    """The list of numbers (``3, 5``, ``(1, 5)``) that holds the completion's last number (or the number
    starting at offset ``at``), if any."""
    numbers = list(_NUMBER.finditer(completion))
    if at is None and numbers:
        at = numbers[-1].start()
    for found in _LIST.finditer(completion) if at is not None else ():
        if found.start() <= at < found.end():
            return found.group().strip()
    return None


def _parse(text: str) -> list:
    """``math-verify``'s reading of one answer, or [] to compare it as a string (see the module)."""
    from math_verify import parse

    text = drop_thousands_separators(text)
    n_numbers = len(_NUMBER.findall(text))
    words = [w for w in _WORD.findall(text) if w.lower() not in _MATH_WORDS]
    bare = _UNITS.sub("", text)
    if words and n_numbers > 1 and not [w for w in _WORD.findall(bare) if w.lower() not in _MATH_WORDS]:
        text, words = bare, []  # ``3/4 cup``: math followed by its units is the math
    if words and n_numbers == 0:
        return []  # text: the LaTeX parser would read the letters as a product of variables
    if words and n_numbers == 1:
        attempts = [text, f"${text}$"]  # one number with units or words: the plain parser reads the number
    else:
        # the plain-text parser keeps only the last number, so it is a fallback for single numbers only
        attempts = [f"${text}$"] + ([text] if n_numbers <= 1 else [])
    for attempt in attempts:
        parsed = parse(attempt, parsing_timeout=_timeout())
        if parsed:
            return parsed
    return []


def _normalise(text: str) -> str:
    """Text for the string comparison: no ``\\text{}`` wrappers, thousands separators, ``$``, ``\\!`` or case;
    spaces are dropped except between two digits (``1 5`` must not become ``15``)."""
    text = drop_thousands_separators(_TEXT_MACRO.sub(r"\1", _clean(text)))
    text = re.sub(r"\s+", " ", text.replace("\\!", "").replace("$", "")).strip()
    return re.sub(r"(?<!\d) | (?!\d)", "", text).lower()


def math_equal(predicted: str, reference: str) -> bool:
    """Whether two final answers are mathematically equal (symbolic compare, then string compare)."""
    from math_verify import verify

    gold, pred = _parse(reference), _parse(predicted)
    if gold and pred and verify(gold, pred, timeout_seconds=_timeout()):
        return True
    return _normalise(predicted) == _normalise(reference)


def math_reward(completion: str, reference: str, parser: AnswerParser = MATH_ANSWERS) -> tuple[float, str]:
    """``(reward, feedback)`` for a completion against a dataset answer cell.

    The answer is the parser's (a marker format); its ``last`` fallback is, for math, the list the last
    number ends or else what ``math-verify`` reads in the free text. The reward is ``parser.reward``.
    """
    gold = reference_answer(reference)
    got = completion_answer(completion, parser)
    fallback = "last" in parser.formats
    if got is None and fallback:
        got = trailing_list(completion)
    if got is None and not fallback:
        return 0.0, "no answer found"
    if got is None:  # no marker: let math-verify pick the answer out of the free text
        from math_verify import parse, verify

        pred = parse(drop_thousands_separators(completion), parsing_timeout=_timeout())
        if not pred:
            return 0.0, "no answer found"
        ok = bool(verify(_parse(gold), pred, timeout_seconds=_timeout()))
        shown = str(pred[-1])
    else:
        ok, shown = math_equal(got, gold), got
    return parser.reward(ok, completion), "correct" if ok else f"wrong answer {shown[:80]}"
