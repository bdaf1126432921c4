"""Errors a user can fix: the CLI prints them as one line, without a traceback."""

from __future__ import annotations


class RLVRError(Exception):
    """Bad input (a config, a data file, a row): the message says what and where."""
