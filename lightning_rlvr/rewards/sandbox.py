"""Run untrusted Python (model-written code) in a throwaway, locked-in process; judge it from outside.

Design (why the verdict cannot be forged)
------------------------------------------
Each run starts one trusted *harness* process (``python -I -c _HARNESS``). The harness:

1. enters new mount, PID, network, IPC and UTS namespaces (as an unprivileged user, a new user
   namespace too, in which it maps only its own uid); if that is impossible the run is refused
   with one :class:`~lightning_rlvr.core.errors.RLVRError` unless ``SandboxLimits.unsafe`` is set;
2. makes every mount read-only (``mount_setattr(AT_RECURSIVE)``, or a remount per mount on older
   kernels), mounts a size-limited ``tmpfs`` on ``/tmp`` (the work dir: bounds the total disk use),
   gives each world-writable directory of the host (found once per trainer process, by a walk of
   the tree up to depth 5: ``sandbox_host.py``) a private directory of that ``tmpfs``, and binds
   ``/dev/null`` over each filesystem unix socket it found (abstract sockets are per network namespace);
3. forks a trusted *init* (PID 1 of the new PID namespace: it mounts a fresh ``/proc`` and dies with
   the harness), which forks the *worker*. The worker drops to an unprivileged uid of its own (as
   root: ``sandbox_user.py``) or drops every capability (in a user namespace), sets ``no_new_privs``
   (setuid files do not elevate), ``RLIMIT_NPROC``/``AS``/``CPU``/``FSIZE``/``NOFILE``, an empty
   environment, and only then runs the candidate's code. It holds only stdin (/dev/null),
   stdout/stderr (pipes drained by the harness) and the two pipes of its call channel;
4. runs the *tests* itself (:func:`run_tests`). The tests never enter the sandbox, so the candidate
   cannot read them. Every call of a candidate function from the tests crosses the channel: the
   arguments go to the worker, the worker calls the function and sends back only plain data
   (None, bool, int, float, complex, str, bytes, list, tuple, dict, set; subclasses become their
   base type, numpy values their ``tolist()``), which the harness rebuilds from a tagged JSON form
   with its own code. The tests then compare real Python values: an object whose ``__eq__`` says
   True to everything never reaches them. Exiting (``sys.exit``, ``os._exit``, a thread, atexit or
   excepthook tricks) only ends the worker: the pending call fails, and the verdict is the
   harness's, written to a pipe only the harness holds;
5. when the tests end (or at ``wall_s``) kills init, which makes the kernel kill every process of
   the PID namespace, whatever its uid or session. The trainer reads the verdict from the
   harness's stdout pipe; nothing is reopened by path after the run.

:func:`run_python` runs a plain program the same way (no tests; the result is its exit status):
for tools and tests, never a reward.

What it does not do: it has no seccomp filter (the kernel's whole syscall surface is reachable);
world-readable host files stay readable (read-only), and in the unprivileged (user namespace)
mode so does every file the trainer's own uid may read; a unix socket created after the walk (or
deeper than it) stays reachable; CPU time is limited per process, not per run; a candidate can
still special-case the inputs it is called with (tests whose inputs appear in the prompt can be
memorised); tests that need objects of the candidate's own classes, or pass functions to the
candidate, fail (only plain data crosses).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import RLVRError
from .sandbox_host import host_shared_paths
from .sandbox_user import UIDS, interpreter

log = logging.getLogger(__name__)

# new mount, UTS, IPC, PID and network namespaces; a user namespace is added when not root
_NAMESPACES = 0x00020000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000
_USERNS = 0x10000000
_ISOLATION_EXIT = 112  # init's exit status when it cannot mount a private /proc

# The trusted harness's source: a standalone script that shares no code with the package.
_HARNESS = (Path(__file__).parent / "sandbox_harness.py").read_text()
_DIES_WITH = "import ctypes, os\nctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\nos.getppid() == {} or os._exit(1)\n"


@dataclass
class SandboxLimits:
    """Limits of one sandboxed run.

    Args:
        wall_s: wall-clock seconds for the whole run (candidate and tests); then everything is killed.
        cpu_s: CPU seconds of each sandboxed process (``RLIMIT_CPU``).
        memory_mb: address space of each sandboxed process (``RLIMIT_AS``).
        nproc: processes the sandboxed code may have at once (``RLIMIT_NPROC``).
        fsize_mb: largest file the program may write (``RLIMIT_FSIZE``).
        disk_mb: size of the work dir (a ``tmpfs`` on ``/tmp``) that holds everything the code may
            write, the private copies of world-writable directories included.
        nofile: open file descriptors (``RLIMIT_NOFILE``).
        output_bytes: how much of stdout (first bytes) and stderr (last bytes) is kept.
        uid_base: first unprivileged uid used when running as root; run ``k`` of ``max_parallel``
            concurrent runs gets ``uid_base + k`` (gid likewise), so runs cannot see each other.
        max_parallel: most concurrent runs (the uid pool size).
        python: interpreter for the sandbox; default: the first of this process's interpreter and
            ``python3`` on PATH that the sandbox uid can execute.
        unsafe: run even where the namespaces cannot be created (neither root nor unprivileged user
            namespaces): the code then runs with rlimits only and can reach the network, the host's
            files and processes of the trainer's uid. Off by default: such a machine raises an error.
    """

    wall_s: float = 5.0
    cpu_s: int = 5
    memory_mb: int = 1024
    nproc: int = 32
    fsize_mb: int = 16
    disk_mb: int = 64
    nofile: int = 64
    output_bytes: int = 8192
    uid_base: int = 60000
    max_parallel: int = 64
    python: str | None = None
    unsafe: bool = False


@dataclass
class SandboxResult:
    """What a run did. ``status``: ok (exit 0 / all tests passed), failed, timeout, or error (not started).

    ``error`` is the harness's one-line reason (the failing test's exception, "timeout", "the
    program exited: ..."); ``isolation`` what was in force (namespaces, uid, nproc, tmpfs, ...).
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    isolation: dict = field(default_factory=dict)
    error: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        """One line for a verdict's feedback."""
        if self.status in ("ok", "timeout"):
            return self.status
        if self.error:
            return self.error.splitlines()[0][:200] if self.error.strip() else self.status
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return (lines[-1] if lines else f"exit code {self.returncode}")[:200]


