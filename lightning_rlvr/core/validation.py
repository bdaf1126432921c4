"""Settings checked when the module is built: one clear line instead of a traceback mid-run."""

from __future__ import annotations

from typing import Any

from .errors import RLVRError


def check_settings(
    positive_ints: dict[str, Any],
    non_negative_ints: dict[str, Any],
    positive_floats: dict[str, Any],
    top_p: Any = 1.0,
) -> None:
    """Raise an ``RLVRError`` naming the first setting out of range or of the wrong type.

    Checked when the module is built, so a bad value stops the run before any model
    load or warm start, with a line that says what to change (not a traceback mid-run).
    """
    for name, value in positive_ints.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RLVRError(f"model.{name} must be a whole number >= 1, got {value!r}")
    for name, value in non_negative_ints.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RLVRError(f"model.{name} must be a whole number >= 0, got {value!r}")
    for name, value in positive_floats.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            hint = " (greedy decoding is not supported: use e.g. 0.1)" if name == "temperature" else ""
            raise RLVRError(f"model.{name} must be a number > 0, got {value!r}{hint}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise RLVRError(f"model.top_p must be in (0, 1] (1.0 = off), got {top_p!r}")
