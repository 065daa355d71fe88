"""The sandbox that runs untrusted Python (trainer_core/environments/sandbox.py): each thing it cannot run is a
reason, never an exception; no network (a connect to a listening 127.0.0.1 socket fails), no inherited secrets, a
scratch directory removed after and the only place it may write, none of the trainer's files to read, no process
outliving it; in both of its ways of keeping the network out (network
and PID namespaces, or an audit hook where namespaces cannot be made). And the python verifier built on it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlplane.spec.environments import SandboxLimits
from tests.harness.environments import played
from trainer_core.environments.python_exec import PythonExecution, code_of
from trainer_core.environments.sandbox import namespaces_work, run_python, visible_paths

LIMITS = SandboxLimits(cpu_s=1, wall_s=3, memory_mb=256, output_kb=16)
MODES = [pytest.param(True, id="namespaces"), pytest.param(False, id="audit-hook")]


def _mode(namespaces: bool) -> bool:
    # A failure, not a skip: this machine and CI can make them, so a probe that says otherwise is a bug to see (on a
    # machine with user namespaces off, these cases fail and say why; the audit-hook cases still run)
    assert not namespaces or namespaces_work(), "unshare could not make network, PID and mount namespaces here"
    return namespaces


@pytest.mark.parametrize("namespaces", MODES)
@pytest.mark.parametrize(
    "source, reason",
    [
        ("assert 1 == 2, 'wrong'", "tests failed: AssertionError: wrong"),
        ("def f(:\n", "syntax error: SyntaxError"),
        ("import time\ntime.sleep(30)", "timeout: still running after 3 s"),
        ("while True:\n    pass", "cpu time: over 1 s"),
        ("x = bytearray(2 * 1024**3)", "memory: over 256 MiB"),
        ("print('x' * 100_000)", "output: wrote more than 16 KiB"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "killed by SIGSEGV"),
        ("raise SystemExit(3)", "exit 3"),
        ("raise ValueError('nope')", "exit 1: ValueError: nope"),
    ],
)
def test_what_the_sandbox_cannot_run_is_a_reason(namespaces: bool, source: str, reason: str) -> None:
    started = time.monotonic()
    outcome = run_python(source, LIMITS, use_namespaces=_mode(namespaces))
    assert not outcome.passed and outcome.reason.startswith(reason), outcome
    assert time.monotonic() - started < LIMITS.wall_s + 2


@pytest.mark.parametrize("namespaces", MODES)
def test_the_sandbox_has_no_network_no_secrets_and_a_scratch_directory(namespaces: bool) -> None:
    """A connect to a socket listening on 127.0.0.1 fails inside; the trainer's variables are not there; the working
    directory is the sandbox's own and is gone afterwards."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        os.environ["RLPLANE_TEST_SECRET"] = "hunter2"
        try:
            source = "import os, socket\nprint(os.getcwd())\nprint(os.environ.get('RLPLANE_TEST_SECRET'))\n"
            source += f"socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
            outcome = run_python(source, LIMITS, use_namespaces=_mode(namespaces))
        finally:
            del os.environ["RLPLANE_TEST_SECRET"]
    cwd, secret = outcome.stdout.splitlines()[:2]
    assert secret == "None" and "connected" not in outcome.stdout
    assert not outcome.passed and outcome.reason == "network: refused (the sandbox has none)", outcome
    assert "rlplane-sandbox-" in cwd and not Path(cwd).exists()


@pytest.mark.parametrize("namespaces", MODES)
def test_the_scratch_directory_is_the_only_place_it_writes(namespaces: bool, tmp_path: Path) -> None:
    """Overwriting or removing a file outside fails with a reason and leaves the file as it was: one of the trainer's
    (in its namespaces the code does not even see it) and one in this Python's environment, which it sees read-only.
    The scratch directory takes files and directories."""
    victims = [tmp_path / "checkpoint.bin", Path(sys.prefix) / f"sandbox-victim-{os.getpid()}"]
    try:
        for victim in victims:
            victim.write_text("weights")
            for source in (f"open({str(victim)!r}, 'w').write('gone')", f"import os\nos.remove({str(victim)!r})"):
                outcome = run_python(source, LIMITS, use_namespaces=_mode(namespaces))
                assert not outcome.passed and victim.read_text() == "weights", outcome
                if namespaces and victim.parent == tmp_path:
                    assert "No such file or directory" in outcome.reason, outcome
                else:
                    assert outcome.reason.startswith("refused: ") and "scratch directory" in outcome.reason, outcome
    finally:
        victims[1].unlink(missing_ok=True)
    inside = "import os\nos.mkdir('d')\nopen('d/x', 'w').write('kept')\nprint(open('d/x').read())"
    outcome = run_python(inside, LIMITS, use_namespaces=_mode(namespaces))
    assert outcome.passed and outcome.stdout == "kept\n", outcome


