"""Rollout engines on one device: generated tokens/s of plain Hugging Face generate, our hf engine (dynamic and
static KV cache), our megatron engine, our continuous engine (transformers' continuous batching) and our vllm engine
(a vLLM server in its own interpreter), on the same model, prompts and settings.

A benchmark, not a test. The GPU fast paths (gen.static_cache: transformers compiles the static-cache decode with
torch.compile and CUDA graphs on a GPU) only mean something on a GPU: run it there (scripts/gpu-check.sh runs
bench/gpu.py; this one as `python bench/engines.py --json OUT/engines.json` on the lent machine). On CPU it runs
too, with small sizes, to show the bench works and the engines agree.

The model is a Llama of --hidden x --layers with random weights (seed 0) and the builtin tokenizer's vocabulary, in
--dtype. --batch prompts of builtin:arithmetic, --new-tokens tokens at most at temperature 1, each run seeded alike
(the engines draw the same tokens, so they decode the same number of positions; tokens/s counts positions, a
finished row's padding included, as that is what the decoding computes). "by length" is the static-cache engine
with gen.micro_batch_size (--micro-batch): calls of like-length prompts, which draw other tokens, so its rows end
elsewhere; "real tokens/s" (each row's tokens through its first eos) is what compares it with the others. Each
engine runs --warmup times untimed (compilation happens there), then --repeat timed runs in rounds of one run of
each engine; the median is shown. The megatron engine runs the same weights converted to megatron-core shards (TP
1, in this process). "max |Δ logprob|" is the largest difference between an engine's log-probabilities of its
tokens and the Hugging Face model's forward on them (fp32 scores). "graphs compiled" counts the graphs torch.compile
made during the warmup and during the timed runs: a timed call of a shape the warmup did not see (another prompt
width or batch, as "by length" makes) that recompiles shows there. --compile-on-cpu has transformers compile the
static-cache decode on a CPU too.

--group G repeats each prompt G times (a GRPO group). --mean-length L makes answers end at widely spread lengths:
the weights make eos the next token with probability 1/L at every step (geometric lengths of mean L, the same weights
for every engine), where a padded batch decodes every row until the longest ends and a continuous one does not.
The vllm engine needs vLLM's interpreter (--vllm-python, default RLPLANE_VLLM_PYTHON; scripts/vllm-env.sh builds it)
and heads of width 32 or more on a CPU (this model's are 64 wide); its server runs in its own process with its own
threads beside this one, and its start is not timed.

    .venv/bin/python bench/engines.py --device cpu --hidden 64 --layers 2 --batch 8 --new-tokens 32
    .venv/bin/python bench/engines.py --device cpu --hidden 256 --layers 4 --batch 4 --group 8 --new-tokens 128 \
        --mean-length 24 --only "hf generate,hf engine,continuous engine,vllm engine"
    python bench/engines.py --json engines.json   # on a GPU: bf16, 1024 x 8, 32 prompts x 128 tokens (a minute on an H200)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENGINES = (
    "hf generate",
    "hf engine",
    "hf engine + static cache",
    "hf engine + static cache + by length",
    "megatron engine",
    "continuous engine",
    "vllm engine",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--hidden", type=int, default=1024, help="hidden size (default 1024)")
    p.add_argument("--layers", type=int, default=8, help="layers (default 8)")
    p.add_argument("--batch", type=int, default=32, help="prompts generated at once (default 32)")
    p.add_argument("--new-tokens", type=int, default=128, help="tokens generated per prompt (default 128)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per engine (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per engine; the median is shown (default 3)")
    p.add_argument(
        "--prompt-lengths",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=None,
        metavar="MIN,MAX",
        help="prompts of digits with lengths log-uniform in MIN..MAX tokens (default: builtin:arithmetic's prompts)",
    )
    p.add_argument("--micro-batch", type=int, default=None, help="gen.micro_batch_size of the 'by length' row (default batch/4)")
    p.add_argument(
        "--compile-on-cpu",
        action="store_true",
        help="have transformers compile the static-cache decode on a CPU too (it does on a GPU), to count its compiles",
    )
    p.add_argument("--group", type=int, default=1, help="answers per prompt, as a GRPO group (default 1)")
    p.add_argument(
        "--mean-length",
        type=float,
        default=None,
        help="answers end with probability 1/L at each step (geometric lengths of mean L; default: as the weights fall)",
    )
    p.add_argument("--vllm-python", default=os.environ.get("RLPLANE_VLLM_PYTHON"), help="vLLM's interpreter")
    p.add_argument(
        "--only",
        default=",".join(e for e in ENGINES if e != "vllm engine"),
        help="comma-separated engines (default: all but the vllm engine)",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    return p.parse_args(argv)


def build(args: argparse.Namespace, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer_core.models.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        num_key_value_heads=max(1, args.hidden // 64),
        intermediate_size=4 * args.hidden,
        max_position_embeddings=1024,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    if args.mean_length is not None:
        spread_lengths(model, tokenizer.eos_token_id, args.mean_length, len(tokenizer))
    if args.compile_on_cpu:
        from transformers.generation.configuration_utils import CompileConfig

        model.generation_config.compile_config = CompileConfig()
        model.generation_config.compile_config._compile_all_devices = True  # transformers' own switch for this
    return model, tokenizer


def spread_lengths(model, eos: int, mean_length: float, vocab: int) -> None:
    """Weights under which eos is the next token with probability about 1/mean_length whatever came before: every
    token's embedding carries a large constant in hidden dimension 0, which then dominates each position's RMS norm,
    so the final norm's output there is nearly constant; only eos's row of the LM head reads that dimension, with a
    weight that puts its logit log((V - 1) / (L - 1)) above the others (which the large constant leaves near 0)."""
    import torch

    with torch.no_grad():
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        embed[:, 0] = 100.0 * embed.abs().max()
        head[:, 0] = 0.0
        probe = model.model(torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]], device=embed.device)).last_hidden_state[0, :, 0]
        head[eos, 0] = math.log((vocab - 1) / max(mean_length - 1, 1e-3)) / float(probe.float().mean())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from rlplane.spec.generation import GenSpec
    from rlplane.spec.sections import MegatronBackend as MegatronBackendSpec
    from rlplane.spec.sections import TorchBackend, TrainSpec
    from trainer_core.backends import make_backend
    from trainer_core.backends.dist import DistEnv
    from trainer_core.data import builtin_examples
    from trainer_core.losses.policy import response_logprobs
    from trainer_core.recipes.common import make_optimizer
    from trainer_core.rollout import engines, rollouts

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    args.dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if unknown := [n for n in names if n not in ENGINES]:
        print(f"unknown engine(s) {unknown}: choose from {', '.join(ENGINES)}", file=sys.stderr)
        return 2
    model, tokenizer = build(args, device)
    if "vllm engine" in names and not args.vllm_python:
        print("the vllm engine needs --vllm-python or RLPLANE_VLLM_PYTHON (scripts/vllm-env.sh prints it)", file=sys.stderr)
        return 2
    if args.prompt_lengths is None:
        rows = builtin_examples("arithmetic", "prompts", seed=0, eval_fraction=0.0).train[: args.batch]
        prompts = rollouts.encode_prompts(rows, tokenizer, 32)
    else:  # digit strings (a token each) of lengths drawn log-uniformly: a batch whose padding "by length" saves
        shortest, longest = args.prompt_lengths
        draw = random.Random(0)
        lengths = [round(math.exp(draw.uniform(math.log(shortest), math.log(longest)))) for _ in range(args.batch)]
        text = ["".join(draw.choice("0123456789") for _ in range(n - 1)) + "=" for n in lengths]
        prompts = rollouts.encode_prompts([{"prompt": t} for t in text], tokenizer, longest + 8)
    prompts = [p for p in prompts for _ in range(args.group)]
    gen = {"max_new_tokens": args.new_tokens, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    precision = {"bf16": "bf16", "fp32": "fp32"}[args.dtype]
    train = TrainSpec(steps=1, batch_size=len(prompts))
    torch_backend = make_backend(TorchBackend(kind="torch", precision=precision), train.model_copy(), DistEnv())
    megatron_backend = None
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = (ids != tokenizer.pad_token_id).long()

    def hf_generate():
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **gen,
            )
        return out, None

    def engine(static_cache: bool, backend, micro_batch_size: int | None = None, kind: str = "auto", opened=None):
        def run():
            spec = GenSpec(**gen, static_cache=static_cache, micro_batch_size=micro_batch_size, engine=kind)
            generation = rollouts.generate(model, prompts, tokenizer, spec, backend, engine=opened)
            return generation.input_ids, generation

        return run

    vllm_engine = None
    if "vllm engine" in names:
        from rlplane.spec.generation import VllmSpec
        from trainer_core.rollout.vllm import VllmEngine

        work = Path(tempfile.mkdtemp(prefix="bench-engines-"))
        started = time.perf_counter()
        vllm_engine = VllmEngine.start(VllmSpec(python=args.vllm_python), torch_backend, model, tokenizer, work, None)
        print(f"vllm engine: server up in {time.perf_counter() - started:.0f} s (not timed)", flush=True)

    if "megatron engine" in names:
        megatron_backend = make_backend(MegatronBackendSpec(kind="megatron", precision=precision), train, DistEnv())
        megatron_backend.prepare(model, make_optimizer(model, train))
    runs = {
        "hf generate": hf_generate,
        "hf engine": engine(False, torch_backend),
        "hf engine + static cache": engine(True, torch_backend),
        "hf engine + static cache + by length": engine(True, torch_backend, args.micro_batch or max(1, args.batch // 4)),
        "megatron engine": engine(False, megatron_backend),
        "continuous engine": engine(False, torch_backend, kind="continuous"),
        "vllm engine": engine(False, torch_backend, opened=vllm_engine),
    }

    # Graphs torch.compile made (transformers compiles the static-cache decode): a call of a new shape (prompt width,
    # batch) may recompile, which the warmup does not hide when the timed calls bring other shapes.
    compiled = {name: [0, 0] for name in names}  # [during the warmup, during the timed runs]

    def timed(name: str, phase: int) -> tuple[float, Any, Any]:
        torch.manual_seed(0)  # every engine, every run: the same draws, so the same tokens and lengths
        if device.type == "cuda":
            torch.cuda.synchronize()
        graphs = graphs_compiled()
        started = time.perf_counter()
        out, generation = runs[name]()
        if device.type == "cuda":
            torch.cuda.synchronize()
        took = time.perf_counter() - started
        compiled[name][phase] += graphs_compiled() - graphs
        return took, out, generation

    # Each run's seconds are printed as it ends, so a bench cut short by its caller still says what it measured.
    for name in names:
        for _ in range(args.warmup):
            print(f"{name}: warmup {timed(name, 0)[0]:.2f} s", flush=True)
    # Timed runs in rounds, one of each engine per round: whichever engine runs first in a process ran slower on
    # a CPU (its order, not the engine: swapping two engines swapped the gap), so no engine has all of the firsts.
    seconds: dict[str, list[float]] = {name: [] for name in names}
    last: dict[str, tuple[Any, Any]] = {}
    for round_ in range(args.repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            took, *last[name] = timed(name, 1)
            seconds[name].append(took)
            print(f"{name}: round {round_ + 1} {took:.2f} s", flush=True)
    results = {}
    for name in names:
        out, generation = last[name]
        generated = (out.shape[1] - width) * out.shape[0]  # decoded positions, a finished row's padding included
        # Real tokens (through each row's first eos): the measure that compares calls of other shapes (by length).
        if generation is not None:
            real = int(generation.response_mask.sum())
        else:
            real = int(engines.response_mask(out[:, width:], tokenizer.eos_token_id, tokenizer.pad_token_id).sum())
        median = statistics.median(seconds[name])
        row = {
            "tokens_per_s": generated / median,
            "real_tokens_per_s": real / median,
            "seconds": seconds[name],
            "tokens": generated,
            "graphs_compiled": {"warmup": compiled[name][0], "timed": compiled[name][1]},
        }
        if generation is not None:
            with torch.no_grad():
                logits = model(**generation.inputs()).logits.float()
            trainer = response_logprobs(logits, generation.input_ids, generation.prompt_width)
            row["max_logprob_diff"] = float(((trainer - generation.logprobs).abs() * generation.response_mask).max())
        results[name] = row
    versions = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"}
    lengths = f", answers' mean length {args.mean_length:g} by the weights" if args.mean_length else ""
    print(
        f"{versions}; Llama {args.hidden} x {args.layers} in {args.dtype}, {args.batch} prompts x {args.group} answers "
        f"x {args.new_tokens} tokens at most{lengths}"
    )
    print(
        "| engine | generated tokens/s | real tokens/s | vs hf generate (real) | max abs Δ logprob vs trainer "
        "| graphs compiled (warmup, timed) |"
    )
    print("|---|---|---|---|---|---|")
    base = results.get("hf generate", {}).get("real_tokens_per_s")
    for name, row in results.items():
        ratio = f"{row['real_tokens_per_s'] / base:.2f}x" if base else "-"
        diff = f"{row['max_logprob_diff']:.1e}" if "max_logprob_diff" in row else "-"
        graphs = f"{compiled[name][0]}, {compiled[name][1]}"
        print(f"| {name} | {row['tokens_per_s']:,.0f} | {row['real_tokens_per_s']:,.0f} | {ratio} | {diff} | {graphs} |")
    if args.json:
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "versions": versions, "results": results})
        )
    if vllm_engine is not None:
        vllm_engine.close()
    for backend in (torch_backend, megatron_backend):
        if backend is not None:
            backend.close()
    return 0


def graphs_compiled() -> int:
    """Graphs torch.compile has made in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


if __name__ == "__main__":
    raise SystemExit(main())
