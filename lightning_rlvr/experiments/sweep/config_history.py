"""A config file's digest, and the earlier version of it a digest names, read back from git's history.

Layer: experiments (imports nothing of the sweep). A run records the digest of each config file it used
(``identity.run_spec``). When a file changes later without changing what it sets (a default no longer
restated), the run's own resolved config tells that the run is still the same (``sweep/settings.py``);
a run archived before resolved configs were kept has only the digest. ``earlier_content`` finds the
committed version of the file with that digest, so the file as the run read it can be resolved again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path

import yaml

MISSING = "missing"


def text_digest(text: str | bytes) -> str:
    """A hash of the parsed YAML: a comment or layout edit changes nothing, a value does."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return MISSING
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_digest(path: str) -> str:
    """``text_digest`` of the file at ``path`` ("missing" when it cannot be read)."""
    try:
        return text_digest(Path(path).read_bytes())
    except OSError:
        return MISSING


def _git(*args: str) -> bytes | None:
    """``git ARGS``'s output, or None where git is missing, fails or hangs."""
    try:
        done = subprocess.run(["git", *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.lru_cache(maxsize=256)
def earlier_content(path: str, digest: str) -> bytes | None:
    """The newest committed content of ``path`` (relative to the working directory) whose digest is
    ``digest``, or None: not in a git checkout, never committed, or no version has that digest."""
    for commit in (_git("log", "--format=%H", "--", path) or b"").decode().split():
        content = _git("show", f"{commit}:./{path}")
        if content is not None and text_digest(content) == digest:
            return content
    return None
