"""Progress of a long step: a bar on a terminal, plain dated lines when output goes to a file.

Layer: ``core`` (imports nothing from the package). Building a game pool, a warm start and a long
evaluation take minutes; a run whose output is redirected (``> run.log 2>&1``, a batch job) must
still say what it is doing. On a terminal ``Progress`` is a ``tqdm`` bar; otherwise it writes one
line when the step starts, one at most every ``every_s`` seconds while it runs, and one when it ends,
each with the count, the elapsed time and (with a total) an estimate of the time left:

    lightning-rlvr: textworld pool: 12/52 games, 31 s elapsed, ~103 s left

Lines go to stderr, as the logging module's warnings do, so ``2>&1`` keeps them in order with those.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

PREFIX = "lightning-rlvr: "


def is_tty(stream: IO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def say(message: str, stream: IO | None = None) -> None:
    """One plain line on stderr (or ``stream``), flushed at once."""
    stream = sys.stderr if stream is None else stream
    print(PREFIX + message, file=stream, flush=True)


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


class Progress:
    """Count ``total`` units of ``desc``; ``update`` after each, ``close`` (or leave the ``with``) at the end.

    Args:
        total: units expected (None: unknown, no estimate).
        desc: what is being done ("textworld pool").
        unit: the unit's name in plain lines ("games").
        every_s: least seconds between two plain lines while running.
        enabled: False writes nothing (e.g. on ranks other than 0).
        stream: where to write (default stderr); a TTY gets a bar, anything else plain lines.
        bar: force the bar (True) or plain lines (False) instead of asking the stream.
        estimate: show the time left (off when ``total`` is only a bound, e.g. a step limit).
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "",
        every_s: float = 30.0,
        enabled: bool = True,
        stream: IO | None = None,
        bar: bool | None = None,
        estimate: bool = True,
    ) -> None:
        self.total, self.desc, self.unit, self.every_s = total, desc, unit, every_s
        self.stream = sys.stderr if stream is None else stream
        self.enabled, self.estimate = enabled, estimate
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self.start = self._last = time.monotonic()
        self._bar = None
        self._closed = False
        if not enabled:
            return
        if is_tty(self.stream) if bar is None else bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, file=self.stream)
        else:
            size = "" if total is None else f", {'at most ' if not estimate else ''}{total} {unit}".rstrip()
            say(f"{desc}: started{size}", self.stream)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(said=exc_type is None)  # an error or a stop says itself, in one line: no "(done)"

    def _line(self, final: bool) -> str:
        elapsed = time.monotonic() - self.start
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        parts = [f"{self.desc}: {count} {self.unit}".rstrip(), f"{_seconds(elapsed)} elapsed"]
        if self.estimate and not final and self.total and 0 < self.n < self.total:
            parts.append(f"~{_seconds(elapsed * (self.total - self.n) / self.n)} left")
        parts += [f"{k} {v}" for k, v in self.postfix.items()]
        return ", ".join(parts) + (" (done)" if final else "")

    def set_postfix(self, **values: Any) -> None:
        """Values shown with the count (``loss``, ``accuracy``)."""
        self.postfix.update(values)
        if self._bar is not None:
            self._bar.set_postfix(**values)

    def status(self, **values: Any) -> None:
        """Values shown with the count, said at once in plain lines if ``every_s`` has passed: for units
        long enough that their own steps should show (the credit lab's batches and their passes)."""
        self.set_postfix(**values)
        if self.enabled and self._bar is None:
            self._say_if_due()

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
        elif self.n != self.total:  # the last one: close() says it
            self._say_if_due()

    def _say_if_due(self) -> None:
        """A plain line, unless the last one was less than ``every_s`` ago."""
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            say(self._line(final=False), self.stream)

    def close(self, said: bool = True) -> None:
        """End the bar, or say the final plain line (``said=False``: end without it)."""
        if self._closed or not self.enabled:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif said:
            say(self._line(final=True), self.stream)
