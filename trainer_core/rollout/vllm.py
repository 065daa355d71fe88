"""The vllm engine (gen.engine: vllm): a vLLM server for the run, over HTTP, token ids in and log-probabilities out.

vLLM pins its own torch and transformers, so its server runs from its own interpreter (gen.vllm.python, else the
node's RLPLANE_VLLM_PYTHON; scripts/vllm-env.sh builds one), never in the trainer's environment. Rank 0 starts it for
the run on a free loopback port, on the policy as it is at the start (written to OUT/rollout/weights), and stops it
with the run: on the run's end, a failure, SIGTERM or Ctrl-C (the recipes close their engine), and when the trainer
dies without closing it (the server gets SIGTERM from the kernel: PR_SET_PDEATHSIG). Its output is kept in
OUT/rollout/vllm-server.log and, each line marked "vllm server:", in the run's log; its last lines are in the reason
of a run that fails because of it. Or gen.vllm.url names a server that is already up, which must read the run's
directory: it is loaded with the run's starting weights from there first. A server that dies or stops answering
mid-run ends the attempt lost (VllmLost: the trainer exits 5 and its worker retries it from the last checkpoint).

Only the parts a CUDA vLLM runs unchanged are used (nothing here is GPU-specific):
    POST /inference/v1/generate   one request per prompt, sent together (vLLM batches them continuously): token ids,
                                  sampling with a seed drawn from the trainer's generator, the sampled token's raw
                                  log-probability (vLLM's default logprobs mode), finish reason, weight version
    POST /pause, /resume          around a weight update (mode=wait: requests in flight finish first)
    POST /collective_rpc          reload_weights from OUT/rollout/weights (the server needs VLLM_SERVER_DEV_MODE=1,
                                  which the started one gets), then /update_weight_version: each answer says which
                                  policy version sampled it
NCCL weight transfer and CUDA graphs are GPU-only and not used (never run here). Stop strings (gen.stop) are cut
after the token that completes one, as the continuous engine does (a tokens-only server does not detokenize).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch
from torch import nn

from rlplane.ports import free_port
from rlplane.spec.generation import VllmSpec
from trainer_core.backends import Backend, BackendError
from trainer_core.failures import EngineLost
from trainer_core.rollout.engines import Completion, Sampling, Weights, cut_at_stop, finish_reason

PYTHON_SETTING = "RLPLANE_VLLM_PYTHON"
MODULE = "vllm.entrypoints.openai.api_server"
LOG_LINES = 20  # of the server's log in a failure's reason


class VllmError(BackendError):
    """The vllm engine's server is missing, did not come up, or died: the reason names the setting and its last lines."""


class VllmLost(VllmError, EngineLost):
    """The server died or stopped answering mid-run: not the run's fault, so the attempt is lost (the trainer exits 5)
    and its worker retries it from the last checkpoint."""


