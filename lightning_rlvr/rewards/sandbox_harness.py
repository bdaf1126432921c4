"""The sandbox's trusted harness, run as ``python -I -c <this file's source>`` by ``sandbox.py``.

It reads its config (code, limits), then the tests, as JSON on stdin, and writes one JSON verdict
line on stdout. It imports nothing from the package, so any python3 can run it (the sandbox may fall
back to the system interpreter). See ``sandbox.py``'s docstring for the design.
"""

import builtins
import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import sys
import time

T0 = time.monotonic()


def read_exactly(n):
    # os.read, never a buffered reader: nothing past the config (the tests) may be in memory at the fork
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            break
        data += chunk
    return data


HEADER = b""
while not HEADER.endswith(b"\n"):
    HEADER += os.read(0, 1)
C = json.loads(read_exactly(int(HEADER)).decode())  # everything but the tests, which follow it
DEADLINE = T0 + C["wall_s"]
RESULT_FD = os.dup(1)
os.dup2(2, 1)  # prints of the (trusted) tests go to stderr, never into the verdict channel
os.set_inheritable(RESULT_FD, False)
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18
MAXFD = os.sysconf("SC_OPEN_MAX")
ISO = {"namespaces": False}


def finish(status, error="", returncode=None, out=b"", err=b"", isolation_error=False):
    res = {
        "status": status,
        "error": error[:2000],
        "returncode": returncode,
        "isolation": ISO,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
        "isolation_error": isolation_error,
    }
    data = (json.dumps(res) + "\n").encode()
    while data:
        data = data[os.write(RESULT_FD, data) :]
    os._exit(0)


def check(ret, what):
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None
    check(LIBC.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {dst}")


def readonly_everything():
    class Attr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]

    attr = Attr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY
    if LIBC.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        return "mount_setattr"
    # older kernels: remount each mount read-only, keeping its flags (a user namespace may not drop them)
    bits = {
        "nosuid": MS_NOSUID,
        "nodev": MS_NODEV,
        "noexec": MS_NOEXEC,
        "noatime": 1024,
        "nodiratime": 2048,
        "relatime": 1 << 21,
    }
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        fstype = fields[fields.index("-") + 1]
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | sum(bits.get(o, 0) for o in fields[5].split(","))
        if LIBC.mount(None, point.encode(), None, flags, None) != 0 and (
            point == "/" or fstype not in C["pseudo_fs"]
        ):
            check(-1, f"read-only remount of {point}")
    return "remount"


def isolate():
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = C["ns_flags"] | (0 if root else C["userns_flag"])
    kinds = ("mnt", "net", "ipc", "uts", "pid_for_children")
    before = [os.readlink(f"/proc/self/ns/{k}") for k in kinds]
    if flags != flags & 0x7FFFFFFF:
        raise OSError(22, f"unshare flags {flags:#x} out of range")
    check(LIBC.unshare(ctypes.c_int(flags)), "unshare")

    # never mount anything unless every namespace is new: a mount here must not reach the host
    def now(kind):
        try:
            return os.readlink(f"/proc/self/ns/{kind}")
        except OSError:  # pid_for_children: not readable until the first child of the new namespace
            return None

    shared = [k for k, b in zip(kinds, before) if now(k) == b]
    if shared:
        raise OSError(22, f"unshare left {shared} shared with the host")
    if not root:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    ISO.update(namespaces=True, net=True, pid=True, ipc=True, userns=not root)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    ISO["readonly"] = readonly_everything()
    mount(
        "tmpfs",
        "/tmp",
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={C['disk_mb']}m,nr_inodes={C['inodes']},mode=1777",
    )
    ISO["tmp"] = f"tmpfs {C['disk_mb']}m"
    shared = 0
    for i, path in enumerate(C["shared_dirs"]):
        private = f"/tmp/.private/{i}"
        os.makedirs(private)
        os.chmod(private, 0o1777)
        try:
            mount(private, path, None, MS_BIND)
            shared += 1
        except OSError:
            pass  # gone since the walk; still read-only
    hidden = 0
    for path in C["sockets"]:
        try:
            mount("/dev/null", path, None, MS_BIND)
            hidden += 1
        except OSError:
            pass
    ISO.update(private_dirs=shared, sockets_hidden=hidden)


def drop_privileges():
    for cap in range(64):  # empty bounding set: no exec can regain a capability
        if LIBC.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            break
    if os.geteuid() == 0 and C["uid"] is not None and not ISO.get("userns"):
        os.setgroups([])
        os.setgid(C["uid"])
        os.setuid(C["uid"])  # drops every capability
    elif os.geteuid() == 0:  # root of our user namespace: drop the capabilities it holds there

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        check(LIBC.capset(ctypes.byref(Header(0x20080522, 0)), (ctypes.c_uint32 * 6)()), "capset")
    check(LIBC.prctl(38, 1, 0, 0, 0), "no_new_privs")


