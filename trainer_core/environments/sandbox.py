"""Runs untrusted Python (a policy's code, a task's tests) in a child process, and says how it went.

    run_python(source, limits) -> Outcome(passed, reason, stdout, stderr)

What the code gets, and how each limit is kept:
- CPU time (RLIMIT_CPU), address space (RLIMIT_AS), bytes written to any file, stdout included (RLIMIT_FSIZE), no
  core dumps; the wall clock is the trainer's timeout, after which the whole process group is killed.
- No network: a fresh network namespace (`unshare --net --pid --mount`, inside a new user namespace when the
  trainer is not root), where not even loopback is up. Where namespaces cannot be made, an audit hook in the child refuses every
  socket event, and ctypes and process creation with them (so no way around it through libc or a curl).
- None of the trainer's environment variables (secrets): a minimal environment of its own. Run as root, the
  code runs as nobody.
- A scratch directory as its working directory and HOME, removed afterwards, and the only place it may write. In
  its mount namespace it runs in a root of its own (chroot) that holds, read-only, the system's programs and
  libraries and this Python (`visible_paths`), and the scratch directory: the trainer's home and credentials, /tmp,
  the run's and other runs' directories, datasets and checkpoints are not there to read. Without namespaces the
  audit hook refuses opening for writing, removing, renaming or changing anything outside it, and opening or listing
  anything but those same visible paths and the scratch directory (a file's existence it can still test: stat raises
  no audit event).
- Nothing it starts outlives it: a PID namespace whose init is our small supervisor, so when the code's process
  ends every process it started is killed by the kernel; without namespaces, process creation is refused. Every
  process of the sandbox dies with the trainer (PR_SET_PDEATHSIG).

What it cannot run (a timeout, too much memory, a syntax error, a crash, a kill) is an Outcome that did not pass,
with its reason: never an exception in the trainer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rlplane.spec.environments import SandboxLimits

NOBODY = 65534
# The child's supervisor: it forks the code's process (the code never runs as a PID namespace's init, which
# ignores signals it has no handler for), waits for it, and writes its exit status to a pipe only it holds.
_SUPERVISOR = r"""
import json, os, sys
plan = json.loads(sys.argv[1])
if plan["namespaces"]:  # our own mount namespace: a new root that holds the system, Python and the work directory
    import subprocess
    def mount(*args):
        subprocess.run(["mount", *args], check=True, capture_output=True, text=True)
    try:
        mount("--make-rprivate", "/")
        root = plan["root"]
        mount("-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", root)
        for path in plan["visible"]:
            inside = root + path
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            if os.path.islink(path):  # /bin -> usr/bin where /usr is merged: the same link in here
                os.symlink(os.readlink(path), inside)
                continue
            if os.path.isdir(path):
                os.makedirs(inside, exist_ok=True)
            else:
                open(inside, "a").close()
            mount("--rbind", path, inside)
            mount("-o", "remount,bind,ro", inside)
        os.makedirs(root + plan["work"])
        mount("--bind", plan["work"], root + plan["work"])
        os.makedirs(root + "/proc")
        mount("-t", "proc", "proc", root + "/proc")  # this PID namespace's: the sandbox's own processes only
        mount("-o", "remount,ro", root)
        os.chroot(root)
        os.chdir(plan["work"])
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        os.write(plan["status_fd"], ("setup:the sandbox's filesystem could not be made: " + detail.strip()).encode())
        sys.exit(125)
pid = os.fork()
if pid == 0:
    os.close(plan["status_fd"])
    import ctypes, resource
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG: SIGKILL when the supervisor goes
    if plan["drop"]:
        os.setgroups([]); os.setgid(plan["drop"]); os.setuid(plan["drop"])
    for name, value in plan["rlimits"]:
        resource.setrlimit(getattr(resource, name), tuple(value))
    if plan["audit"]:
        refused = ("socket.", "ctypes.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
                   "os.system", "subprocess.Popen", "pty.spawn")
        # what changes the filesystem: allowed inside the work directory only
        changes = {"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.symlink", "os.link",
                   "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree"}
        work = os.path.realpath(plan["work"])
        def _writes(args):  # open's (path, mode, flags): a mode of "w", "a", "x" or "+", or flags that write
            return bool(args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)) or bool(
                str(args[1] or "r").strip("rbt"))
        def inside(path):
            if isinstance(path, int):
                return True  # an open descriptor: opened under these rules
            full = os.path.realpath(os.fsdecode(path))
            return full == work or full.startswith(work + os.sep)
        # what it may read: what its namespaces would hold (the system, this Python) and the work directory
        readable = [os.path.realpath(p).rstrip(os.sep) for p in plan["visible"]]
        def seen(path):
            if isinstance(path, int) or inside(path):
                return True
            full = os.path.realpath(os.fsdecode(path))
            return any(full == r or full.startswith(r + os.sep) for r in readable)
        def audit(event, args):
            if event.startswith(refused) and event != "socket.gethostname":
                raise PermissionError(f"sandbox: {event} is refused (no network, no new processes)")
            if event == "open" and args[0] is not None and _writes(args) and not inside(args[0]):
                raise PermissionError(f"sandbox: writing {args[0]!r} is refused (only the scratch directory is writable)")
            if event in ("open", "os.listdir", "os.scandir") and args[0] is not None and not seen(args[0]):
                raise PermissionError(f"sandbox: reading {args[0]!r} is refused (only the system, Python and the "
                                      "scratch directory can be read)")
            if event in changes and not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
                raise PermissionError(f"sandbox: {event} outside the scratch directory is refused")
        sys.addaudithook(audit)
    sys.argv = ["main.py"]
    sys.path.insert(0, os.getcwd())
    import runpy
    runpy.run_path("main.py", run_name="__main__")