def _is_root() -> bool:
    return os.geteuid() == 0


# pseudo file systems that may stay writable in the harness's remount fallback (older kernels)
_PSEUDO_FS = [
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "binfmt_misc",
    "autofs",
    "devpts",
    "efivarfs",
    "hugetlbfs",
    "nsfs",
]


def _owned(entry: os.DirEntry) -> bool:
    try:
        return entry.stat().st_uid == os.getuid()
    except OSError:
        return False


def _run(payload: dict, limits: SandboxLimits) -> SandboxResult:
    """Run the harness on ``payload`` (code, tests, mode) under ``limits``."""
    start = time.perf_counter()
    root = _is_root()
    uid = UIDS.acquire(limits.uid_base, limits.max_parallel) if root else None
    try:
        python = interpreter(limits.python, uid)
        mb = 1024 * 1024
        # in a user namespace the harness and init count against the namespace's process limit too
        nproc = limits.nproc if root else limits.nproc + 2
        if limits.unsafe and not root:  # perhaps no user namespace: the limit then counts all our processes
            nproc += sum(1 for e in os.scandir("/proc") if e.name.isdigit() and _owned(e))
        shared, sockets = host_shared_paths()
        config = {
            **payload,
            "wall_s": limits.wall_s,
            "unsafe": limits.unsafe,
            "ns_flags": _NAMESPACES,
            "userns_flag": _USERNS,
            "isolation_exit": _ISOLATION_EXIT,
            "pseudo_fs": _PSEUDO_FS,
            "disk_mb": limits.disk_mb,
            "inodes": 4096,
            "shared_dirs": shared,
            "sockets": sockets,
            "uid": uid,
            "host_uid": os.getuid(),
            "output_bytes": limits.output_bytes,
            "reply_bytes": 16 * mb,
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            "rlimits": {
                "RLIMIT_NPROC": (nproc, nproc),
                "RLIMIT_AS": (limits.memory_mb * mb, limits.memory_mb * mb),
                "RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1),
                "RLIMIT_FSIZE": (limits.fsize_mb * mb, limits.fsize_mb * mb),
                "RLIMIT_NOFILE": (limits.nofile, limits.nofile),
                "RLIMIT_CORE": (0, 0),
            },
        }
        harness = _DIES_WITH.format(os.getpid()) + _HARNESS  # PR_SET_PDEATHSIG: dies with us, init with it
        proc = subprocess.Popen(
            [python, "-I", "-c", harness],
            cwd="/",
            env={},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        try:
            # the config, then (read by the harness only after it forked the worker) the tests
            tests = json.dumps(config.pop("tests")).encode()
            head = json.dumps({**config, "tests_bytes": len(tests)}).encode()
            stdin = b"%d\n" % len(head) + head + tests
            out, err = proc.communicate(stdin, timeout=limits.wall_s + 10)
        except subprocess.TimeoutExpired:  # the harness enforces wall_s itself; this is a backstop
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # only matters in unsafe mode (no PID namespace)
        except (ProcessLookupError, PermissionError):
            pass
        seconds = time.perf_counter() - start
        try:
            res = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            return SandboxResult("error", None, "", f"sandbox error: harness failed: {tail[0]}", seconds)
        if res["isolation_error"] and not limits.unsafe:
            raise RLVRError(
                f"the code sandbox cannot isolate code on this machine: {res['error']}. It needs root "
                "or unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0); set sandbox.unsafe: true to run untrusted code without "
                "isolation"
            )
        return SandboxResult(
            res["status"],
            res["returncode"],
            res["stdout"],
            res["stderr"],
            seconds,
            res["isolation"],
            res["error"],
        )
    except RLVRError:
        raise
    except Exception as err:  # noqa: BLE001 - a sandbox that cannot start scores 0, it does not crash training
        return SandboxResult(
            "error", None, "", f"sandbox error: {type(err).__name__}: {err}", time.perf_counter() - start
        )
    finally:
        if uid is not None:
            UIDS.release(uid)


def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox; the status is its exit status.

    Never raises for anything the code does (an :class:`RLVRError` only when the machine cannot
    isolate code and ``unsafe`` is off). Not a verifier: the exit status is the code's to choose.
    """
    return _run(
        {"mode": "script", "code": code, "tests": "", "prefix": "", "entry_point": None},
        limits or SandboxLimits(),
    )


def run_tests(
    code: str,
    tests: str,
    limits: SandboxLimits | None = None,
    entry_point: str | None = None,
    prefix: str = "",
) -> SandboxResult:
    """Judge ``code`` by ``tests``: the code runs sandboxed, the tests run in the trusted harness.

    ``tests`` are assert statements (or any code) that use the candidate's functions by name; with
    ``entry_point`` they must define ``check(candidate)``, which is called with that function, and
    ``prefix`` (the prompt's code, e.g. HumanEval's helper functions) is run on the trusted side
    first, so tests that use the prompt's helpers get the prompt's, never the candidate's,
    versions. Status ``ok`` only when every test ran to the end; the worker's exit status plays
    no part.
    """
    payload = {"mode": "tests", "code": code, "tests": tests, "prefix": prefix, "entry_point": entry_point}
    return _run(payload, limits or SandboxLimits())


_REPORT: dict[tuple, dict] = {}


def sandbox_report(limits: SandboxLimits | None = None) -> dict:
    """What isolation this machine gives (one probe run, cached); raises RLVRError where none is possible.

    Keys: status, root, namespaces, userns, net, pid, ipc, readonly, tmp, uid (as the host sees
    it), nproc, private_dirs, sockets_hidden.
    """
    limits = limits or SandboxLimits(wall_s=30)
    key = (limits.unsafe, limits.python, _NAMESPACES)
    if key not in _REPORT:
        probe = run_python("pass\n", SandboxLimits(wall_s=30, unsafe=limits.unsafe, python=limits.python))
        _REPORT[key] = {"status": probe.status, "root": _is_root(), **probe.isolation}
        if not probe.isolation.get("namespaces"):
            log.warning(
                "sandbox: UNSAFE mode, no namespaces (%s): sandboxed code can reach the network, "
                "the host's files and the trainer's processes",
                probe.isolation.get("error"),
            )
    return dict(_REPORT[key])
