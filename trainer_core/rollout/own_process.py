"""The generator in its own process (grpo.generator: process): the hf or continuous engine on a copy of the policy in a
child process of the trainer, so asynchronous GRPO's sampling and training do not share one interpreter's lock.

    trainer (ProcessEngine)                          child (python -m trainer_core.rollout.own_process)
    start: the policy's config and weights  ──────▶  loads them (OUT/rollout/generator), builds gen.engine on them
    generate: token ids, sampling, a seed   ──────▶  the engine's completions: tokens, log-probabilities, finish
    update_weights: safetensors, a version  ──────▶  loads them in place (between generate calls)

One JSON object a line each way over a socket pair (no pickle; Python writes floats so that they read back exactly).
Each generate call carries a seed drawn from the trainer's torch generator, so the run's seed decides the child's
draws. The child sees the trainer's device (on a GPU it shares it, as a vLLM server started beside the trainer does),
one thread per its torch settings, none of the trainer's distributed environment, and it ends with the trainer: on
close, on the trainer's failure and when the trainer dies (PR_SET_PDEATHSIG). Its output goes to
OUT/rollout/generator.log; a child that dies ends the trainer's next call with its last lines.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer_core.backends import Backend
from trainer_core.failures import EngineLost
from trainer_core.rollout.engines import Completion, HoldsNothing, Sampling, Weights
from trainer_core.rollout.vllm import _term_with_parent, write_model, write_weights

LOG_LINES = 20


class GeneratorProcessError(EngineLost):
    """The generator's process died (or did not start): the reason holds its last lines. The attempt is lost, as a
    node's would be, and the run resumes from its last checkpoint."""


class ProcessEngine(HoldsNothing):
    """The Engine protocol over a child process that runs `engine` (hf or continuous) on its own copy of the policy."""

    def __init__(self, process: subprocess.Popen, channel: socket.socket, log: Path, weights_dir: Path, name: str) -> None:
        self.process, self.channel, self.log, self.weights_dir = process, channel, log, weights_dir
        self.name = f"{name} (own process)"
        self.reader = channel.makefile("r", encoding="utf-8")
        self.version = 0

    @classmethod
    def start(
        cls,
        engine: str,
        policy: nn.Module,
        tokenizer: Any,
        backend: Backend,
        run_dir: Path,
        *,
        static_cache: bool = False,
        kv_cache_share: float = 0.3,
        weights: Mapping[str, torch.Tensor] | None = None,
    ) -> ProcessEngine:
        """Write the policy (its config and `weights`, else its own state) and its tokenizer to OUT/rollout/generator
        and start the child on them; it answers once its engine is built."""
        weights_dir = run_dir / "rollout" / "generator"
        write_model(policy, weights_dir, weights)
        tokenizer.save_pretrained(weights_dir)
        log = run_dir / "rollout" / "generator.log"
        ours, theirs = socket.socketpair()
        dtype = str(next(policy.parameters()).dtype).removeprefix("torch.")
        command = [sys.executable, "-m", "trainer_core.rollout.own_process", "--fd", str(theirs.fileno())]
        command += ["--model", str(weights_dir), "--engine", engine, "--dtype", dtype, "--device", str(backend.device)]
        command += ["--kv-cache-share", str(kv_cache_share), "--threads", str(torch.get_num_threads())]
        command += ["--static-cache"] if static_cache else []
        # Not the trainer's rank: the child is a process of its own, with no process group to join.
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
        with open(log, "ab") as out:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                preexec_fn=_term_with_parent,
            )
        theirs.close()
        made = cls(process, ours, log, weights_dir, engine)
        try:
            made._answer()  # {"ready": true} once the engine is built
        except BaseException:
            made.close()
            raise
        return made

    # --- the Engine protocol ---

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        seed = int(torch.randint(0, 2**62, (1,)))  # the run's generator decides the child's draws
        self._send({"op": "generate", "prompts": prompts, "sampling": asdict(sampling), "seed": seed})
        answers = self._answer()["completions"]
        return [Completion(tokens, logprobs, finish, self.version) for tokens, logprobs, finish in answers]

    def update_weights(self, weights: Weights, version: int) -> None:
        """`weights` (a state dict, or a directory holding model.safetensors) into the child's copy, as `version`."""
        if isinstance(weights, Mapping):
            write_weights(weights, self.weights_dir)
            path = self.weights_dir
        elif weights is not None:
            path = Path(weights)
        else:
            raise GeneratorProcessError("the generator's process holds its own weights: update_weights needs a state dict")
        self._send({"op": "load", "path": str(path / "model.safetensors"), "version": version})
        self._answer()
        self.version = version

    def close(self) -> None:
        """Ask the child to end, then SIGTERM and SIGKILL what is left of it."""
        if self.process.poll() is None:
            try:
                self._send({"op": "close"})
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        self.reader.close()
        self.channel.close()

    # --- the line protocol ---

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self.channel.sendall((json.dumps(message) + "\n").encode())
        except OSError:
            raise self._failure("the generator's process stopped listening") from None

    def _answer(self) -> dict[str, Any]:
        try:
            line = self.reader.readline()
        except OSError:  # a reset: the process died with our request unread
            line = ""
        if not line:
            raise self._failure("the generator's process ended")
        answer = json.loads(line)
        if "error" in answer:
            raise self._failure(f"the generator's process failed: {answer['error']}")
        return answer

    def _failure(self, what: str) -> GeneratorProcessError:
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        status = self.process.poll()
        alive = "still running" if status is None else f"exited with status {status}"
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_LINES:]
        except OSError:
            lines = []
        tail = "\n".join(lines) if lines else "(nothing)"
        return GeneratorProcessError(f"{what} ({alive}); its last lines, in {self.log}:\n{tail}")


