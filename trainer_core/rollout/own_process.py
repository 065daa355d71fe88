"""The generator in a process of its own: the hf or continuous engine on a copy of the policy, so asynchronous GRPO's
sampling and training do not share one interpreter's lock. Two placements, one protocol:

- grpo.generator process: a child of the trainer (`--fd`: one end of a socket pair), on the trainer's device, ending
  with it (on close, on the trainer's failure and when the trainer dies: PR_SET_PDEATHSIG); its output goes to
  OUT/rollout/generator.log.
- grpo.generator node: the gang's last node, started by that node's worker (`--listen host:port`, which the node
  published when it joined); node 0's trainer connects to it over TCP. Its devices are its node's; its output is that
  node's log; it ends when the trainer closes or drops the connection.

    trainer (ProcessEngine)                                 generator (python -m trainer_core.rollout.own_process)
    start: the engine's settings, the policy's files  ───▶  writes them to --workdir, builds gen.engine on them
    generate: token ids, sampling, a seed              ───▶  the engine's completions: tokens, log-probabilities, finish
    load: a version, the weights (raw tensors)         ───▶  copies them into its model (between generate calls)

Each message is one JSON line, followed by `bytes` raw bytes where it says so (files and weights travel in the same
stream, so a node needs no shared filesystem); no pickle, and Python writes floats so that they read back exactly.
Weights travel as each tensor's own bytes, named with their dtype and shape in the line before them, read straight
into tensors on the other side: building a safetensors file in memory first took 14.7 s for a 0.6B policy in fp32
here, and a step of an asynchronous GRPO run on an H200 with a generator process took 2.4x the synchronous one's.
Each generate call carries a seed drawn from the trainer's torch generator, so the run's seed decides the generator's
draws wherever it runs. The generator has none of the trainer's distributed environment.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from trainer_core.backends import Backend, BackendError
from trainer_core.failures import EngineLost
from trainer_core.rollout.engines import Completion, HoldsNothing, Sampling, Weights
from trainer_core.rollout.vllm import _term_with_parent, write_model

LOG_LINES = 20
CONNECT_S = 300.0  # how long the trainer tries to reach a generator node (it may still be importing torch)


class GeneratorProcessError(EngineLost):
    """The generator's process died, did not start or could not be reached: the reason says why (a child's, its last
    lines). The attempt is lost, as a node's would be, and the run resumes from its last checkpoint."""