class VllmEngine:
    name = "vllm"

    def __init__(
        self, url: str, backend: Backend, tokenizer: Any, weights_dir: Path, server: Server | None, request_timeout_s: float
    ) -> None:
        self.url, self.backend, self.tokenizer, self.weights_dir, self.server = url, backend, tokenizer, weights_dir, server
        self.request_timeout_s = request_timeout_s
        self.client = httpx.Client(base_url=url, timeout=httpx.Timeout(30.0, read=request_timeout_s))
        self.version = 0

    @classmethod
    def start(
        cls,
        spec: VllmSpec | None,
        backend: Backend,
        policy: nn.Module,
        tokenizer: Any,
        run_dir: Path,
        reporter: Any,
        weights: Mapping[str, torch.Tensor] | None = None,
    ) -> VllmEngine:
        """Every rank: rank 0 writes the policy's config and weights (`weights`, gathered where the policy is sharded;
        else its own) and starts the server (or loads them into gen.vllm.url's), the others learn its port. Version 0
        is the weights written here; the caller pushes its own version next."""
        spec = spec or VllmSpec()
        weights_dir = run_dir / "rollout" / "weights"
        port, server, failure = 0, None, None
        if backend.is_rank_zero:
            try:
                write_model(policy, weights_dir, weights)
                if spec.url is None:
                    server = Server.launch(spec, policy, backend, weights_dir, run_dir / "rollout" / "vllm-server.log")
                    port = server.port
                    if reporter is not None:
                        reporter.log(f"vllm engine: server {server.python} on 127.0.0.1:{port}, up in {server.took:.0f} s")
                else:
                    wait_healthy(spec.url, spec.start_timeout_s, None)
            except Exception as exc:  # any: the other ranks must hear of it below, not wait on a server that never came
                failure = exc
        # Every rank learns the port (and whether rank 0 failed) in one collective.
        flags = torch.tensor([float(port), float(failure is not None)], device=backend.device)
        shared = backend.all_reduce(flags, "max")
        if failure is not None:
            raise failure
        if float(shared[1]):
            raise VllmError("the vllm engine's server did not start on rank 0 (rank 0's reason and the server's log say why)")
        url = spec.url.rstrip("/") if spec.url else f"http://127.0.0.1:{int(shared[0])}"
        engine = cls(url, backend, tokenizer, weights_dir, server, spec.request_timeout_s)
        if spec.url is not None:  # a server that was up already serves other weights: the run's, from its directory
            engine.update_weights(weights_dir, 0)
            backend.all_reduce(torch.zeros(1, device=backend.device), "sum")  # no rank samples before they are in
        return engine

    # --- the Engine protocol ---

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),)).tolist()  # the run's seed decides vLLM's draws
        eos = self.tokenizer.eos_token_id
        params: dict[str, Any] = {
            "max_tokens": sampling.max_new_tokens,
            "logprobs": 0,  # the sampled token's own
            "temperature": 0.0 if sampling.greedy else sampling.temperature,
            "stop_token_ids": [] if eos is None else [eos],
        }
        if not sampling.greedy:
            params |= {"top_p": sampling.top_p} | ({"top_k": sampling.top_k} if sampling.top_k else {})

        def one(prompt_and_seed: tuple[list[int], int]) -> dict[str, Any]:
            prompt, seed = prompt_and_seed
            body = {"token_ids": prompt, "sampling_params": params | {"seed": seed}}
            return self._post("/inference/v1/generate", body)["choices"][0]

        with ThreadPoolExecutor(max_workers=min(64, len(prompts))) as pool:
            choices = list(pool.map(one, zip(prompts, seeds, strict=True)))
        return [self._completion(choice, sampling) for choice in choices]

    def update_weights(self, weights: Weights, version: int) -> None:
        """Rank 0 writes `weights` (a state dict) to OUT/rollout/weights, or reloads from the directory given, and tags
        the server's answers with `version`; the other ranks only take the version (push_weights waits for rank 0)."""
        if self.backend.is_rank_zero:
            if weights is None:
                raise VllmError("the vllm engine holds its own weights: update_weights needs a state dict or a directory")
            directory = self.weights_dir
            if isinstance(weights, Mapping):
                write_weights(weights, directory)
            else:
                directory = Path(weights)
            self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(directory)}})
            self._post("/update_weight_version", {"new_version": str(version)})
        self.version = version

    def pause(self) -> None:
        if self.backend.is_rank_zero:
            self._post("/pause?mode=wait", {})

    def resume(self) -> None:
        if self.backend.is_rank_zero:
            self._post("/resume", {})

    def sleep(self) -> None:
        """Nothing: the server runs in its own process, beside the trainer, not sharing its memory."""

    def wake(self) -> None:
        """Nothing (see sleep)."""

    def close(self) -> None:
        self.client.close()
        if self.server is not None:
            self.server.stop()

    # --- HTTP ---

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = self.client.post(path, json=body)
        except httpx.ReadTimeout:
            raise self._failure(
                f"the vllm engine's server at {self.url} did not answer {path} within gen.vllm.request_timeout_s "
                f"{self.request_timeout_s:g} s",
                lost=True,
            ) from None
        except httpx.HTTPError as exc:
            raise self._failure(f"the vllm engine's server at {self.url} did not answer {path} ({exc})", lost=True) from None
        if response.status_code >= 400:
            raise self._failure(f"the vllm engine's server answered {path} with {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def _failure(self, what: str, lost: bool = False) -> VllmError:
        """`what`, with the server's last lines; `lost`: a server gone or silent mid-run (VllmLost), not an answer."""
        kind = VllmLost if lost else VllmError
        return kind(what if self.server is None else self.server.describe(what))

    def _completion(self, choice: dict[str, Any], sampling: Sampling) -> Completion:
        tokens = list(choice["token_ids"] or [])
        logprobs = [float(entry["logprob"]) for entry in (choice.get("logprobs") or {}).get("content") or []]
        if len(logprobs) != len(tokens):
            raise VllmError(f"the vllm engine's server returned {len(logprobs)} log-probabilities for {len(tokens)} tokens")
        tokens, logprobs = cut_at_stop(tokens, logprobs, sampling.stop, self.tokenizer)
        spans = choice.get("weight_versions") or [{}]
        version = spans[-1].get("version")
        return Completion(
            tokens,
            logprobs,
            finish_reason(tokens, self.tokenizer.eos_token_id, sampling),
            int(version) if str(version).isdigit() else self.version,
        )


def write_model(policy: nn.Module, directory: Path, weights: Mapping[str, torch.Tensor] | None = None) -> None:
    """The policy as a model directory vLLM loads: its config and its weights (`weights`, else its own) as
    safetensors (no tokenizer: the server takes token ids)."""
    directory.mkdir(parents=True, exist_ok=True)
    policy.config.save_pretrained(directory)
    write_weights(policy.state_dict() if weights is None else weights, directory)


def write_weights(state: Mapping[str, torch.Tensor], directory: Path) -> None:
    """`state` as directory/model.safetensors, replaced whole (written beside it, then renamed): the server never
    reads half a file."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / "model.safetensors.partial"
    # save_file, not save() then write_bytes: save() builds the file in memory through several copies (14.7 s against
    # save_file's 2.4 s for 2.4 GB here)
    save_file(cpu_tensors(state), str(partial))
    os.replace(partial, directory / "model.safetensors")


def cpu_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` on the CPU, contiguous; tied tensors as copies (safetensors refuses shared storage; only those are
    copied)."""
    tensors, seen = {}, set()
    for name, tensor in state.items():
        tensor = tensor.detach().to("cpu").contiguous()
        if tensor.untyped_storage().data_ptr() in seen:
            tensor = tensor.clone()
        seen.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    return tensors


def wait_healthy(url: str, timeout_s: float, server: Server | None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server is not None and server.process.poll() is not None:
            raise VllmError(server.describe("the vllm engine's server did not come up"))
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url.rstrip("/") + "/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.5)
    what = f"the vllm engine's server at {url} did not answer /health within gen.vllm.start_timeout_s {timeout_s:g} s"
    raise VllmError(server.describe(what) if server is not None else what)


def _term_with_parent() -> None:
    """A preexec_fn: the server gets SIGTERM when the trainer dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


class Server:
    """A vLLM server process of the run's, in its own process group (its engine core is a child of it)."""

    def __init__(self, process: subprocess.Popen, python: str, source: str, port: int, log: Path) -> None:
        self.process, self.python, self.source, self.port, self.log = process, python, source, port, log
        self.took = 0.0
        self.copier = threading.Thread(target=self._copy, name="vllm-server-output", daemon=True)
        self.copier.start()

    def _copy(self) -> None:
        """Each line of the server's output into its log file and, marked, into the trainer's output, which the
        worker forwards as the run's log."""
        assert self.process.stdout is not None
        with open(self.log, "ab") as out:
            for raw in self.process.stdout:
                out.write(raw)
                out.flush()
                sys.stdout.write("vllm server: " + raw.decode("utf-8", errors="replace"))
                sys.stdout.flush()

    @classmethod
    def launch(cls, spec: VllmSpec, policy: nn.Module, backend: Backend, weights_dir: Path, log: Path) -> Server:
        python = spec.python or os.environ.get(PYTHON_SETTING)
        if not python:
            raise VllmError(
                f"gen.engine vllm needs vLLM's interpreter: set gen.vllm.python, or {PYTHON_SETTING} on the node "
                "(scripts/vllm-env.sh builds vLLM's environment and prints it), or gen.vllm.url for a server that is up"
            )
        source = "gen.vllm.python" if spec.python else PYTHON_SETTING
        if not Path(python).is_file() or not os.access(python, os.X_OK):
            raise VllmError(f"{source} {python} is not an executable interpreter (scripts/vllm-env.sh prints one)")
        port = free_port()
        dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(
            next(policy.parameters()).dtype, "auto"
        )
        command = [python, "-m", MODULE, "--model", str(weights_dir), "--served-model-name", "policy"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--skip-tokenizer-init", "--tokens-only", "--dtype", dtype]
        command.append("--disable-uvicorn-access-log")  # a line per request would bury what a failure's reason quotes
        if backend.device.type == "cpu":
            command.append("--enforce-eager")  # nothing to capture on a CPU; compiling its graphs takes minutes
        command += spec.args
        # Its own environment: none of the trainer's packages, paths or secrets.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RLPLANE_", "PYTHON", "VIRTUAL_ENV"))}
        env |= {"VLLM_SERVER_DEV_MODE": "1"}  # /collective_rpc, which reloads the weights
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB on a CPU (vLLM's default, 4, is too much for small nodes)
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=weights_dir.parent,
            env=env,
            start_new_session=True,
            preexec_fn=_term_with_parent,
        )
        server = cls(process, python, source, port, log)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", spec.start_timeout_s, server)
        except BaseException:
            server.stop()
            raise
        server.took = time.monotonic() - started
        return server

    def describe(self, what: str) -> str:
        """`what`, and the server's last lines."""
        if self.process.poll() is not None:
            self.copier.join(timeout=5)  # what it wrote before it ended
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_LINES:]
        except OSError:
            lines = []
        status = self.process.poll()
        alive = "still running" if status is None else f"exited with status {status}"
        tail = "\n".join(lines) if lines else "(nothing)"
        return f"{what} ({self.source} {self.python}: {alive}); its last lines, in {self.log}:\n{tail}"

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the server's group, SIGKILL to what is left after `grace_s`."""
        if self.process.poll() is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # its engine core, should it have outlived it
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
            os.killpg(self.process.pid, signal.SIGCONT)  # a stopped server takes its SIGTERM only once it runs
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
