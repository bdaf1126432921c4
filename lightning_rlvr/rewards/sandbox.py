"""Run untrusted Python (model-written code plus its tests) in a throwaway, limited process.

Each run gets a fresh working directory and a launcher process started in its
own session (so its own process group). The launcher, before it ``exec``s the
program:

1. enters a new network namespace (no interfaces up: every connect fails) and,
   when it can, a private mount namespace in which ``/tmp``, ``/var/tmp`` and
   ``/dev/shm`` are the working directory (so scratch files are thrown away too);
2. when running as root, drops to an unprivileged uid/gid of its own (one per
   concurrent run, from ``uid_base``; root ignores ``RLIMIT_NPROC``, an
   unprivileged uid does not);
3. sets ``RLIMIT_NPROC`` (fork bombs), ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``,
   ``RLIMIT_FSIZE`` and ``RLIMIT_NOFILE``;
4. runs ``main.py`` in that same interpreter (isolated mode, ``-I``; one interpreter
   start per run) with a clean environment (``PATH``, ``HOME``, ``TMPDIR`` and
   ``LANG`` only; the process starts with an empty one, nothing of the parent's).

The parent waits at most ``wall_s`` seconds, then kills the whole process group;
as root it also kills every process left under the run's uid (which catches a
child that called ``setsid`` to leave the group). Output goes to files bounded
by ``RLIMIT_FSIZE``; only the first ``output_bytes`` are read back.

Where a step is not possible (not root, no namespaces) the run still happens
with what is available; :func:`sandbox_report` says what was in force.
Not covered: the file system is not hidden (world-readable files stay readable,
read-only for the sandbox uid); there is no seccomp filter.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

_HEADER = "#SANDBOX "

# Runs as root (or the caller) in the fresh process, locks itself in, then runs the program.
_LAUNCHER = r"""
import ctypes, json, os, resource, sys
c = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
def unshare(flag):
    if libc.unshare(flag) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
state = {"net": False, "tmp": False}
if c["netns"]:
    try:
        unshare(0x40000000)  # CLONE_NEWNET
        state["net"] = True
    except OSError as e:
        state["net_error"] = os.strerror(e.errno)
    try:
        unshare(0x00020000)  # CLONE_NEWNS
        mount = libc.mount
        mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
        if mount(None, b"/", None, (1 << 14) | (1 << 18), None) != 0:  # MS_REC | MS_PRIVATE
            raise OSError(ctypes.get_errno(), "mount")
        wd = os.getcwd().encode()
        for t in (b"/var/tmp", b"/dev/shm"):  # before /tmp: wd lives under /tmp
            if os.path.isdir(t):
                mount(wd, t, None, 4096, None)  # MS_BIND
        if mount(wd, b"/tmp", None, 4096, None) == 0:
            state["tmp"] = True
            os.chdir("/tmp")  # the work dir, under its new name
            c["env"].update(HOME="/tmp", TMPDIR="/tmp")
    except OSError:
        pass
if os.geteuid() == 0 and c["uid"] is not None:
    os.setgroups([])
    os.setgid(c["gid"])
    os.setuid(c["uid"])
