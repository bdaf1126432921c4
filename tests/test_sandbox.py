"""The code sandbox holds: every attack gets reward 0, nothing outside the run changes, nothing survives it.

Each class of attack is tried in several variants, batched through ``check_batch`` (parallel
runs). The tests of a problem are trusted and run outside the sandbox; a variant that scored 1
would be a reward hack or a breach.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

import lightning_rlvr.rewards.sandbox as sb
import lightning_rlvr.rewards.sandbox_host as sandbox_host
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.problem import Problem
from lightning_rlvr.rewards.sandbox import SandboxLimits, run_python, run_tests, sandbox_report
from lightning_rlvr.rewards.sandbox_user import interpreter
from lightning_rlvr.tasks.code import SandboxedCodeTask
from tests.conftest import REPO

LIMITS = SandboxLimits(wall_s=3.0, cpu_s=2, memory_mb=512, nproc=32)
ROOT = os.geteuid() == 0
TASK = SandboxedCodeTask(LIMITS, workers=4)

# a HumanEval-shaped problem: check(candidate) on an entry point, and the same as plain asserts
CHECK = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(-3) == 9\n"
HUMANEVAL = Problem(prompt="", answer=CHECK, meta={"entry_point": "square", "prefix": ""})
ASSERTS = Problem(prompt="", answer="assert square(2) == 4\nassert square(-3) == 9\n")
GOOD = "def square(x):\n    return x * x\n"


def rewards(codes: list[str], problem: Problem) -> list[float]:
    results = TASK.check_batch(codes, [problem] * len(codes))
    assert not any(raised for _, raised in results)
    return [v.reward for v, _ in results]


def live_pids_with(marker: str) -> list[int]:
    """Processes (not zombies) whose command line contains ``marker``."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                state = Path(f"/proc/{entry.name}/stat").read_bytes().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if marker.encode() in cmd and state not in (b"Z", b"X"):
                pids.append(int(entry.name))
    return pids


def _visible_dir() -> Path:
    """A directory outside /tmp, /var/tmp and /dev/shm whose ancestors everyone may traverse."""
    (REPO / ".pytest_cache").mkdir(exist_ok=True)
    for base in (Path("/run"), REPO / ".pytest_cache", Path("/var/lib"), Path("/srv"), Path("/opt")):
        private = str(base).startswith(("/tmp", "/var/tmp", "/dev/shm"))
        if base.is_dir() and not private and all(p.stat().st_mode & 0o001 for p in [base, *base.parents]):
            return base
    raise AssertionError("no world-traversable directory outside /tmp to plant a canary in")


@pytest.fixture
def canary_dir():
    """A fresh world-readable directory outside /tmp; the host-path walk is redone to see it."""
    path = _visible_dir() / f"sandbox-canary-{uuid.uuid4().hex}"
    path.mkdir()
    os.chmod(path, 0o755)
    sandbox_host._SHARED = None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        sandbox_host._SHARED = None


def test_correct_and_wrong_solutions_in_both_test_styles():
    wrong = "def square(x):\n    return x + x\n"  # right for 2, wrong for -3
    assert rewards([GOOD, wrong, "def square(x) return x"], HUMANEVAL) == [1.0, 0.0, 0.0]
    assert rewards([GOOD, wrong, "def square(x) return x"], ASSERTS) == [1.0, 0.0, 0.0]
    # arguments a candidate sorts in place come back sorted (tests may check the mutation)
    inplace = Problem("", "xs = [3, 1, 2]\nsort_it(xs)\nassert xs == [1, 2, 3]\n")
    assert TASK.check("def sort_it(xs):\n    xs.sort()\n", inplace).reward == 1.0
    # a plain run reports its exit status (for tools, never a reward)
    assert run_python("import sys\nsys.exit(3)", LIMITS).returncode == 3


def test_isolation_in_force():
    report = sandbox_report()
    assert report["status"] == "ok" and report["namespaces"] and report["pid"] and report["net"]
    assert report["readonly"] and report["tmp"].startswith("tmpfs")
    if ROOT:
        assert report["uid"] != 0 and report["nproc"] == 32 and not report["userns"]