class Channel:
    """One end of the generator's connection: JSON lines, each with its `bytes` of payload after it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader: BinaryIO = sock.makefile("rb")
        # the last weights received, whose memory the next ones are read into: a fresh 2.4 GB each sync spent most of
        # its time on the first touch of its pages here (8.7 s against 1.9 s)
        self.staging: dict[str, torch.Tensor] = {}

    def send(self, message: dict[str, Any], payload: bytes | Sequence[memoryview] = b"") -> None:
        """`message`, then `payload`: bytes, or buffers sent one after another without being joined."""
        parts = [payload] if isinstance(payload, bytes) else list(payload)
        size = sum(memoryview(part).nbytes for part in parts)
        header = {**message, "bytes": size} if size else message
        self.sock.sendall(json.dumps(header).encode() + b"\n")
        for part in parts:
            self.sock.sendall(part)

    def send_tensors(self, message: dict[str, Any], state: Mapping[str, torch.Tensor]) -> None:
        """`message` with `state`'s tensors after it: their names, dtypes and shapes in the line, their bytes as they
        lie in memory (on the CPU)."""
        specs, parts = [], []
        for name, tensor in state.items():
            data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
            specs.append([name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), data.nbytes])
            parts.append(memoryview(data))
        self.send({**message, "tensors": specs}, parts)

    def receive(self) -> tuple[dict[str, Any], bytes | dict[str, torch.Tensor]] | None:
        """The next message and its payload (bytes, or the tensors it names, whose memory the next message's tensors
        reuse: copy them out before receiving again); None when the other end closed the connection."""
        line = self.reader.readline()
        if not line:
            return None
        message = json.loads(line)
        if "tensors" in message:
            tensors = self._read_tensors(message["tensors"])
            return None if tensors is None else (message, tensors)
        size = int(message.get("bytes", 0))
        payload = self.reader.read(size) if size else b""
        if len(payload) < size:
            return None
        return message, payload

    def _read_tensors(self, specs: list[list[Any]]) -> dict[str, torch.Tensor] | None:
        tensors = {}
        for name, dtype, shape, size in specs:
            kind = getattr(torch, dtype, None)
            if not isinstance(kind, torch.dtype):
                raise ValueError(f"the weights name an unknown dtype {dtype!r} for {name}")
            tensor = self.staging.get(name)
            if tensor is None or tensor.dtype != kind or list(tensor.shape) != list(shape):
                tensor = self.staging[name] = torch.empty(shape, dtype=kind)
            buffer = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
            if buffer.nbytes != size:
                raise ValueError(f"{name}: {size} bytes sent for a {dtype} tensor of shape {shape}")
            got = 0
            while got < size:
                read = self.reader.readinto(buffer[got:])
                if not read:
                    return None
                got += read
            tensors[name] = tensor
        return tensors

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class ProcessEngine(HoldsNothing):
    """The Engine protocol over a generator process that runs `engine` (hf or continuous) on its own copy of the
    policy: a child of the trainer (`start`) or a generator node's (`connect`)."""

    def __init__(self, channel: Channel, name: str, *, process: subprocess.Popen | None, log: Path | None, where: str) -> None:
        self.channel, self.process, self.log, self.where = channel, process, log, where
        self.name = f"{name} ({where})"
        self.version = 0

    @classmethod
    def start(
        cls, engine: str, policy: nn.Module, tokenizer: Any, backend: Backend, run_dir: Path, **settings: Any
    ) -> ProcessEngine:
        """Start a child on the trainer's device and hand it the policy (its config, tokenizer and `weights`, else its
        own state); it answers once its engine is built. `settings`: static_cache, kv_cache_share, weights."""
        workdir = run_dir / "rollout" / "generator"
        log = run_dir / "rollout" / "generator.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair()
        command = [sys.executable, "-m", "trainer_core.rollout.own_process", "--fd", str(theirs.fileno())]
        command += ["--workdir", str(workdir), "--device", str(backend.device), "--threads", str(torch.get_num_threads())]
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
        made = cls(Channel(ours), engine, process=process, log=log, where="own process")
        made._hand_over(policy, tokenizer, run_dir, engine, settings)
        return made

    @classmethod
    def connect(
        cls, address: str, engine: str, policy: nn.Module, tokenizer: Any, run_dir: Path, **settings: Any
    ) -> ProcessEngine:
        """Reach the generator node listening at `address` (host:port) and hand it the policy, as `start` does."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise BackendError(f"the generator node's address {address!r} is not host:port")
        deadline, last = time.monotonic() + CONNECT_S, None
        while True:
            try:
                sock = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
                break
            except OSError as exc:  # not listening yet: its worker starts it as the trainer starts
                last = exc
                if time.monotonic() > deadline:
                    why = f"the generator node at {address} did not answer for {CONNECT_S:g} s: {last}"
                    raise GeneratorProcessError(why) from None
                time.sleep(0.5)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        made = cls(Channel(sock), engine, process=None, log=None, where=f"generator node {address}")
        made._hand_over(policy, tokenizer, run_dir, engine, settings)
        return made

    def _hand_over(self, policy: nn.Module, tokenizer: Any, run_dir: Path, engine: str, settings: dict[str, Any]) -> None:
        """The policy's files (config, tokenizer, weights) to the generator, which builds `engine` on them."""
        dtype = str(next(policy.parameters()).dtype).removeprefix("torch.")
        start = {"op": "start", "engine": engine, "dtype": dtype}
        start |= {"static_cache": bool(settings.get("static_cache")), "kv_cache_share": settings.get("kv_cache_share", 0.3)}
        try:
            with tempfile.TemporaryDirectory(dir=run_dir) as staging:
                write_model(policy, Path(staging), settings.get("weights"))
                tokenizer.save_pretrained(staging)
                files = sorted(path for path in Path(staging).iterdir() if path.is_file())
                start["files"] = [[f.name, f.stat().st_size] for f in files]
                payload = b"".join(f.read_bytes() for f in files)
            self._send(start, payload)
            self._answer()  # {"ready": true} once the engine is built
        except BaseException:
            self.close()
            raise

    # --- the Engine protocol ---

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        seed = int(torch.randint(0, 2**62, (1,)))  # the run's generator decides the generator's draws
        self._send({"op": "generate", "prompts": prompts, "sampling": asdict(sampling), "seed": seed})
        answers = self._answer()["completions"]
        return [Completion(tokens, logprobs, finish, self.version) for tokens, logprobs, finish in answers]

    def update_weights(self, weights: Weights, version: int) -> None:
        """`weights` (a state dict, or a directory holding model.safetensors) into the generator's copy, as `version`."""
        if isinstance(weights, Mapping):
            state = weights
        elif weights is not None:
            from safetensors.torch import load_file

            state = load_file(Path(weights) / "model.safetensors")
        else:
            raise GeneratorProcessError("the generator's process holds its own weights: update_weights needs a state dict")
        self._send({"op": "load", "version": version}, state)
        self._answer()
        self.version = version

    def close(self) -> None:
        """Ask the generator to end; a child is then sent SIGTERM and SIGKILL if it lingers."""
        try:
            self.channel.send({"op": "close"})
        except OSError:
            pass
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        self.channel.close()

    # --- the messages ---

    def _send(self, message: dict[str, Any], payload: bytes | Mapping[str, torch.Tensor] = b"") -> None:
        """`message` with its payload: bytes, or a state's tensors (Channel.send_tensors)."""
        try:
            if isinstance(payload, Mapping):
                self.channel.send_tensors(message, payload)
            else:
                self.channel.send(message, payload)
        except OSError:
            raise self._failure("stopped listening") from None

    def _answer(self) -> dict[str, Any]:
        try:
            received = self.channel.receive()
        except OSError:  # a reset: the generator died with our request unread
            received = None
        if received is None:
            raise self._failure("ended")
        answer = received[0]
        if "error" in answer:
            raise self._failure(f"failed: {answer['error']}")
        return answer

    def _failure(self, what: str) -> GeneratorProcessError:
        if self.process is None:  # a generator node: its own lines are in the run's log, as that node's
            return GeneratorProcessError(f"the {self.where} {what} (its lines are the run's log of that node)")
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        status = self.process.poll()
        alive = "still running" if status is None else f"exited with status {status}"
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_LINES:] if self.log else []
        except OSError:
            lines = []
        tail = "\n".join(lines) if lines else "(nothing)"
        return GeneratorProcessError(f"the generator's process {what} ({alive}); its last lines, in {self.log}:\n{tail}")


