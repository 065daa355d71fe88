"""trainer_core.torchrun, the torchrun every launch of several ranks goes through: its exit code is its ranks', and in
a Slurm job (SLURM_JOB_ID) Slurm's SIGTERM, which reaches every process of the job, is left to the ranks (they hand
back: checkpoint, then exit 6) instead of ending the agent and the ranks with it. Real torchrun, two real ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlplane.ports import free_port
from tests.harness.launch import ROOT

RANK = """
import os, signal, sys, time
from pathlib import Path
out, mode = Path(sys.argv[1]), sys.argv[2]
rank = int(os.environ["RANK"])
asked = []
signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(1))  # as run_dir_signals does in a Slurm job
(out / f"up-{rank}").touch()
if mode == "bad-input" and rank == 1:
    os._exit(2)  # EXIT_BAD_INPUT, while rank 0 still works
deadline = time.monotonic() + 60
while not asked and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0)  # the hand-back checkpoint: the agent must not stop this rank meanwhile
(out / f"saved-{rank}").touch()
os._exit(6)  # EXIT_HANDED_BACK
"""


def launch(tmp_path: Path, mode: str, env: dict[str, str]) -> subprocess.Popen:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    command = [sys.executable, "-m", "trainer_core.torchrun", "--nproc-per-node", "2", "--max-restarts", "0"]
    command += ["--master-port", str(free_port()), str(script), str(tmp_path), mode]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    return subprocess.Popen(command, env=env, cwd=tmp_path, start_new_session=True, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read() if process.stderr else ""
        time.sleep(0.05)


def test_in_a_slurm_job_sigterm_to_every_process_is_the_ranks_hand_back_and_the_launch_exits_6(tmp_path: Path) -> None:
    agent = launch(tmp_path, "hand-back", {"SLURM_JOB_ID": "1"})
    try:
        wait_for(tmp_path / "up-0", agent)
        wait_for(tmp_path / "up-1", agent)
        # What Slurm does on preemption and at the time limit: SIGTERM to every process of the job (the ranks are in
        # sessions of their own, torchrun's children).
        subprocess.run(["pkill", "-TERM", "-P", str(agent.pid)], check=True)
        agent.send_signal(signal.SIGTERM)
        _, said = agent.communicate(timeout=60)
    finally:
        os.killpg(agent.pid, signal.SIGKILL) if agent.poll() is None else None
    assert agent.returncode == 6, said[-3000:]
    assert (tmp_path / "saved-0").exists() and (tmp_path / "saved-1").exists()


def test_the_launch_exits_with_the_first_failed_ranks_code(tmp_path: Path) -> None:
    agent = launch(tmp_path, "bad-input", {"SLURM_JOB_ID": ""})
    try:
        _, said = agent.communicate(timeout=60)
    finally:
        os.killpg(agent.pid, signal.SIGKILL) if agent.poll() is None else None
    assert agent.returncode == 2, said[-3000:]
    assert "exitcode  : 2" in said  # torchrun's failure summary, as torchrun prints it