else:
    if not plan["namespaces"]:
        import ctypes
        ctypes.CDLL(None).prctl(1, 9)
    status = os.waitpid(pid, 0)[1]
    os.write(plan["status_fd"], str(os.waitstatus_to_exitcode(status)).encode())
"""


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str | None  # why it did not pass: timeout, cpu time, memory, output, syntax error, tests failed, ...
    stdout: str
    stderr: str
    returncode: int | None  # negative: the signal that ended it; None: it never finished


# What the code sees of the machine in its mount namespace, read-only: the system's programs and libraries, the few
# files of /etc that libc and Python read, and the devices programs expect. Nothing of the trainer's: no home, no
# /tmp, no run or data directories, no /etc of services.
SYSTEM_PATHS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd", "/etc/group",
    "/etc/alternatives", "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom",
)  # fmt: skip


def visible_paths() -> list[str]:
    """SYSTEM_PATHS and this Python (its installation, and the virtual environment it runs in), outermost first, each
    once: the only things outside its scratch directory the code can see."""
    python = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    paths = sorted({os.path.realpath(p) for p in python} | {p for p in SYSTEM_PATHS if os.path.lexists(p)})
    kept: list[str] = []
    for path in paths:  # sorted: a directory comes before what is inside it, which its bind already brings
        if not any(path.startswith(k.rstrip("/") + "/") for k in kept if not os.path.islink(k)):
            kept.append(path)
    return kept


@cache
def namespaces_work() -> bool:
    """Whether this machine lets us make the network, PID and mount namespaces and the sandbox's root in them (user
    namespaces may be off, seccomp may refuse unshare or mount): tried once, by running nothing in such a sandbox. A
    machine that cannot gets the audit hook's rules instead."""
    if shutil.which("unshare") is None:
        return False
    probe = run_python("", SandboxLimits(cpu_s=5, wall_s=10, memory_mb=512, output_kb=16), use_namespaces=True)
    return probe.passed


def _unshare() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--net", "--pid", "--mount", "--fork", "--kill-child"]


@cache
def _can_drop() -> bool:
    """Run as root, the code runs as nobody, if nobody can read this Python (one installed under /root cannot)."""
    if os.geteuid() != 0:
        return False
    base = Path(sys.base_prefix).resolve()
    return all(part.stat().st_mode & stat.S_IXOTH for part in (base, *base.parents)) and bool(
        (base / "lib").stat().st_mode & stat.S_IROTH
    )


def isolation() -> str:
    """How the sandbox's rules are kept on this machine, for the run's log."""
    network = (
        "network, PID and mount namespaces (unshare): no network, a root of its own holding the system and Python "
        "read-only and the scratch directory"
        if namespaces_work()
        else "an audit hook refusing sockets, ctypes, new processes, writes outside the scratch directory and reads "
        "outside it, the system and Python "
        "(namespaces are not available here)"
    )
    user = (
        "as nobody"
        if _can_drop()
        else f"as uid {os.geteuid()}" + (" (nobody cannot read this Python)" if os.geteuid() == 0 else "")
    )
    return f"{network}, {user}"


def run_python(source: str, limits: SandboxLimits, *, use_namespaces: bool | None = None) -> Outcome:
    """Run `source` as a script under `limits`; `use_namespaces` None: whenever this machine can."""
    namespaces = namespaces_work() if use_namespaces is None else use_namespaces
    scratch = Path(tempfile.mkdtemp(prefix="rlplane-sandbox-"))
    try:
        return _run(source, limits, namespaces, scratch)
    finally:
        _remove(scratch)