@pytest.mark.parametrize("namespaces", MODES)
def test_the_trainers_files_are_not_there_to_read(namespaces: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The code reads the system and this Python, and none of the trainer's files: not its user's ~/.config (rlplane
    login's token) or ~/.ssh, not /tmp, not the directory the trainer runs in. In its namespaces they are not there;
    under the audit hook, opening or listing them is refused."""
    _mode(namespaces)
    for where in (".config/rlplane", ".ssh"):
        (tmp_path / where).mkdir(parents=True)
        (tmp_path / where / "secret").write_text("hunter2")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    looked_for = [tmp_path / ".config/rlplane/secret", tmp_path / ".ssh/secret", Path.cwd() / "pyproject.toml"]
    source = (
        "import os\ndef attempt(read):\n    try:\n        return repr(read())\n    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    source += "".join(f"print(attempt(lambda: open({str(p)!r}).read()))\n" for p in looked_for)
    # In its namespaces /tmp holds its scratch directory, and the directories leading to this Python where that lies
    # under /tmp (a checkout in /tmp: its venv is bound there, and nothing else of the checkout).
    python_tops = sorted({p.split("/")[2] for p in visible_paths() if p.startswith("/tmp/")})
    hidden = f"n != os.getcwd().split('/')[2] and n not in {python_tops!r}"
    source += f"print(attempt(lambda: [n for n in os.listdir('/tmp') if {hidden}]))\n"
    source += "stdlib = os.path.dirname(os.__file__)\n"
    source += "print(os.path.isdir('/usr/bin'), 'def ' in open(os.__file__).read(), len(os.listdir(stdlib)) > 9)"
    outcome = run_python(source, LIMITS, use_namespaces=namespaces)
    refusal = "FileNotFoundError" if namespaces else "PermissionError"
    listed = "[]" if namespaces else "PermissionError"  # in its namespaces /tmp holds its scratch directory alone
    assert outcome.passed and outcome.stdout.splitlines() == [refusal] * len(looked_for) + [listed, "True True True"], outcome
    assert "hunter2" not in outcome.stdout + outcome.stderr and (tmp_path / ".ssh" / "secret").read_text() == "hunter2"


@pytest.mark.parametrize("namespaces", MODES)
def test_nothing_the_sandbox_starts_outlives_it(namespaces: bool) -> None:
    marker = f"{time.time_ns() % 10**6}.25"  # a sleep no one else runs
    source = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nprint('started')"
    outcome = run_python(source, LIMITS, use_namespaces=_mode(namespaces))
    if namespaces:  # it may start one: the PID namespace ends it with the code
        assert outcome.passed and outcome.stdout == "started\n", outcome
    else:  # it may not start one at all
        assert not outcome.passed and outcome.reason.startswith("refused: subprocess.Popen"), outcome
    running = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert running.stdout == "", running.stdout


def test_python_verifier_runs_the_code_with_the_rows_tests() -> None:
    row = {"prompt": "Write add(a, b).", "tests": "assert add(2, 3) == 5"}
    message = "Here:\n```python\ndef add(a, b):\n    return a + b\n```"
    assert code_of(message) == "def add(a, b):\n    return a + b\n"
    (passed,) = played(PythonExecution(LIMITS, max_turns=1), row, message)
    assert passed.done and passed.reward == 1.0 and passed.components == {"passed": 1.0}
    (failed,) = played(PythonExecution(LIMITS, max_turns=1), row, "def add(a, b):\n    return a - b")
    assert failed.done and failed.reward == 0.0 and failed.reason.startswith("tests failed") and not failed.error
    feedback, second = played(PythonExecution(LIMITS, max_turns=2), row, "def add(a, b) return", message)
    assert not feedback.done and feedback.error and feedback.text.startswith("<output>syntax error")
    assert second.done and second.reward == 1.0  # it read the error and tried again