# ---- plain data: what may cross from the worker to the tests (and back) ----
def enc(v, depth=0):
    if depth > 100:
        raise ValueError("nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, complex):
        return {"complex": [float(v.real), float(v.imag)]}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).hex()}
    if isinstance(v, list):
        return {"list": [enc(x, depth + 1) for x in list.__iter__(v)]}
    if isinstance(v, tuple):
        return {"tuple": [enc(x, depth + 1) for x in tuple.__iter__(v)]}
    if isinstance(v, (set, frozenset)):
        return {"frozenset" if isinstance(v, frozenset) else "set": [enc(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in dict.items(v)]}
    if type(v).__module__ == "numpy" and hasattr(v, "tolist"):
        return enc(v.tolist(), depth + 1)
    raise TypeError(f"a {t.__name__} is not plain data")


def dec(v):
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if t is dict and len(v) == 1:
        ((tag, x),) = v.items()
        if tag == "complex" and type(x) is list and len(x) == 2 and all(type(i) in (int, float) for i in x):
            return complex(x[0], x[1])
        if tag == "bytes" and type(x) is str:
            return bytes.fromhex(x)
        if type(x) is list:
            if tag == "list":
                return [dec(i) for i in x]
            if tag == "tuple":
                return tuple(dec(i) for i in x)
            if tag == "set":
                return {dec(i) for i in x}
            if tag == "frozenset":
                return frozenset(dec(i) for i in x)
            if tag == "dict" and all(type(p) is list and len(p) == 2 for p in x):
                return {dec(k): dec(i) for k, i in x}
    raise ValueError("not plain data")


# ---- the worker (untrusted from the moment it runs the candidate's code) ----
def flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass


def worker(fds, workdir):
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]  # stdin, stdout, stderr, requests, replies
    for i, fd in enumerate(high):
        os.dup2(fd, i)
    os.closerange(5, MAXFD)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False, buffering=1 if C["mode"] == "script" else -1)
    sys.stderr = open(2, "w", closefd=False)
    drop_privileges()
    for name, (soft, hard) in C["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(C["env"], HOME=workdir, TMPDIR=workdir)
    sys.argv[:] = ["main.py"]
    sys.path[0] = workdir
    with open("main.py", "w") as f:
        f.write(C["code"])
    ns = {"__name__": "__main__", "__file__": os.path.join(workdir, "main.py"), "__builtins__": builtins}
    code = 0
    try:
        exec(compile(C["code"], "main.py", "exec"), ns)
    except SystemExit as e:
        if C["mode"] == "script":
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int) and e.code is not None:
                print(e.code, file=sys.stderr)
        # with tests, an exit only ends loading: the verdict is the tests', not an exit status
    except BaseException:
        __import__("traceback").print_exc()
        flush()
        os._exit(1)
    flush()
    if C["mode"] == "script":
        os._exit(code & 0xFF)
    serve(ns)


def describe(obj):
    if callable(obj):
        return "call"
    try:
        return ["value", enc(obj)]
    except Exception:
        return ["other", type(obj).__name__]


def serve(ns):
    requests = os.fdopen(3, "rb")
    while True:
        line = requests.readline()
        if not line:
            break
        req = json.loads(line)
        if req["op"] == "names":
            reply = {"names": {n: describe(ns[n]) for n in req["names"] if n in ns}}
        else:
            args = [dec(a) for a in req["args"]]
            kwargs = {k: dec(v) for k, v in req["kwargs"].items()}
            try:
                value = ns[req["name"]](*args, **kwargs)
            except BaseException as e:
                try:
                    reply = {"raise": [type(e).__name__, str(e)[:300]]}
                except BaseException:
                    reply = {"raise": [type(e).__name__, ""]}
            else:
                try:
                    mutable = (list, dict, set)
                    reply = {"ok": enc(value), "args": [enc(a) if type(a) in mutable else None for a in args]}
                except Exception as e:
                    reply = {"bad": f"{req['name']} returned {e}"}
        flush()
        data = (json.dumps(reply) + "\n").encode()
        while data:
            data = data[os.write(4, data) :]
    flush()
    os._exit(0)


# ---- the tests, in the harness ----
class Fault(BaseException):
    # the run cannot be trusted any more; a BaseException so that `except Exception` in tests cannot hide it
    pass


class CandidateError(Exception):
    pass


FAULT = []


def fault(msg):
    FAULT.append(msg)
    raise Fault(msg)