for name, (soft, hard) in c["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (soft, hard))
state["uid"] = os.getuid()
state["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
os.write(1, ("#SANDBOX " + json.dumps(state) + "\n").encode())
os.environ.clear()
os.environ.update(c["env"])
sys.argv[:] = ["main.py"]
sys.path[0] = os.getcwd()
del c, libc, state, unshare
import runpy
runpy.run_path("main.py", run_name="__main__")
"""

_REAPER = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"


@dataclass
class SandboxLimits:
    """Limits of one sandboxed run.

    Args:
        wall_s: wall-clock seconds before the whole process group is killed.
        cpu_s: CPU seconds (``RLIMIT_CPU``).
        memory_mb: address space (``RLIMIT_AS``).
        nproc: processes of the sandbox uid (``RLIMIT_NPROC``).
        fsize_mb: largest file the program may write, its stdout/stderr included (``RLIMIT_FSIZE``).
        nofile: open file descriptors (``RLIMIT_NOFILE``).
        output_bytes: how much of stdout/stderr is read back.
        isolate_network: enter a new network namespace (and a private /tmp) when possible.
        uid_base: first unprivileged uid used when running as root; run ``k`` of ``max_parallel``
            concurrent runs gets ``uid_base + k`` (gid likewise), so runs cannot see each other.
        max_parallel: most concurrent runs (the uid pool size).
        python: interpreter for the program; default: the first of this process's interpreter and
            ``python3`` on PATH that the sandbox uid can execute.
    """

    wall_s: float = 5.0
    cpu_s: int = 5
    memory_mb: int = 1024
    nproc: int = 32
    fsize_mb: int = 16
    nofile: int = 64
    output_bytes: int = 8192
    isolate_network: bool = True
    uid_base: int = 60000
    max_parallel: int = 64
    python: str | None = None


@dataclass
class SandboxResult:
    """What a run did. ``status``: ok (exit 0), failed (non-zero exit), timeout, or error (not started)."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    isolation: dict = field(default_factory=dict)  # what the launcher put in force: net, tmp, uid, nproc

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        """One line for a verdict's feedback."""
        if self.status in ("ok", "timeout"):
            return self.status
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return (lines[-1] if lines else f"exit code {self.returncode}")[:200]


def _is_root() -> bool:
    return os.geteuid() == 0


class _UidPool:
    """Hands each concurrent run its own uid (root only), across threads and processes.

    A uid is held by an ``flock`` on a lock file in the temp dir, so two trainings on one machine
    never share one (a shared uid would share the ``RLIMIT_NPROC`` budget and the reaper).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # uid -> lock file descriptor

    def acquire(self, limits: SandboxLimits) -> int:
        import fcntl

        deadline = time.monotonic() + 60
        while True:
            with self._lock:
                for uid in range(limits.uid_base, limits.uid_base + limits.max_parallel):
                    if uid in self._held:
                        continue
                    path = os.path.join(tempfile.gettempdir(), f"lightning_rlvr-sandbox-{uid}.lock")
                    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        os.close(fd)
                        continue
                    self._held[uid] = fd
                    return uid
            if time.monotonic() > deadline:
                raise RuntimeError("no free sandbox uid")
            time.sleep(0.01)

    def release(self, uid: int) -> None:
        with self._lock:
            os.close(self._held.pop(uid))  # closing the descriptor drops the flock


_UIDS = _UidPool()
_PYTHON_CACHE: dict[tuple, str] = {}


def _pids_of(uid: int) -> list[int]:
    """Live (not zombie) processes owned by ``uid``."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    state = f.read().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(entry.name))
    return pids


def _interpreter(limits: SandboxLimits, uid: int | None) -> str:
    """An interpreter the sandbox uid can run (probed once per candidate list and uid)."""
    candidates = [limits.python] if limits.python else [
        sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", ""),
        shutil.which("python3") or "", "/usr/bin/python3",
    ]  # fmt: skip
    candidates = [c for c in dict.fromkeys(candidates) if c]
    if uid is None:
        return candidates[0]
    key = (tuple(candidates), uid)
    if key not in _PYTHON_CACHE:
        for cand in candidates:
            try:
                probe = subprocess.run(
                    [cand, "-I", "-c", "pass"], user=uid, group=uid, extra_groups=[], env={},
                    cwd="/", capture_output=True, timeout=30,
                )  # fmt: skip
            except (OSError, subprocess.SubprocessError):
                continue
            if probe.returncode == 0:
                _PYTHON_CACHE[key] = cand
                break
        else:
            raise RuntimeError(f"no interpreter among {candidates} is executable by uid {uid}")
    return _PYTHON_CACHE[key]


def _reap(proc: subprocess.Popen, uid: int | None, python: str) -> None:
    """Kill the run's process group and, as root, everything still running under its uid."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if uid is None:
        return
    for attempt in range(20):
        if not _pids_of(uid):
            return
        if attempt % 4 == 0:
            # kill(-1) from a process of that uid reaches all of them at once (a fork bomb cannot outrun it)
            subprocess.run([python, "-I", "-S", "-c", _REAPER], user=uid, group=uid, extra_groups=[],
                           env={}, cwd="/", timeout=10, capture_output=True)  # fmt: skip
        time.sleep(0.005 * (attempt + 1))  # SIGKILLed processes take a moment to exit
    log.warning("sandbox: processes of uid %d survived the reaper", uid)


def _read(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox; never raises for anything the code does."""
    limits = limits or SandboxLimits()
    root = _is_root()
    uid = _UIDS.acquire(limits) if root else None
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    start = time.perf_counter()
    try:
        python = _interpreter(limits, uid)
        with open(os.path.join(workdir, "main.py"), "w") as f:
            f.write(code)
        out_path, err_path = os.path.join(workdir, ".stdout"), os.path.join(workdir, ".stderr")
        nproc = limits.nproc if root else limits.nproc + len(_pids_of(os.getuid()))
        mb = 1024 * 1024
        rlimits = {
            "RLIMIT_NPROC": (nproc, nproc),
            "RLIMIT_AS": (limits.memory_mb * mb, limits.memory_mb * mb),
            "RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1),
            "RLIMIT_FSIZE": (limits.fsize_mb * mb, limits.fsize_mb * mb),
            "RLIMIT_NOFILE": (limits.nofile, limits.nofile),
            "RLIMIT_CORE": (0, 0),
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        config = {"netns": limits.isolate_network and root, "uid": uid, "gid": uid, "rlimits": rlimits,
                  "python": python, "env": env}  # fmt: skip
        if root:
            for name in os.listdir(workdir):
                os.chown(os.path.join(workdir, name), uid, uid)
            os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [python, "-I", "-c", _LAUNCHER, json.dumps(config)], cwd=workdir, env={},
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, close_fds=True,
            )  # fmt: skip
        try:
            returncode, timed_out = proc.wait(timeout=limits.wall_s), False
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
        _reap(proc, uid, python)
        seconds = time.perf_counter() - start
        stdout, stderr = _read(out_path, limits.output_bytes + 512), _read(err_path, limits.output_bytes)
        isolation = {}
        if stdout.startswith(_HEADER):
            header, _, stdout = stdout.partition("\n")
            isolation = json.loads(header[len(_HEADER) :])
        status = "timeout" if timed_out else ("ok" if returncode == 0 else "failed")
        return SandboxResult(status, returncode, stdout[: limits.output_bytes], stderr, seconds, isolation)
    except Exception as err:  # noqa: BLE001 - a sandbox that cannot start scores 0, it does not crash training
        return SandboxResult("error", None, "", f"sandbox error: {type(err).__name__}: {err}",
                             time.perf_counter() - start)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if uid is not None:
            _UIDS.release(uid)


_REPORT: dict | None = None


def sandbox_report(limits: SandboxLimits | None = None) -> dict:
    """What isolation this machine gives (one probe run, cached): network namespace, private /tmp, uid."""
    global _REPORT
    if _REPORT is None:
        probe = "import os, resource\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0])\n"
        result = run_python(probe, limits or SandboxLimits(wall_s=30))
        _REPORT = {"status": result.status, "root": _is_root(), **result.isolation}
        if not result.isolation.get("net"):
            log.warning("sandbox: no network namespace (%s); sandboxed code can reach the network",
                        result.isolation.get("net_error", "not root"))  # fmt: skip
    return dict(_REPORT)
