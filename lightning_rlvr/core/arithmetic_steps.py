"""Checkable intermediate results in free text: arithmetic equations and first differences (bottom layer).

Imports nothing of the package. ``first_wrong_result(text)`` finds every equation ``<expr> = <number>``
whose left side is plain arithmetic on numbers (``+ - * /``, ``x``, parentheses) and returns the offset
of the first character of the first result that is wrong (where the written number first departs from
the true value's digits), or None when every equation holds. ``first_difference(a, b)`` is the length
of the common prefix of two strings.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Sequence
from fractions import Fraction

_NUM = r"-?\d+(?:\.\d+)?"
_TERM = rf"\(*\s*{_NUM}\s*\)*"
EQUATION = re.compile(rf"(?<![\w.)])({_TERM}(?:\s*[-+*/x×]\s*{_TERM})+)\s*=\s*({_NUM})")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("not plain arithmetic")


def evaluate(expression: str) -> Fraction | None:
    """The exact value of a plain arithmetic expression; None when it is not one (or divides by 0)."""
    try:
        return _value(ast.parse(expression.replace("×", "*").replace("x", "*"), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def first_difference(a: Sequence, b: Sequence) -> int:
    """Length of the common prefix of ``a`` and ``b`` (the first index where they differ): strings or
    token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def first_wrong_result(text: str) -> int | None:
    """Offset of the first wrong character of the first wrong ``<expr> = <number>`` result, or None."""
    for m in EQUATION.finditer(text):
        value = evaluate(m.group(1))
        if value is None:
            continue
        written = m.group(2)
        if Fraction(written) != value:
            return m.start(2) + min(first_difference(written, _text(value)), len(written) - 1)
    return None