class Channel:
    def __init__(self, wfd, rfd):
        self.w, self.r, self.buf = wfd, rfd, b""
        os.set_blocking(wfd, False)

    def wait(self, rlist, wlist):
        if not pump(rlist, wlist, DEADLINE):
            fault("timeout")

    def ask(self, req):
        if FAULT:
            raise Fault(FAULT[0])
        data = (json.dumps(req) + "\n").encode()
        while data:
            self.wait([], [self.w])
            try:
                data = data[os.write(self.w, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                fault("the program exited")
        while b"\n" not in self.buf:
            self.wait([self.r], [])
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                fault("the program exited")
            self.buf += chunk
            if len(self.buf) > C["reply_bytes"]:
                fault("reply too large")
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except Exception:
            reply = None
        if type(reply) is not dict:
            fault("malformed reply")
        return reply


def restore(arg, new):
    if type(arg) is list and type(new) is list:
        arg[:] = new
    elif type(arg) in (dict, set) and type(new) is type(arg):
        arg.clear()
        arg.update(new)


class Remote:
    # a candidate function: every call runs in the worker
    def __init__(self, name):
        self.__name__ = self.__qualname__ = name

    def __repr__(self):
        return f"<sandboxed function {self.__name__}>"

    def __call__(self, *args, **kwargs):
        try:
            req = {
                "op": "call",
                "name": self.__name__,
                "args": [enc(a) for a in args],
                "kwargs": {str(k): enc(v) for k, v in kwargs.items()},
            }
        except (TypeError, ValueError, RecursionError) as e:
            raise TypeError(f"cannot pass this argument to the sandboxed {self.__name__}: {e}") from None
        reply = CHANNEL.ask(req)
        try:
            if "ok" in reply:
                value = dec(reply["ok"])
                for arg, new in zip(args, reply.get("args") or []):
                    if new is not None:
                        restore(arg, dec(new))
                return value
            kind, msg = reply.get("raise") or ["", ""]
            bad = reply.get("bad")
            ok = type(kind) is str and type(msg) is str and (bad is None or type(bad) is str)
        except Fault:
            raise
        except Exception:
            ok = False
        if not ok:
            fault("malformed reply")
        if bad is not None:
            raise CandidateError(bad)
        exc = getattr(builtins, kind, None)
        if isinstance(exc, type) and issubclass(exc, Exception):
            try:
                error = exc(msg)
            except Exception:
                error = CandidateError(f"{kind}: {msg}")
        else:
            error = CandidateError(f"{kind}: {msg}")
        raise error


class Unsupported:
    def __init__(self, name, kind):
        self.message = f"{name} is a {kind}: only functions and plain data cross the sandbox"

    def __getattr__(self, attr):
        raise TypeError(self.message)

    def __call__(self, *a, **k):
        raise TypeError(self.message)


def free_names(src):
    import ast

    loaded, bound = set(), set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound - set(dir(builtins))


def prepare_prompt():
    # before the fork: the worker inherits the modules the prompt imports (e.g. typing) for free.
    # The tests are not read yet: the worker's memory must never hold them.
    ns = {"__name__": "__tests__", "__builtins__": builtins}
    if C["entry_point"]:
        exec(compile(C["prefix"], "prompt.py", "exec"), ns)  # the prompt's own helpers stay trusted
        ns.pop(C["entry_point"], None)
    return ns


def prepare_tests(ns):
    # after the fork, in the harness only
    tests = json.loads(read_exactly(C["tests_bytes"]).decode())
    entry = C["entry_point"]
    # with an entry point, check(candidate) reaches the candidate through its argument only
    names = [entry] if entry else sorted(free_names(tests) - set(ns))
    return ns, names, compile(tests, "tests.py", "exec")


def run_tests(prepared):
    if isinstance(prepared, BaseException):
        raise prepared
    ns, names, tests = prepared
    entry = C["entry_point"]
    reply = CHANNEL.ask({"op": "names", "names": names})
    found = reply.get("names")
    if type(found) is not dict:
        fault("malformed reply")
    for name in names:
        kind = found.get(name)
        if kind == "call":
            ns[name] = Remote(name)
        elif type(kind) is list and len(kind) == 2 and kind[0] == "value":
            try:
                ns[name] = dec(kind[1])
            except Exception:
                fault("malformed reply")
        elif type(kind) is list and len(kind) == 2 and type(kind[1]) is str:
            ns[name] = Unsupported(name, kind[1][:50])
    if entry and entry not in ns:
        raise NameError(f"the program does not define {entry}")
    exec(tests, ns)
    if entry:
        ns["check"](ns[entry])


def pump(rlist, wlist, until):
    # drain the worker's stdout/stderr until one of rlist/wlist is ready (True) or `until` (False);
    # no threads: a process that has entered a new PID namespace cannot start one
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return False
        ready_r, ready_w, _ = select.select(list(rlist) + list(OUTPUT), wlist, [], left)
        for fd in ready_r:
            if fd in OUTPUT:
                read_output(fd)
        if ready_w or any(fd in rlist for fd in ready_r):
            return True
        if not OUTPUT and not rlist and not wlist:
            return False


def read_output(fd):
    try:
        chunk = os.read(fd, 1 << 16)
    except OSError:
        chunk = b""
    if not chunk:
        DONE[fd] = OUTPUT.pop(fd)
        os.close(fd)
        return
    buf = OUTPUT[fd]
    if fd == TAIL_FD:
        buf += chunk
        del buf[: max(0, len(buf) - C["output_bytes"])]
    elif len(buf) < C["output_bytes"]:
        buf += chunk[: C["output_bytes"] - len(buf)]


def wait_init(pid, until):
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() >= until:
            break
        if pidfd is None:
            pump([], [], min(until, time.monotonic() + 0.005)) or time.sleep(0.001)
        else:
            pump([pidfd], [], until)
    if pidfd is not None:
        os.close(pidfd)
    return os.waitstatus_to_exitcode(status) if done else None


OUTPUT, DONE = {}, {}
try:
    isolate()
except Exception as e:
    ISO["error"] = str(e)
    if not C["unsafe"]:
        finish("error", f"sandbox isolation unavailable ({e})", isolation_error=True)
if ISO.get("tmp"):
    workdir = "/tmp"
else:
    import tempfile

    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    if C["uid"] is not None and os.geteuid() == 0:
        os.chown(workdir, C["uid"], C["uid"])
ISO["uid"] = C["uid"] if C["uid"] is not None and not ISO.get("userns") else C["host_uid"]
ISO["nproc"] = C["rlimits"]["RLIMIT_NPROC"][0]
PROMPT_NS = None
if C["mode"] == "tests":
    try:
        PROMPT_NS = prepare_prompt()
    except Exception as e:
        PROMPT_NS = e
req_r, req_w = os.pipe()
resp_r, resp_w = os.pipe()
out_r, out_w = os.pipe()
err_r, err_w = os.pipe()
devnull = os.open("/dev/null", os.O_RDONLY)
init = os.fork()
if init == 0:
    try:
        # PR_SET_PDEATHSIG: init (and so the namespace) dies with the harness
        LIBC.prctl(1, int(signal.SIGKILL), 0, 0, 0)
        if ISO.get("pid"):
            try:
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            except OSError:
                os._exit(C["isolation_exit"])
        child = os.fork()
        if child == 0:
            try:
                worker([devnull, out_w, err_w, req_r, resp_w], workdir)
            except BaseException:
                __import__("traceback").print_exc()
                flush()
            os._exit(1)
        os.closerange(0, MAXFD)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    except BaseException:
        os._exit(1)
for fd in (req_r, resp_w, out_w, err_w, devnull):
    os.close(fd)
LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: nothing of our uid may trace or read the harness
OUTPUT.update({out_r: bytearray(), err_r: bytearray()})
TAIL_FD = err_r
status, error, code = "ok", "", None
if C["mode"] == "script":
    code = wait_init(init, DEADLINE)
    if code is None:
        status, error = "timeout", "timeout"
    elif code != 0:
        status = "failed"
else:
    CHANNEL = Channel(req_w, resp_r)
    try:
        PREPARED = PROMPT_NS if isinstance(PROMPT_NS, BaseException) else prepare_tests(PROMPT_NS)
    except Exception as e:
        PREPARED = e
    try:
        run_tests(PREPARED)
    except Fault:
        pass
    except BaseException as e:
        status, error = "failed", f"{type(e).__name__}: {e}".rstrip(": ")
    if FAULT:
        status, error = ("timeout" if FAULT[0] == "timeout" else "failed"), FAULT[0]
    os.close(req_w)
    code = wait_init(init, min(DEADLINE, time.monotonic() + 0.5))
try:
    os.kill(init, signal.SIGKILL)  # the PID namespace dies with its init
except ProcessLookupError:
    pass
if code is None:
    os.waitpid(init, 0)
until = time.monotonic() + 1.0  # the pipes close once every process of the namespace is gone
while OUTPUT and time.monotonic() < until:
    pump([], [], until)
if workdir != "/tmp":
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)
out, err = (bytes(DONE.get(fd) or OUTPUT.get(fd) or b"") for fd in (out_r, err_r))
if code == C["isolation_exit"] and ISO.get("pid"):
    finish(
        "error",
        "sandbox isolation unavailable (cannot mount a private /proc)",
        isolation_error=not C["unsafe"],
    )
if status == "failed" and error == "the program exited":
    lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    if lines:
        error = f"the program exited: {lines[-1][:300]}"
finish(status, error, code, out, err)
