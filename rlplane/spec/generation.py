"""How a run samples text: the generation settings of every recipe that generates (ppo, grpo, ilql, eval, spin), the
vllm engine's server, and what an RL run's held-out evaluation draws."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlplane.spec.base import StrictModel


class VllmSpec(StrictModel):
    """The vllm engine's server: started by the trainer for the run from vLLM's own interpreter, or one already up."""

    python: str | None = Field(
        None,
        description="The interpreter of vLLM's own environment (scripts/vllm-env.sh builds one and prints its path); "
        "null: the node's RLPLANE_VLLM_PYTHON. vLLM pins its own torch and transformers, so it never shares the "
        "trainer's environment. The server runs as long as the run and is stopped with it.",
    )
    url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(:\d+)?/?$",
        description="An existing vLLM server (http://host:port) instead of one started for the run: vLLM 0.32 or later, "
        "started with VLLM_SERVER_DEV_MODE=1 and --tokens-only (or --enable-scale-out) on the run's model, on a host "
        "that reads the run's directory (each step's weights are reloaded from files there).",
    )
    start_timeout_s: float = Field(
        600, gt=0, description="How long the started server may take to answer /health before the run fails."
    )
    request_timeout_s: float = Field(
        1800,
        gt=0,
        description="How long one generation request may wait for its answer before the run fails (a server that is "
        "alive but no longer answers must not hold the run forever).",
    )
    args: list[str] = Field(
        default_factory=list,
        description="More arguments for the started server (vLLM's `serve` options), e.g. [--max-num-seqs, '64'].",
    )

    @model_validator(mode="after")
    def _one_source(self) -> VllmSpec:
        if self.url is not None and (self.python is not None or self.args):
            raise ValueError("set url (a server that is already up) or python and args (one started for the run), not both")
        return self


class GenSpec(StrictModel):
    """Sampling settings for generated responses."""

    max_new_tokens: int = Field(32, ge=1, description="Longest response in tokens.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (> 0: on-policy RL needs sampling).")
    top_k: int = Field(0, ge=0, description="Sample from the k most likely tokens; 0: no top-k filter.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass; 1.0: no top-p filter.")
    stop: list[str] = Field(default_factory=list, description="Strings that end a response (besides the EOS token).")
    engine: Literal["auto", "hf", "megatron", "continuous", "vllm"] = Field(
        "auto",
        description="What samples the responses: hf, transformers' generate() on the policy; megatron, megatron-core "
        "KV-cache decoding from the policy's shards; continuous, transformers' continuous batching on the policy (a "
        "paged KV cache: rows that end free their room for the next prompt instead of idling as padding); vllm, a vLLM "
        "server for the run in its own interpreter (gen.vllm), its weights reloaded from files after each step; auto: "
        "megatron on the megatron backend, else hf. Each returns its log-probabilities of the sampled tokens, and RL "
        "runs report how far they are from the trainer's (rollout/*).",
    )
    kv_cache_share: float = Field(
        0.3,
        gt=0,
        le=0.95,
        description="continuous engine on a GPU: the share of free accelerator memory its paged KV cache may take "
        "while generating (the training step has it back after); on a CPU the cache is sized to each call's prompts "
        "and answers.",
    )
    vllm: VllmSpec | None = Field(None, description="vllm engine: where its server comes from (null: the defaults below).")
    static_cache: bool = Field(
        False,
        description="hf engine: decode with a static KV cache, which transformers compiles (torch.compile with CUDA "
        "graphs) on a GPU; on CPU, the static cache alone. Not with another engine.",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Responses generated per call, the prompts grouped by length (the longest together) so each call "
        "pads its prompts little and holds at most this many KV caches; null: all of a rank's prompts in one call. "
        "Greedy answers are the same either way; sampled ones are drawn in another order.",
    )

    def engine_on(self, backend_kind: str) -> str:
        """The engine that samples on `backend_kind`: `engine`, or for auto the backend's own (megatron's, else hf)."""
        if self.engine != "auto":
            return self.engine
        return "megatron" if backend_kind == "megatron" else "hf"


class HeldOutEval(StrictModel):
    """How an RL run evaluates on its held-out prompts every train.eval_every steps (the eval algorithm's measures)."""

    samples: int = Field(1, ge=1, le=256, description="Answers per prompt: 1, one greedy answer; more, sampled with gen.")
    k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1], min_length=1, max_length=16, description="eval/pass@k for each k (each <= samples)."
    )
    correct_at: float | None = Field(
        None,
        description="An answer is correct when its reward is at least this: eval/accuracy and eval/pass@k from the "
        "reward; null: no pass@k, and eval/accuracy is a builtin task's own check.",
    )