# --- the child ---


def serve(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The generator's own process (trainer_core/rollout/own_process.py).")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--engine", choices=("hf", "continuous"), required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--kv-cache-share", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--static-cache", action="store_true")
    args = parser.parse_args(argv)
    channel = socket.socket(fileno=args.fd)
    reader = channel.makefile("r", encoding="utf-8")

    def send(message: dict[str, Any]) -> None:
        channel.sendall((json.dumps(message) + "\n").encode())

    try:
        engine, model = _engine(args)
    except Exception:  # noqa: BLE001  (said to the trainer, which ends the run with it)
        send({"error": traceback.format_exc(limit=3)})
        return 1
    send({"ready": True})
    for line in reader:
        request = json.loads(line)
        try:
            if request["op"] == "close":
                return 0
            if request["op"] == "load":
                from safetensors.torch import load_file

                with torch.no_grad():
                    model.load_state_dict(load_file(request["path"], device=str(model.device)))
                engine.version = request["version"]
                send({"loaded": request["version"]})
            else:
                torch.manual_seed(request["seed"])
                sampling = Sampling(**{**request["sampling"], "stop": tuple(request["sampling"]["stop"])})
                done = engine.generate(request["prompts"], sampling)
                send({"completions": [[c.tokens, c.logprobs, c.finish_reason] for c in done]})
        except Exception:  # noqa: BLE001
            send({"error": traceback.format_exc(limit=3)})
            return 1
    return 0


def _engine(args: argparse.Namespace) -> tuple[Any, nn.Module]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlplane.spec.sections import TorchBackend as TorchBackendSpec
    from rlplane.spec.sections import TrainSpec
    from trainer_core.backends import TorchBackend
    from trainer_core.backends.dist import DistEnv
    from trainer_core.rollout.engines import HfEngine

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).to(args.device)
    model.eval().requires_grad_(False)
    backend = TorchBackend(TorchBackendSpec(precision="fp32"), TrainSpec(steps=1, batch_size=1), DistEnv())
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:  # as the trainer's loader sets it (models/loading.py)
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if args.engine == "continuous":
        from trainer_core.rollout.continuous import ContinuousEngine

        engine: Any = ContinuousEngine(backend, model, tokenizer, args.kv_cache_share)
    else:
        engine = HfEngine(backend, model, tokenizer, args.static_cache)
    took = time.monotonic() - started
    print(f"generator: {args.engine} engine on {args.model} ({args.device}), ready in {took:.1f} s", flush=True)
    return engine, model


if __name__ == "__main__":
    sys.exit(serve())