@pytest.mark.parametrize("problem", [HUMANEVAL, ASSERTS], ids=["check(candidate)", "asserts"])
def test_early_success_exits_score_zero(problem):
    exits = {
        "sys.exit in body": "import sys\ndef square(x):\n    sys.exit(0)\n",
        "os._exit in body": "import os\ndef square(x):\n    os._exit(0)\n",
        "exit()": "def square(x):\n    exit()\n",
        "raise SystemExit": "def square(x):\n    raise SystemExit(0)\n",
        "exit at load": "import sys\nsys.exit(0)\n" + GOOD.replace("x * x", "x"),
        "os._exit at load": "import os\nos._exit(0)\n",
        "atexit": "import atexit, os\natexit.register(os._exit, 0)\ndef square(x):\n    return x\n",
        "excepthook": "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n"
        "def square(x):\n    raise ValueError\n",
        "thread exits": "import os, threading, time\ndef square(x):\n"
        "    threading.Thread(target=os._exit, args=(0,)).start()\n    time.sleep(1)\n",
        "kill the parent": "import os, signal\ndef square(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
        "exit in a finally": "import os\ndef square(x):\n    try:\n        return x\n"
        "    finally:\n        os._exit(0)\n",
    }
    assert rewards([GOOD, *exits.values()], problem) == [1.0] + [0.0] * len(exits)


def test_objects_that_equal_everything_score_zero():
    always = "class A:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
    variants = [
        always + "def square(x):\n    return A()\n",
        "class I(int):\n    def __eq__(self, other):\n        return True\ndef square(x):\n    return I(0)\n",
        "class S(str):\n    def __eq__(self, other):\n        return True\ndef square(x):\n"
        "    return S('')\n",
        "class L(list):\n    def __eq__(self, other):\n        return True\ndef square(x):\n    return L()\n",
        "from unittest.mock import ANY\ndef square(x):\n    return ANY\n",
        always + "def square(x):\n    return [A()]\n",  # hidden inside a container
        "def square(x):\n    return float('nan')\n",  # a real value that never compares equal
    ]
    assert rewards(variants, HUMANEVAL) == [0.0] * len(variants)
    assert rewards(variants, ASSERTS) == [0.0] * len(variants)


def test_reading_the_tests_is_impossible():
    secret = uuid.uuid4().hex
    problem = Problem("", f"assert guess() == {secret!r}\n")
    finder = textwrap.dedent("""
        import gc, glob, os, re, sys
        def find():
            seen = []
            for path in [__file__, *glob.glob('/tmp/**', recursive=True), *glob.glob('/proc/*/cmdline'),
                         *glob.glob('/proc/*/environ'), *glob.glob('/dev/shm/*')]:
                try:
                    seen.append(open(path, 'rb').read().decode('latin-1'))
                except OSError:
                    pass
            seen += [repr(f.f_globals) for f in [sys._getframe(i) for i in range(1)]]
            seen += [o for o in gc.get_objects() if isinstance(o, str)][:100000]
            for text in seen:
                for m in re.findall(r"[0-9a-f]{32}", text):
                    return m
        def guess():
            return find()
    """)
    # the worker is a fork of the harness: scan its whole memory and the harness's globals too
    memory = textwrap.dedent("""
        import __main__, ctypes, re
        def guess():
            found = re.findall(r"[0-9a-f]{32}", repr(vars(__main__)))
            scanned = 0
            with open('/proc/self/maps') as maps:
                regions = [line.split() for line in maps]
            for r in regions:
                start, end = (int(x, 16) for x in r[0].split('-'))
                if r[1].startswith('r') and (len(r) < 6 or not r[5].startswith('[v')):
                    data = ctypes.string_at(start, end - start)
                    scanned += len(data)
                    found += [m.decode() for m in re.findall(rb"guess\\(\\) == '([0-9a-f]{32})'", data)]
            return found[0] if found else scanned
    """)
    scanned = run_tests(memory, "assert guess() > 1 << 20", LIMITS)  # it really read megabytes of memory
    assert scanned.passed, scanned.summary()
    assert [v.reward for v, _ in TASK.check_batch([finder, memory], [problem] * 2)] == [0.0, 0.0]
    # the harness gives the candidate its arguments, never the expected values
    echo = "def guess(*a, **k):\n    return str(a) + str(k)\n"
    assert TASK.check(echo, problem).reward == 0.0


