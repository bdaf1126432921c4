"""Errors a user can fix: the CLI prints them as one line, without a traceback.

Layer: bottom (imports nothing from the package).
"""

from __future__ import annotations

import errno
import os
import sys

FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class RLVRError(Exception):
    """Bad input (a config, a data file, a row): the message says what and where."""


def yaml_problem(err: BaseException) -> str:
    """A YAML parse error as one phrase: ``(line L, column C): <problem>`` (the mark when it has one)."""
    mark = getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return f"{where}: {getattr(err, 'problem', None) or str(err).splitlines()[0]}"


def user_error(err: BaseException | None) -> RLVRError | None:
    """The user error behind ``err``, None for a bug.

    An ``RLVRError`` anywhere in the cause chain (jsonargparse re-raises them as parse errors), or a
    full disk: every file the project writes goes through ``core/files.py``'s atomic writes, so a write
    that ran out of space changed nothing, and the line says so instead of a traceback.
    """
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, RLVRError):
            return err
        if isinstance(err, OSError) and err.errno in FULL_DISK:
            where = f" {err.filename}" if err.filename else ""
            return RLVRError(
                f"cannot write{where}: {os.strerror(err.errno)}; files already written are unchanged "
                "(every write is atomic): free space, then run again (a fit resumes with --ckpt_path last)"
            )
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def exit_with_one_line(program: str, problem: object | None) -> None:
    """``program: error: <problem>`` on one line of stderr, exit status 2; nothing when ``problem`` is None.

    Every entry point's ``except`` block calls it with its user-error message (then re-raises a bug).
    """
    if problem is None:
        return
    sys.stderr.write(f"{program}: error: {' '.join(str(problem).split())}\n")
    raise SystemExit(2) from None
