"""The code sandbox holds: each attack gets reward 0, the run goes on, nothing outside the work dir changes.

Attacks: an infinite loop, a fork bomb, a 10 GB allocation, a write to the home directory, a
network connection, deleting files (os, shutil, subprocess) and reading a secret the parent set.
Each program exits 0 only if its attack worked, so reward 1 would mean a breach.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from lightning_rlvr.rewards.sandbox import SandboxLimits, _pids_of, run_python, sandbox_report
from lightning_rlvr.tasks.base import Problem
from lightning_rlvr.tasks.code import SandboxedCodeTask
from tests.conftest import REPO

LIMITS = SandboxLimits(wall_s=2.0, cpu_s=2, memory_mb=512, nproc=32)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid drop (file permissions) needs root")


def reward(code: str, limits: SandboxLimits = LIMITS) -> float:
    """The reward a completion ``code`` gets under tests that pass when it runs to the end."""
    task = SandboxedCodeTask(limits, workers=1)
    return task.check(code, Problem(prompt="", answer="pass")).reward


def _visible_dir() -> Path:
    """A directory outside /tmp, /var/tmp and /dev/shm whose ancestors everyone may traverse."""
    (REPO / ".pytest_cache").mkdir(exist_ok=True)
    for base in (REPO / ".pytest_cache", Path("/var/lib"), Path("/srv"), Path("/opt")):
        private = str(base).startswith(("/tmp", "/var/tmp", "/dev/shm"))
        if base.is_dir() and not private and all(p.stat().st_mode & 0o001 for p in [base, *base.parents]):
            return base
    raise AssertionError("no world-traversable directory outside /tmp to plant a canary in")


def still_works():
    assert reward("assert sum(range(4)) == 6") == 1.0


def test_a_correct_solution_passes_and_a_wrong_one_fails():
    assert reward("def f(x):\n    return x + 1\nassert f(1) == 2") == 1.0
    assert reward("def f(x):\n    return x\nassert f(1) == 2") == 0.0
    assert reward("def f(x) return x") == 0.0  # syntax error


def test_isolation_in_force():
    report = sandbox_report()
    assert report["status"] == "ok"
    if ROOT:
        assert report["uid"] != 0 and report["nproc"] == 32
        assert report["net"], "expected a network namespace as root on Linux"


def test_infinite_loop_is_killed_at_the_wall_limit():
    t = time.perf_counter()
    result = run_python("while True:\n    pass", LIMITS)
    assert result.status == "timeout" and not result.passed
    assert time.perf_counter() - t < LIMITS.wall_s + 2
    assert reward("while True:\n    pass") == 0.0
    still_works()


def test_fork_bomb_is_contained():
    probe = run_python(
        "import os, resource\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0])", LIMITS
    )
    uid, nproc = map(int, probe.stdout.split())
    # Never run the bomb without the process limit in force: root ignores RLIMIT_NPROC.
    assert uid != 0 and 0 < nproc <= 4096, (
        f"NPROC not in force (uid {uid}, nproc {nproc}); not running the bomb"
    )
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_python(bomb, LIMITS)
    assert not result.passed
    if ROOT:
        assert _pids_of(result.isolation["uid"]) == []  # every process of the run is gone
    still_works()


def test_escaped_child_is_reaped():
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"  # leaves its group
    result = run_python(code, LIMITS)
    if ROOT:
        assert _pids_of(result.isolation["uid"]) == []


def test_10gb_allocation_fails():
    assert reward("x = bytearray(10 * 2**30)\nx[-1] = 1") == 0.0
    still_works()


@needs_root
def test_writing_in_the_home_directory_stays_in_the_work_dir():
    home = os.path.expanduser("~")
    target = os.path.join(home, f"sandbox-canary-{uuid.uuid4().hex}")
    before = set(os.listdir(home))
    try:
        code = f"open({target!r}, 'w').write('pwned')\n"
        assert reward(code) == 0.0
        assert not os.path.exists(target)
        # ~ inside the sandbox is its work dir: allowed, and thrown away
        in_home = "import os\nx = os.path.expanduser('~/y')\nopen(x, 'w').write('')\nassert os.path.exists(x)"
        assert reward(in_home) == 1.0
        assert set(os.listdir(home)) == before
    finally:
        if os.path.exists(target):
            os.remove(target)
    still_works()


def test_no_network():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
        assert reward(code) == 0.0
        if ROOT:
            with pytest.raises(BlockingIOError):
                server.accept()  # nobody connected
        # no interface but loopback in the sandbox's own namespace (never probe a real outside address)
        assert reward("import socket\nassert socket.if_nameindex() != [(1, 'lo')]") == 0.0
    finally:
        server.close()
    still_works()


@needs_root
@pytest.mark.parametrize(
    "attack",
    ["import os\nos.remove({file!r})",
     "import shutil\nshutil.rmtree({dir!r})",
     "import os, subprocess\nsubprocess.run(['rm', '-rf', {dir!r}])\nassert not os.path.exists({file!r})",
     "open({file!r}, 'w').write('overwritten')"],
    ids=["os.remove", "shutil.rmtree", "subprocess rm -rf", "overwrite"],
)  # fmt: skip
def test_files_outside_the_work_dir_survive(attack):
    # A world-readable directory the sandbox can see (not under /tmp, which it replaces with its
    # own): only permissions protect it. The repository may itself live under /tmp or /root.
    canary_dir = _visible_dir() / f"sandbox-canary-{uuid.uuid4().hex}"
    canary_dir.mkdir(parents=True)
    try:
        canary = canary_dir / "canary.txt"
        canary.write_text("alive")
        os.chmod(canary_dir, 0o755)
        os.chmod(canary, 0o644)
        assert reward(f"import os\nassert open({str(canary)!r}).read() == 'alive'") == 1.0  # it is visible
        assert reward(attack.format(file=str(canary), dir=str(canary_dir))) == 0.0
        assert canary.read_text() == "alive"
    finally:
        for p in canary_dir.glob("*"):
            p.unlink()
        canary_dir.rmdir()
    still_works()


def test_a_secret_in_the_parent_environment_is_not_readable(monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    code = (
        "import os\n"
        "found = os.environ.get('RLVR_TEST_SECRET')\n"
        "if not found:\n"
        "    try:\n"
        "        found = open(f'/proc/{os.getppid()}/environ').read()\n"
        "    except OSError:\n"
        "        pass\n"
        f"assert found and {secret!r} in found\n"
    )
    if ROOT:
        assert reward(code) == 0.0
    result = run_python("import os\nprint(dict(os.environ))", LIMITS)
    assert secret not in result.stdout and "RLVR_TEST_SECRET" not in result.stdout
    still_works()