def test_outputs_are_never_reopened_by_path(canary_dir, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    root_only = canary_dir / "root-only.txt"
    root_only.write_text(secret)
    os.chmod(root_only, 0o600)
    traps = [
        "import os\nfor n in ('.stdout', '.stderr', 'stdout', 'out.txt'):\n    os.mkfifo(n)\n",
        f"import os\nfor n in ('.stdout', '.stderr'):\n    os.symlink({str(root_only)!r}, n)\n",
        f"import os\nos.symlink('/proc/{os.getpid()}/environ', '.stderr')\n"
        f"os.symlink('/proc/1/environ', '.stdout')\n",
        "import os\nos.symlink('/proc/self/fd/0', '.stdout')\nraise SystemExit(1)\n",
    ]
    results = [run_python(code, LIMITS) for code in traps]
    for result in results:
        assert result.status in ("ok", "failed") and result.seconds < LIMITS.wall_s + 2
        assert secret not in result.stdout + result.stderr + result.summary()
    verdicts = TASK.check_batch(traps, [ASSERTS] * len(traps))
    assert all(v.reward == 0.0 and secret not in v.feedback for v, _ in verdicts)


@pytest.mark.skipif(not ROOT, reason="making a setuid file needs root")
def test_no_process_outlives_the_run(canary_dir):
    marker = f"{61 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a unique sleep duration
    setuid_sleep = canary_dir / "sleep"
    shutil.copy(shutil.which("sleep"), setuid_sleep)
    os.chmod(setuid_sleep, 0o4755)  # setuid root: no_new_privs keeps it from changing its uid
    escapes = [
        f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n",
        f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '{marker}'])\n    os._exit(0)\ntime.sleep(0.2)\n",
        f"import subprocess\nsubprocess.Popen([{str(setuid_sleep)!r}, '{marker}'], start_new_session=True)\n",
        f"import os, subprocess\ndef square(x):\n"
        f"    subprocess.Popen(['setsid', 'sleep', '{marker}'])\n    os._exit(0)\n",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
        "        pass\n",  # a fork bomb
    ]
    verdicts = TASK.check_batch(escapes, [HUMANEVAL] * len(escapes))
    assert [v.reward for v, _ in verdicts] == [0.0] * len(escapes)
    assert run_python(escapes[0], LIMITS).passed  # also after a run that ended normally
    assert live_pids_with(marker) == []
    assert TASK.check(GOOD, HUMANEVAL).reward == 1.0


def test_shared_state_stays_private(canary_dir):
    shared = canary_dir / "shared"  # a world-writable directory the host-path walk finds
    shared.mkdir()
    os.chmod(shared, 0o1777)
    host_sock = canary_dir / "service.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(host_sock))
    os.chmod(host_sock, 0o777)
    server.listen()
    server.setblocking(False)
    name = f"canary-{uuid.uuid4().hex}"
    dirs = [str(shared), "/var/tmp", "/dev/shm", "/run/lock", str(canary_dir)]
    key = uuid.uuid4().int % 2**30 + 1
    writer = textwrap.dedent(f"""
        import ctypes, os, shutil, socket
        wrote = []
        for d in {dirs!r}:
            try:
                p = os.path.join(d, {name!r})
                shutil.copy('/bin/sh', p)
                os.chmod(p, 0o4755)
                wrote.append(p)
            except OSError:
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        shm = libc.shmget({key}, 4096, 0o1000 | 0o666)  # IPC_CREAT
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect({str(host_sock)!r})
            s.sendall(b'hello')
            reached = True
        except OSError:
            reached = False
        assert len(wrote) >= 3 and shm >= 0 and reached
    """)
    # it writes into its private copies of /var/tmp, /dev/shm, the new shared dir and gets its own
    # SysV segment, but cannot reach the host's socket: all four held means reward 1 (a breach)
    assert TASK.check(writer, Problem("", "pass")).reward == 0.0
    assert TASK.check(writer.replace(" and reached", ""), Problem("", "pass")).reward == 1.0
    try:
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    for d in dirs:
        assert not os.path.exists(os.path.join(d, name)), d
    assert f"{key:10d}"[-8:] not in Path("/proc/sysvipc/shm").read_text()
    assert str(key) not in Path("/proc/sysvipc/shm").read_text()