def _run(source: str, limits: SandboxLimits, namespaces: bool, scratch: Path) -> Outcome:
    work = scratch / "work"
    work.mkdir()
    (work / "main.py").write_text(source, encoding="utf-8")
    drop = NOBODY if _can_drop() else 0
    if drop:
        os.chown(work, NOBODY, NOBODY)
    cpu, written = max(1, round(limits.cpu_s)), limits.output_kb * 1024
    memory = limits.memory_mb * 1024 * 1024
    read_status, write_status = os.pipe()
    (scratch / "root").mkdir()
    plan = {
        "status_fd": write_status,
        "work": str(work.resolve()),
        "root": str((scratch / "root").resolve()),
        "visible": visible_paths(),
        "drop": drop,
        "audit": not namespaces,
        "namespaces": namespaces,
        "rlimits": [
            ("RLIMIT_CPU", (cpu, cpu + 1)),
            ("RLIMIT_AS", (memory, memory)),
            ("RLIMIT_FSIZE", (written, written)),
            ("RLIMIT_CORE", (0, 0)),
        ],
    }
    command = [sys.executable, "-I", "-B", "-c", _SUPERVISOR, json.dumps(plan)]
    if namespaces:
        command = _unshare() + command
    if shutil.which("setpriv"):  # the first child dies with the trainer; the rest die with it
        command = ["setpriv", "--pdeathsig", "KILL", *command]
    env = {"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": str(work), "TMPDIR": str(work), "PYTHONIOENCODING": "utf-8"}
    timed_out = False
    with open(scratch / "stdout", "wb") as out, open(scratch / "stderr", "wb") as err:
        try:
            child = subprocess.Popen(
                command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                pass_fds=(write_status,), start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            os.close(read_status)
            return Outcome(False, f"could not start: {exc}", "", "", None)
        finally:
            os.close(write_status)
        try:
            child.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(child.pid)
            child.wait()
    with os.fdopen(read_status, "rb") as status:
        reported = status.read().decode() or None
    stdout, stderr = _head(scratch / "stdout", written), _head(scratch / "stderr", written)
    if reported is not None and reported.startswith("setup:"):  # the sandbox, not the code, failed: nothing ran
        return Outcome(False, f"sandbox: {reported.removeprefix('setup:')}", stdout, stderr, None)
    code = int(reported) if reported is not None else None
    passed, reason = classify(code, timed_out, stderr, limits)
    return Outcome(passed, reason, stdout, stderr, code)


def classify(code: int | None, timed_out: bool, stderr: str, limits: SandboxLimits) -> tuple[bool, str | None]:
    """(passed, why not) from the code's exit status (negative: a signal; None: no status came back), whether the
    wall clock ran out, and what it wrote to stderr."""
    if timed_out:
        return False, f"timeout: still running after {limits.wall_s:g} s"
    if code == 0:
        return True, None
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    if code is None:
        return False, "killed: the sandbox ended before the code did"
    if code == -signal.SIGXCPU:
        return False, f"cpu time: over {limits.cpu_s:g} s"
    if code == -signal.SIGXFSZ or "File too large" in last:  # Python ignores SIGXFSZ: the write fails instead
        return False, f"output: wrote more than {limits.output_kb} KiB"
    if (refused := _refusal(last)) is not None:
        return False, refused
    if last.startswith("MemoryError") or "Cannot allocate memory" in last:
        return False, f"memory: over {limits.memory_mb} MiB"
    return False, _failure(code, last)


def _refusal(last: str) -> str | None:
    """Why the sandbox stopped the code, as the last line of its stderr tells; None when the sandbox did not."""
    if "Network is unreachable" in last or "sandbox: socket" in last:
        return "network: refused (the sandbox has none)"
    if "Read-only file system" in last:
        return "refused: writing outside the scratch directory (the rest of the filesystem is read-only)"
    if "sandbox: " in last:
        return f"refused: {last.split('sandbox: ', 1)[1]}"
    return None


def _failure(code: int, last: str) -> str:
    """Why code failed that hit no limit and no refusal (classify rules those out first, whatever the exit status)."""
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if last.startswith(("SyntaxError", "IndentationError", "TabError")):
        return f"syntax error: {last}"
    if last.startswith("AssertionError"):
        return f"tests failed: {last}"
    return f"exit {code}: {last}" if last else f"exit {code}"


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _head(path: Path, limit: int) -> str:
    with open(path, "rb") as file:
        return file.read(limit).decode("utf-8", errors="replace")


def _remove(path: Path) -> None:
    """rmtree that also removes what the code made unwritable (a directory chmod 000)."""

    def unlock(function, target, _exc) -> None:
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.isdir(target):
            os.chmod(target, 0o700)
        function(target)

    shutil.rmtree(path, onerror=unlock)
