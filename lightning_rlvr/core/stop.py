"""Stopping a run on a signal: SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 end it within seconds, wherever it is.

Layer: ``core`` (imports nothing from the package). ``install`` replaces the handlers of those signals
with one that only records the request; the long loops call ``check(where)`` at every safe point
(between generated tokens, between micro-batches of the update and of a scoring pass, between warm-start
steps, before each completion's verifier), which raises
``StopRequested`` once a stop was asked for. Nothing is interrupted half-way through a write, and no
``except Exception`` swallows the stop (it is a ``BaseException``, like ``KeyboardInterrupt``).

A run that reaches no check within ``grace_s`` (inside a long C call, one slow verifier, a model download)
is ended by a watchdog thread with ``os._exit`` after ``on_overdue`` has said so; a second signal ends
it at once the same way. Every file the project writes is atomic, so either way a reader finds the
previous version or the new one.

``during(phase)`` and ``set_phase(phase)`` name what the run is doing ("validation at step 12"), so
the stop can say where it was. Without ``install`` no handler changes and ``check`` only records.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class StopRequested(BaseException):  # noqa: N818 - a request, like KeyboardInterrupt, not an error
    """Raised by ``check`` after a stop signal: ``signum`` and ``place`` (what the run was doing)."""

    def __init__(self, signum: int, place: str) -> None:
        super().__init__(f"stopped by {signal_name(signum)} {place}")
        self.signum, self.place = signum, place

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code(signum: int) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(signum)


class _State:
    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0  # monotonic time of the first signal
        self.where = ""  # the last check's place
        self.phases: list[str] = [""]  # [0]: set_phase's; above it, during()'s
        self.lock = threading.Lock()
        self.overdue: Callable[[int, str], None] | None = None
        self.ended = False  # the watchdog or a second signal is ending the process


_state = _State()


def requested() -> int | None:
    """The signal that asked the run to stop, or None."""
    return _state.signum


def phase() -> str:
    """What the run is doing, innermost first named ("validation at step 12"); "" when nothing was set."""
    return next((p for p in reversed(_state.phases) if p), "")


def place(where: str | None = None) -> str:
    """``where`` (default: the last check's) and the phase, as one phrase: "while generating tokens
    during validation at step 12"."""
    where = _state.where if where is None else where
    now = phase()
    return " ".join(p for p in (where, f"during {now}" if now else "") if p) or "before any step"


def check(where: str) -> None:
    """A safe point: raise ``StopRequested`` if a stop signal has arrived (``where``: "while generating
    tokens", "in an update micro-batch")."""
    _state.where = where
    if _state.signum is not None:
        raise StopRequested(_state.signum, place(where))


def set_phase(name: str) -> None:
    """Name the run's current phase (the trainer's hooks set it: "training step 13", "the test")."""
    _state.phases[0] = name


@contextlib.contextmanager
def during(name: str) -> Iterator[None]:
    """Name a phase nested in the current one (the warm start inside the fit's setup)."""
    _state.phases.append(name)
    try:
        yield
    finally:
        _state.phases.pop()


def _handle(signum: int, frame) -> None:
    if _state.signum is None:
        _state.signum, _state.at = signum, time.monotonic()
        return
    _end(signum, "a second signal")  # asked twice: no waiting for a safe point


def claim_report() -> bool:
    """True for the first caller only: the one that reports the stop (the run's own exit path, or the
    watchdog's forced exit), so the stop is said once."""
    with _state.lock:
        first, _state.ended = not _state.ended, True
    return first


def _end(signum: int, why: str) -> None:
    """Say so through ``overdue`` and end the process now (the watchdog's or a second signal's way)."""
    if not claim_report():
        return
    if _state.overdue is not None:
        try:
            _state.overdue(_state.signum or signum, why)
        except BaseException:  # noqa: BLE001 - the process ends whatever the report does
            pass
    os._exit(exit_code(_state.signum or signum))


def _watch(grace_s: float, stop_watching: threading.Event) -> None:
    while not stop_watching.wait(0.1):
        if _state.signum is not None and time.monotonic() - _state.at > grace_s:
            _end(_state.signum, f"no safe point within {grace_s:g} s")
            return


def install(
    signals: tuple[int, ...] = STOP_SIGNALS,
    grace_s: float | None = 10.0,
    on_overdue: Callable[[int, str], None] | None = None,
) -> Callable[[], None]:
    """Handle ``signals`` as stop requests; returns the function that puts the previous handlers back.

    Args:
        signals: the signals that stop the run.
        grace_s: seconds from the signal to the forced exit when no ``check`` is reached (None: never).
        on_overdue: called as ``on_overdue(signum, why)`` just before a forced exit (say where and why).

    Only the main thread can set handlers: elsewhere this changes nothing. The request of an earlier
    install is cleared.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    reset()
    _state.overdue = on_overdue
    previous = {s: signal.signal(s, _handle) for s in signals}
    stop_watching = threading.Event()
    if grace_s is not None:
        threading.Thread(target=_watch, args=(grace_s, stop_watching), daemon=True, name="stop-watch").start()

    def restore() -> None:
        stop_watching.set()
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        _state.overdue = None

    return restore


def reset() -> None:
    """Forget a request and the phases (a new run in the same process)."""
    _state.signum, _state.where, _state.phases, _state.ended = None, "", [""], False
