"""`python -m trainer_core.forkserver`: trainer processes forked from one that imported the training stack once.

A trainer that starts as a new interpreter spends 3-5 s of CPU importing torch and transformers (whose model code
brings in DTensor, distributed checkpointing and dynamo) before its first step. A worker that runs many short CPU runs
(evaluations, small sweeps, `rlplane up` on a laptop) starts each that much sooner by asking this process, which its
worker starts on first use (worker/forks.py), to fork one. The child becomes what `python -m trainer_core run ...`
would have been: a session of its own, the trainer's environment, working directory and argv, its output on the
worker's pipe, SIGTERM when its parent goes (as the worker arms its trainers), and the interpreter's own exit at the
end (threads joined, atexit run, as `python -m` ends).

Only a CPU run's one trainer process is started here: a process that forks must not have touched CUDA (never tried
here), and torchrun's and DeepSpeed's launchers start their ranks themselves. What the imports read from the
environment is read once, here: the worker forks only where the trainer's environment differs from this process's in
variables read at run time (RLPLANE_*), and starts a new interpreter otherwise.

Protocol: a Unix SOCK_SEQPACKET socket on this process's stdin, one JSON object a message. The worker sends
{"id", "argv", "cwd", "env"} (argv as after `python`: `-m trainer_core args...`) with the write end of the trainer's
output pipe attached (SCM_RIGHTS); this process answers {"ready": true} once its imports are done, {"id", "pid"} once the
child is set up as its trainer (its session, output, environment and command line), and {"id", "code"} when it exits
(as Popen's returncode: negative for a signal). The worker closing its end ends every child this process started,
then the process itself.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable

from rlplane.forking import MAX_MESSAGE
from rlplane.processes import signal_on_parent_death


def _preload() -> None:
    """What every recipe's trainer imports, imported once. Nothing runs: no thread, no CUDA, no process group."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # as trainer_core.cli.main sets it before transformers
    import importlib

    import transformers.modeling_utils  # noqa: F401

    import trainer_core.backends.torch_backend  # noqa: F401
    import trainer_core.checkpoint  # noqa: F401
    import trainer_core.cli  # noqa: F401
    import trainer_core.models  # noqa: F401
    import trainer_core.recipes.run_dir_signals  # noqa: F401
    from rlplane.spec.algorithms import TABLE

    for algorithm in TABLE:
        if algorithm.recipe is not None:
            importlib.import_module(f"trainer_core.recipes.{algorithm.recipe}")


def _send(channel: socket.socket, message: dict) -> None:
    channel.send(json.dumps(message).encode())


def serve(channel: socket.socket) -> Callable[[], None] | None:
    """Fork a child for each request until the worker closes the channel; None then. In a child it returns what the
    child runs (the trainer's module as __main__), so the child leaves this loop's frames before it trains."""
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    me = os.getpid()
    while True:
        readable, _, _ = select.select([channel, *children], [], [])
        for pidfd in [fd for fd in readable if fd in children]:
            request_id, pid = children.pop(pidfd)
            os.close(pidfd)
            _, status = os.waitpid(pid, 0)
            _send(channel, {"id": request_id, "code": os.waitstatus_to_exitcode(status)})
        if channel not in readable:
            continue
        message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 1)
        if not message:  # the worker is gone or done: so are the trainers it started here
            for _, pid in children.values():
                _signal_group(pid, signal.SIGTERM)
            return None
        request = json.loads(message)
        if threading.active_count() != 1:  # a fork copies only the calling thread: never fork beside another
            raise RuntimeError("the forkserver started a thread; it cannot fork safely")
        started_r, started_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(started_r)
            for pidfd in children:
                os.close(pidfd)
            return _become_trainer(request, fds[0], started_w, me, channel)
        os.close(started_w)
        os.close(fds[0])
        os.read(started_r, 1)  # the child is set up as its trainer (empty: it died first; its exit comes by its pidfd)
        os.close(started_r)
        children[os.pidfd_open(pid)] = (request["id"], pid)
        _send(channel, {"id": request["id"], "pid": pid})


def _become_trainer(request: dict, output: int, started: int, server: int, channel: socket.socket) -> Callable[[], None]:
    """In the forked child: its own session, armed for its parent's death, its output on the worker's pipe."""
    os.setsid()
    signal_on_parent_death(signal.SIGTERM)()
    if os.getppid() != server:  # the server died before the arming: so must this process
        os._exit(128 + signal.SIGTERM)
    channel.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(null)
    os.close(output)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    _title(" ".join([sys.executable, *argv]))  # what `ps` and `pgrep -f` show of it: the command it stands for
    os.write(started, b"s")  # the worker may look for it now
    os.close(started)

    def run() -> None:  # argv: `-m module args...`, the only command the worker forks
        sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in argv[0]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)

    return run


def _title(title: str) -> None:
    """The process's command line as /proc shows it. setproctitle prepares the room for it the first time, which this
    process does before it forks (the room is its argv and environment as it started)."""
    try:
        import setproctitle
    except ImportError:  # not installed: a forked trainer shows the forkserver's command line
        return
    setproctitle.setproctitle(title)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def main() -> None:
    channel = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the channel is held by its own descriptor; a child's stdin is /dev/null
    os.close(null)
    try:
        _preload()
    except Exception as exc:  # the worker starts new interpreters instead, and says why
        _send(channel, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    _title(" ".join(sys.orig_argv))  # prepared here, before any fork
    _send(channel, {"ready": True})
    child = serve(channel)
    if child is not None:
        child()  # the trainer's own exit (SystemExit from its __main__) ends this interpreter as `python -m` would


if __name__ == "__main__":
    main()
