"""What the sandbox hides of this host: its world-writable directories and filesystem unix sockets.

Layer: rewards (imports nothing of the package). ``sandbox.py`` hands both lists to its harness, which
gives each world-writable directory a private one of its ``tmpfs`` and binds ``/dev/null`` over each
socket. Found by one walk per trainer process, cached in ``_SHARED`` (set it to None to walk again).
"""

from __future__ import annotations

import os
import stat

_SHARED: tuple[list[str], list[str]] | None = None


def host_shared_paths(max_depth: int = 4) -> tuple[list[str], list[str]]:
    """World-writable directories and filesystem unix sockets of the host (walked once, cached).

    The walk goes ``max_depth`` levels below ``/`` (``/var/lib/php/sessions`` is depth 3), skips
    ``/proc``, ``/sys`` and ``/tmp`` (replaced anyway) and does not follow symlinks; a full walk
    of a machine's tree can take minutes. Deeper world-writable directories stay read-only in the
    sandbox (every mount is), only not privately writable.
    """
    global _SHARED
    if _SHARED is None:
        shared, sockets, stack = [], [], [("/", 0)]
        while stack:
            path, depth = stack.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for e in entries:
                try:
                    if e.is_symlink():
                        continue
                    if e.is_dir():
                        if e.path in ("/proc", "/sys", "/tmp"):
                            continue
                        if e.stat(follow_symlinks=False).st_mode & 0o002:
                            shared.append(e.path)  # its subtree is replaced: no need to walk it
                        elif depth < max_depth:
                            stack.append((e.path, depth + 1))
                    elif not e.is_file() and stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                        sockets.append(e.path)
                except OSError:
                    continue
        _SHARED = (sorted(shared), sorted(sockets))
    return list(_SHARED[0]), list(_SHARED[1])