def test_total_disk_use_is_bounded():
    mb8 = "b'x' * (8 << 20)"
    fillers = [
        f"for i in range(40):\n    open(f'f{{i}}', 'wb').write({mb8})\n",  # 320 MB in 8 MB files
        "for i in range(20000):\n    open(f'e{i}', 'w').close()\n",  # inodes
        f"import os\nfor d in ('/dev/shm', '/var/tmp', '/tmp'):\n    for i in range(14):\n"
        f"        open(os.path.join(d, f'g{{i}}'), 'wb').write({mb8})\n",
    ]
    big = SandboxLimits(wall_s=10.0, cpu_s=8, memory_mb=512, disk_mb=64)
    results = [run_python(code, big) for code in fillers]
    assert [r.status for r in results] == ["failed"] * 3
    assert all("No space left" in r.stderr or "Disk quota" in r.stderr for r in results), [
        r.stderr for r in results
    ]


def test_no_network_and_no_parent_environment(monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        attacks = [
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'x')\n",
            "import socket\nassert socket.if_nameindex() != [(1, 'lo')]\n",
            f"import os, glob\n"
            f"assert any({secret!r} in open(p).read() for p in glob.glob('/proc/*/environ'))\n",
            f"import os\nassert os.environ.get('RLVR_TEST_SECRET') == {secret!r}\n",
            "import os\nassert os.path.exists('/etc/hostname') and open('/etc/x', 'w')\n",
        ]
        assert rewards(attacks, Problem("", "pass")) == [0.0] * len(attacks)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()


def test_no_isolation_is_one_clear_error_unless_unsafe(monkeypatch):
    # an unshare the kernel refuses (EINVAL), as a locked-down host would (EPERM)
    monkeypatch.setattr(sb, "_NAMESPACES", sb._NAMESPACES | 0x1)
    host_mounts = Path("/proc/self/mountinfo").read_text()
    with pytest.raises(RLVRError, match="cannot isolate code.*sandbox.unsafe"):
        SandboxedCodeTask(LIMITS)
    with pytest.raises(RLVRError, match="cannot isolate"):
        run_tests(GOOD, "assert square(3) == 9", LIMITS)
    unsafe = SandboxLimits(wall_s=3.0, unsafe=True)
    report = sandbox_report(unsafe)
    assert report["status"] == "ok" and not report["namespaces"]
    assert SandboxedCodeTask(unsafe, workers=1).check(GOOD, ASSERTS).reward == 1.0
    monkeypatch.setattr(sb, "_NAMESPACES", 1 << 40)  # would truncate to 0 (no namespace) in a C int
    assert run_python("pass", unsafe).isolation["namespaces"] is False
    assert Path("/proc/self/mountinfo").read_text() == host_mounts  # nothing was mounted on the host


NON_ROOT_SCRIPT = """
import json, os, signal, socket, sys, uuid
from lightning_rlvr.rewards.sandbox import SandboxLimits, run_python, run_tests, sandbox_report
limits = SandboxLimits(wall_s=3.0, cpu_s=2, memory_mb=512)
secret = uuid.uuid4().hex
os.environ["RLVR_SECRET"] = secret
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
server.setblocking(False)
canary = f"/tmp/nonroot-canary-{uuid.uuid4().hex}"
attacks = [
    "import os, signal\\nos.kill(-1, signal.SIGKILL)",
    f"import os, signal\\nos.kill({os.getpid()}, signal.SIGKILL)",
    f"import glob\\nassert any({secret!r} in open(p).read() for p in glob.glob('/proc/*/environ'))",
    f"import socket\\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=1)",
    "import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass",
    "import ctypes\\nassert ctypes.CDLL(None).umount2(b'/tmp', 2) == 0",
]
passed = [run_python(a, limits).passed for a in attacks]
run_python(f"open({canary!r}, 'w').write('x')", limits)  # succeeds, in the sandbox's private /tmp
try:
    server.accept()
    connected = True
except BlockingIOError:
    connected = False
good = run_tests("def f(x):\\n    return x + 1\\n", "assert f(1) == 2", limits).passed
hack = run_tests("import os\\ndef f(x):\\n    os._exit(0)\\n", "assert f(1) == 2", limits).passed
print(json.dumps({"uid": os.getuid(), "report": sandbox_report(), "passed": passed, "connected": connected,
                  "canary": os.path.exists(canary), "good": good, "hack": hack}))
"""


