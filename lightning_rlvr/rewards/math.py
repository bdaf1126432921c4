"""Math answer equivalence through ``math-verify``: boxed and plain answers, numeric and LaTeX forms.

``reference_answer`` turns a dataset's answer cell into the final answer
(GSM8K's ``... #### 42`` keeps ``42``; a MATH solution keeps its last
``\\boxed{...}``). ``completion_answer`` finds the answer a model gave: its
last ``\\boxed{}``, else the text after its last ``####`` or ``answer:``,
else whatever ``math-verify`` extracts from the whole completion.
``math_equal`` then compares the two symbolically (``0.5``, ``1/2`` and
``\\frac{1}{2}`` are equal; ``2`` and ``3`` are not), with a plain string
comparison as the fallback for answers sympy cannot parse.

``math-verify`` bounds its parsing time with ``signal.alarm``, which only
works on the main thread; off the main thread the bound is dropped rather than
raising.
"""

from __future__ import annotations

import re
import threading

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_TAIL = re.compile(r"(?:####|answer\s*(?:is)?\s*:)", re.IGNORECASE)
_LATEX_HINT = re.compile(r"[\\^_{}]")
_TIMEOUT_S = 5


def _timeout() -> int | None:
    return _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


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


def _clean(text: str) -> str:
    text = text.strip().strip("$").strip()
    return text.rstrip(".").strip()


def reference_answer(text: str) -> str:
    """The final answer inside a dataset's answer cell (GSM8K ``#### 42``, a MATH ``\\boxed{}``, or as is)."""
    text = str(text)
    if "####" in text:
        return _clean(text.rsplit("####", 1)[1]).replace(",", "")
    boxed = last_boxed(text)
    return _clean(boxed if boxed is not None else text)


def completion_answer(completion: str) -> str | None:
    """The answer a completion commits to, as text (None if it gives none)."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    tails = list(_ANSWER_TAIL.finditer(completion))
    if tails:
        tail = completion[tails[-1].end() :].strip()
        tail = tail.splitlines()[0] if tail else ""
        return _clean(tail) or None
    return None


def _parse(text: str) -> list:
    from math_verify import parse

    attempts = [f"${text}$", text] if _LATEX_HINT.search(text) else [text, f"${text}$"]
    for attempt in attempts:
        parsed = parse(attempt, parsing_timeout=_timeout())
        if parsed:
            return parsed
    return []


def _normalise(text: str) -> str:
    return re.sub(r"\s+", "", text).replace(",", "").replace("\\!", "").lower()


def math_equal(predicted: str, reference: str) -> bool:
    """Whether two final answers are mathematically equal (symbolic compare, then string compare)."""
    from math_verify import verify

    gold, pred = _parse(reference), _parse(predicted)
    if gold and pred and verify(gold, pred, timeout_seconds=_timeout()):
        return True
    return _normalise(predicted) == _normalise(reference)


def math_reward(completion: str, reference: str) -> tuple[float, str]:
    """``(reward, feedback)`` for a completion against a dataset answer cell."""
    gold = reference_answer(reference)
    got = completion_answer(completion)
    if got is None:  # no marker: let math-verify pick the answer out of the free text
        from math_verify import parse, verify

        pred = parse(completion, parsing_timeout=_timeout())
        if not pred:
            return 0.0, "no answer found"
        ok = bool(verify(_parse(gold), pred, timeout_seconds=_timeout()))
        shown = str(pred[-1])
    else:
        ok, shown = math_equal(got, gold), got
    return float(ok), "correct" if ok else f"wrong answer {shown[:80]}"