# --- the generator ---


def serve(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The generator's own process (trainer_core/rollout/own_process.py).")
    place = parser.add_mutually_exclusive_group(required=True)
    place.add_argument("--fd", type=int, help="a child of the trainer: its end of the socket pair")
    place.add_argument("--listen", metavar="HOST:PORT", help="a generator node: where the trainer connects")
    parser.add_argument("--workdir", type=Path, required=True, help="where the policy's files are written")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch's threads (default: torch's own choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        host, _, port = args.listen.rpartition(":")
        with socket.create_server((host.strip("[]"), int(port))) as server:
            print(f"generator: listening on {args.listen} for the trainer", flush=True)
            sock, peer = server.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print(f"generator: the trainer connected from {peer[0]}", flush=True)
    channel = Channel(sock)
    try:
        return _serve(channel, args)
    finally:
        channel.close()


def _serve(channel: Channel, args: argparse.Namespace) -> int:
    engine = model = None
    while (received := channel.receive()) is not None:
        request, payload = received
        try:
            if request["op"] == "close":
                return 0
            if request["op"] == "start":
                engine, model = _engine(request, payload, args)
                channel.send({"ready": True})
            elif request["op"] == "load":
                load_in_place(model, payload)  # type: ignore[arg-type]
                engine.version = request["version"]  # type: ignore[union-attr]
                channel.send({"loaded": request["version"]})
            else:
                torch.manual_seed(request["seed"])
                sampling = Sampling(**{**request["sampling"], "stop": tuple(request["sampling"]["stop"])})
                done = engine.generate(request["prompts"], sampling)  # type: ignore[union-attr]
                channel.send({"completions": [[c.tokens, c.logprobs, c.finish_reason] for c in done]})
        except Exception:  # noqa: BLE001  (said to the trainer, which ends the run with it)
            channel.send({"error": traceback.format_exc(limit=3)})
            return 1
    print("generator: the trainer closed the connection without a close", flush=True)
    return 1


def load_in_place(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """The trainer's weights copied into the generator's model (onto its device, in its dtype); every name must be
    the model's, and every one of the model's sent."""
    own = model.state_dict()
    if missing := own.keys() - tensors.keys():
        raise ValueError(f"the weights sent lack {sorted(missing)[:5]}")
    if unexpected := tensors.keys() - own.keys():
        raise ValueError(f"the weights sent hold names the generator's model lacks: {sorted(unexpected)[:5]}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            own[name].copy_(tensor)


def _engine(request: dict[str, Any], payload: bytes, args: argparse.Namespace) -> tuple[Any, nn.Module]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlplane.spec.sections import TorchBackend as TorchBackendSpec
    from rlplane.spec.sections import TrainSpec
    from trainer_core.backends import TorchBackend
    from trainer_core.backends.dist import DistEnv
    from trainer_core.rollout.engines import HfEngine

    if request["engine"] not in ("hf", "continuous"):
        raise ValueError(f"a generator process runs the hf or continuous engine, not {request['engine']}")
    started = time.monotonic()
    args.workdir.mkdir(parents=True, exist_ok=True)
    offset = 0
    for name, size in request["files"]:
        if Path(name).name != name:
            raise ValueError(f"the trainer sent a file outside the generator's directory: {name!r}")
        (args.workdir / name).write_bytes(payload[offset : offset + size])
        offset += size
    model = AutoModelForCausalLM.from_pretrained(args.workdir, dtype=getattr(torch, request["dtype"])).to(args.device)
    model.eval().requires_grad_(False)
    backend = TorchBackend(TorchBackendSpec(precision="fp32"), TrainSpec(steps=1, batch_size=1), DistEnv())
    tokenizer = AutoTokenizer.from_pretrained(args.workdir)
    if tokenizer.pad_token is None:  # as the trainer's loader sets it (models/loading.py)
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if request["engine"] == "continuous":
        from trainer_core.rollout.continuous import ContinuousEngine

        engine: Any = ContinuousEngine(backend, model, tokenizer, request["kv_cache_share"])
    else:
        engine = HfEngine(backend, model, tokenizer, request["static_cache"])
    took = time.monotonic() - started
    print(f"generator: {request['engine']} engine on {args.workdir} ({args.device}), ready in {took:.1f} s", flush=True)
    return engine, model


if __name__ == "__main__":
    sys.exit(serve())