def _minimal_package(dest: Path) -> None:
    """The sandbox module, its harness and its one dependency, importable without torch (for another uid)."""
    sandbox = ("sandbox.py", "sandbox_harness.py", "sandbox_host.py", "sandbox_user.py")
    for rel in ("core/errors.py", *(f"rewards/{name}" for name in sandbox)):
        (dest / "lightning_rlvr" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "lightning_rlvr" / rel, dest / "lightning_rlvr" / rel)
    for pkg in ("", "core/", "rewards/"):
        init = f"lightning_rlvr/{pkg}__init__.py"
        (dest / init).write_text("")


def test_the_unprivileged_path_isolates_with_a_user_namespace():
    """As an ordinary user (uid 65534 here), the sandbox uses a user namespace: same guarantees."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        _minimal_package(Path(tmp))
        kwargs = {}
        if ROOT:
            kwargs = dict(user=65534, group=65534, extra_groups=[])
            python = interpreter(None, 65534)
        else:
            python = sys.executable
        proc = subprocess.run(
            [python, "-c", NON_ROOT_SCRIPT],
            cwd=tmp,
            env={"PYTHONPATH": tmp, "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            timeout=120,
            **kwargs,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]  # the "trainer" survived kill(-1) and kill(its pid)
    out = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert out["uid"] != 0 and out["report"]["userns"] and out["report"]["namespaces"]
    assert out["passed"] == [False] * 6 and not out["connected"] and not out["canary"]
    assert out["good"] and not out["hack"]


def test_tests_never_enter_the_sandbox():
    # the program file holds the candidate's code only
    result = run_tests(
        "import sys\nsrc = open(__file__).read()\ndef f():\n    return src\n",
        "assert 'assert' not in f()",
        LIMITS,
    )
    assert result.passed and stat.S_ISREG(os.stat(__file__).st_mode)


def test_loops_memory_and_host_files(canary_dir):
    canary = canary_dir / "canary.txt"
    canary.write_text("alive")
    os.chmod(canary, 0o644)
    home = os.path.expanduser("~")
    target = os.path.join(home, f"sandbox-canary-{uuid.uuid4().hex}")
    attacks = [
        "while True:\n    pass\n",  # at load
        "def square(x):\n    while True:\n        pass\n",  # inside a call
        "x = bytearray(10 * 2**30)\nx[-1] = 1\n",
        f"import os\nos.remove({str(canary)!r})\n",
        f"import shutil\nshutil.rmtree({str(canary_dir)!r})\n",
        f"import os, subprocess\nsubprocess.run(['rm', '-rf', {str(canary_dir)!r}])\n"
        f"assert not os.path.exists({str(canary)!r})\n",
        f"open({str(canary)!r}, 'w').write('overwritten')\n",
        f"open({target!r}, 'w').write('pwned')\n",
    ]
    verdicts = TASK.check_batch([a + GOOD if "def square" not in a else a for a in attacks], [ASSERTS] * 8)
    assert [v.reward for v, _ in verdicts] == [0.0] * len(attacks)
    # an endless loop ends at the wall clock ("timeout") or, on an idle machine where it gets a
    # whole core, at the CPU limit first (the worker is killed: "the program exited")
    for v, _ in verdicts[:2]:
        assert v.feedback == "timeout" or v.feedback.startswith("the program exited"), v.feedback
    assert canary.read_text() == "alive" and not os.path.exists(target)
    # the file is visible (read-only), and the run's own home is its writable work dir
    visible = f"assert open({str(canary)!r}).read() == 'alive'\n"
    in_home = "import os\np = os.path.expanduser('~/y')\nopen(p, 'w').write('')\nassert os.path.exists(p)\n"
    assert rewards([visible + GOOD, in_home + GOOD], ASSERTS) == [1.0, 1.0]
