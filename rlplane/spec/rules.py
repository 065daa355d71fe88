"""Cross-field rules of a run spec (the backends' own: backend_rules.py; one algorithm's options: algorithm_rules.py).

Each rule is a small generator over one concern; it yields (loc, msg) pairs where loc is the
field to fix and msg says how. The first line of each docstring is the rule as docs/spec.md
lists it. `RunSpec` runs them all after its fields have validated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlplane.spec.algorithm_rules import (
    attributes_fit,
    dpo_label_smoothing_needs_sigmoid,
    generate_is_one_process,
    ppo_adaptive_kl_needs_kl_coef,
    spin_fits,
)
from rlplane.spec.algorithms import ALGORITHM_SECTIONS, PACKED_ALGORITHMS, REWARDED_ALGORITHMS
from rlplane.spec.backend_rules import (
    deepspeed_offload_needs_zero,
    ds_config_agrees_with_spec,
    fp16_needs_gpu,
    megatron_algorithms,
    megatron_layout_fits,
    megatron_on_cpu,
    megatron_pipeline_fits,
    megatron_sequence_parallel_needs_tp,
    megatron_tensor_parallel_fits_the_builtin_model,
    model_speed_switches_fit,
    torch_without_ddp_is_single_gpu,
    zero_init_needs_stage_3,
)
from rlplane.spec.builtin_names import builtin_names_exist
from rlplane.spec.command import PlaceholderError, fill
from rlplane.spec.environments import SandboxLimits
from rlplane.spec.shapes import BUILTIN_SHAPES, DEFAULT_MAX_SEQ_LEN_CAP, MAX_POSITIONS
from rlplane.spec.violation import Rules, Violation

if TYPE_CHECKING:
    from rlplane.spec import RunSpec


def section_matches_algorithm(spec: RunSpec) -> Rules:
    """An options section (sft, reward_model, dpo, ppo, grpo, ilql) is only allowed for its own algorithm."""
    for algorithm, section in ALGORITHM_SECTIONS.items():
        if algorithm != spec.algorithm and getattr(spec, section) is not None:
            yield Violation(
                (section,),
                f"the {section} section only applies to algorithm {algorithm} (this run's algorithm is "
                f"{spec.algorithm}); remove it or set algorithm: {algorithm}",
            )


def reward_matches_algorithm(spec: RunSpec) -> Rules:
    """ppo, grpo and eval need a reward section (with an environment it is optional: the environment rewards each
    episode, and a reward section adds its score of the episode); sft, reward, dpo and ilql must not have one."""
    rewarded = spec.algorithm in REWARDED_ALGORITHMS
    if _environment_of(spec) is not None:
        return
    if rewarded and spec.reward is None:
        yield Violation(
            ("reward",),
            f"algorithm {spec.algorithm} needs a reward: add reward: {{kind: builtin, name: ...}} "
            "or {kind: model, path: run:<id>}",
        )
    elif not rewarded and spec.reward is not None:
        why = (
            "ilql learns from the rewards in its dataset (data.columns.reward)"
            if spec.algorithm == "ilql"
            else f"algorithm {spec.algorithm} learns from its data and takes no reward"
        )
        yield Violation(("reward",), f"{why}; remove the reward section")


def model_and_data_given(spec: RunSpec) -> Rules:
    """Every algorithm but command needs a model and data section (a command run's script loads its own)."""
    if spec.algorithm == "command":
        return
    for section, example in (("model", "{path: builtin:tiny-gpt2}"), ("data", "{source: builtin:tiny-sft}")):
        if getattr(spec, section) is None:
            yield Violation((section,), f"algorithm {spec.algorithm} needs a {section} section, e.g. {section}: {example}")


def command_runs_a_command(spec: RunSpec) -> Rules:
    """command: argv names what to run (unless the SDK started the run itself), each {placeholder} names a value of
    the spec, and the backend is torch (backend.processes: how many processes torchrun starts on CPU)."""
    if spec.command is None:
        return
    if not spec.command.argv and not spec.command.external:
        yield Violation(("command", "argv"), 'give the command to run, e.g. argv: [python, train.py, --lr, "{train.lr}"]')
    for name in spec.command.env:
        if name.startswith("RLPLANE_"):
            yield Violation(("command", "env", name), "RLPLANE_* variables are set by the worker for the SDK; rename it")
    values = spec.model_dump(mode="json")
    for i, argument in enumerate(spec.command.argv):
        try:
            fill(argument, values, {})
        except PlaceholderError as exc:
            yield Violation(("command", "argv", i), str(exc))
    if spec.backend.kind != "torch":
        yield Violation(
            ("backend", "kind"),
            f"a command run brings its own training code, so rlplane's {spec.backend.kind} backend does not apply; set "
            "backend: {kind: torch, processes: N} (N processes under torchrun on CPU; resources.gpus on GPUs)",
        )


def grpo_variants_fit(spec: RunSpec) -> Rules:
    """grpo: Dr. GRPO's loss goes without std normalisation; the overlong buffer fits in gen.max_new_tokens; a KL in
    the reward needs beta > 0."""
    options = spec.grpo
    if options is None:
        return
    if options.loss == "dr_grpo" and options.normalize_std and options.baseline != "reinforce++":
        yield Violation(
            ("grpo", "normalize_std"),
            "Dr. GRPO drops the std normalisation as well as the length normalisation (a group's std rescales its "
            "questions by difficulty); set grpo.normalize_std: false, or loss: grpo",
        )
    if options.overlong_buffer is not None and options.overlong_buffer > options.gen.max_new_tokens:
        yield Violation(
            ("grpo", "overlong_buffer"),
            f"the buffer ({options.overlong_buffer} tokens) is longer than grpo.gen.max_new_tokens "
            f"({options.gen.max_new_tokens}); use at most {options.gen.max_new_tokens}",
        )
    if options.kl_in == "reward" and options.beta == 0:
        yield Violation(("grpo", "kl_in"), "a KL in the reward needs grpo.beta > 0 (beta 0 means no KL at all)")


def _environment_of(spec: RunSpec) -> tuple[str, Any] | None:
    """(the algorithm's section, its environment) of a run that plays episodes (grpo, ppo or eval .environment)."""
    for section in ("grpo", "ppo", "eval"):
        options = getattr(spec, section)
        if options is not None and options.environment is not None:
            return section, options.environment
    return None


def environment_fits(spec: RunSpec) -> Rules:
    """grpo, ppo and eval .environment: max_tokens leaves room for a prompt in model.max_seq_len and holds one
    turn of gen.max_new_tokens; no grpo.overlong_buffer (an episode's length is not one response's); sandbox limits
    are for the python environment."""
    if (played := _environment_of(spec)) is None:
        return
    section, environment = played
    options = getattr(spec, section)
    where = (section, "environment")
    length = spec.model.max_seq_len if spec.model is not None else None
    if length is not None and environment.max_tokens >= length:
        yield Violation(
            (*where, "max_tokens"),
            f"max_tokens {environment.max_tokens} leaves no room for the prompt in a {length}-token sequence; lower it "
            "or raise model.max_seq_len",
        )
    if options.gen.max_new_tokens > environment.max_tokens:
        yield Violation(
            (section, "gen", "max_new_tokens"),
            f"one policy turn ({options.gen.max_new_tokens} tokens) is longer than a whole episode "
            f"({section}.environment.max_tokens {environment.max_tokens}); lower it or raise max_tokens",
        )
    if section == "grpo" and options.overlong_buffer is not None:
        yield Violation(
            ("grpo", "overlong_buffer"),
            "the overlong buffer shapes a single response's length against gen.max_new_tokens, and an episode has "
            "several; remove it (grpo.environment.max_tokens cuts episodes off)",
        )
    # Compared with the defaults, not with what was set: a stored spec states every default, and must parse again.
    if environment.kind == "builtin" and environment.name != "python" and environment.sandbox != SandboxLimits():
        yield Violation(
            (*where, "sandbox"),
            f"sandbox limits apply to the python environment's code, not to {environment.name}; remove them",
        )


def eval_is_one_step(spec: RunSpec) -> Rules:
    """eval: train.steps is 1 (an evaluation trains nothing), and greedy decoding gives one answer per prompt."""
    if spec.eval is None:
        return
    if spec.train.steps != 1:
        yield Violation(("train", "steps"), "an eval run trains nothing and is one step; set train.steps: 1 or leave train out")
    if spec.backend.kind != "torch":
        yield Violation(
            ("backend", "kind"),
            f"eval runs on backend kind torch (each process answers its share of the prompts), not "
            f"{spec.backend.kind}; set backend: {{kind: torch}}",
        )
    if spec.eval.greedy and spec.eval.samples != 1:
        yield Violation(
            ("eval", "greedy"),
            f"greedy decoding gives the same answer every time, so {spec.eval.samples} samples would be copies; set "
            "eval.samples: 1 or greedy: false",
        )


def pass_at_k_fits_samples(spec: RunSpec) -> Rules:
    """eval.k (and ppo/grpo eval.k): pass@k needs at least k answers per prompt."""
    sections = [("eval",), ("ppo", "eval"), ("grpo", "eval")]
    for loc in sections:
        options = spec
        for part in loc:
            options = getattr(options, part, None)
        if options is None:
            continue
        for i, k in enumerate(options.k):
            if k > options.samples:
                where = ".".join(loc)
                yield Violation(
                    (*loc, "k", i), f"pass@{k} needs at least {k} answers per prompt; raise {where}.samples to {k} or lower k"
                )


def batch_splits_over_ranks(spec: RunSpec) -> Rules:
    """train.batch_size must be divisible by the data-parallel size: gpus * nodes (megatron: over tp * pp * cp)."""
    if spec.world_size % spec.model_parallel_size:
        return  # megatron_layout_fits reports it
    dp = spec.data_parallel_size
    if spec.train.batch_size % dp:
        yield Violation(
            ("train", "batch_size"),
            f"batch_size {spec.train.batch_size} does not split over {dp} data-parallel ranks; use a multiple of {dp}",
        )


def ppo_minibatch_divides_batch(spec: RunSpec) -> Rules:
    """ppo.minibatch_size must divide train.batch_size and be a multiple of the data-parallel size."""
    if spec.ppo is None or spec.ppo.minibatch_size is None:
        return
    minibatch, batch, dp = spec.ppo.minibatch_size, spec.train.batch_size, spec.data_parallel_size
    if batch % minibatch:
        yield Violation(("ppo", "minibatch_size"), f"minibatch_size {minibatch} must divide train.batch_size {batch}")
    elif minibatch % dp:
        yield Violation(
            ("ppo", "minibatch_size"),
            f"minibatch_size {minibatch} does not split over {dp} data-parallel ranks; use a multiple of {dp}",
        )


def micro_batch_divides_rank_batch(spec: RunSpec) -> Rules:
    """train.micro_batch_size must divide the per-rank batch: train.batch_size (ppo: minibatch_size) / ranks."""
    micro, update, dp = spec.train.micro_batch_size, spec.update_batch_size, spec.data_parallel_size
    if micro is None or update % dp or spec.world_size % spec.model_parallel_size:
        return  # the batch rules above report it
    per_rank = update // dp
    if per_rank % micro:
        where = "train.batch_size" if update == spec.train.batch_size else "ppo.minibatch_size"
        split = f" over {dp} data-parallel ranks is {per_rank} per rank, which" if dp > 1 else ""
        yield Violation(
            ("train", "micro_batch_size"),
            f"{where} {update}{split} is not a multiple of micro_batch_size {micro}; pick a divisor of {per_rank}",
        )


# PACKED_ALGORITHMS: the recipes whose training forwards take token-budget micro-batches and run padding-free
# (recipes/packing.py).


def packing_fits(spec: RunSpec) -> Rules:
    """train.micro_batch_tokens and train.padding_free: sft, reward, dpo, spin, ppo and grpo, not on megatron, and
    micro_batch_tokens instead of micro_batch_size."""
    train = spec.train
    for field, on in (("micro_batch_tokens", train.micro_batch_tokens is not None), ("padding_free", train.padding_free)):
        if not on:
            continue
        if spec.algorithm not in PACKED_ALGORITHMS:
            yield Violation(
                ("train", field),
                f"{spec.algorithm} does not take train.{field} (it is for {', '.join(PACKED_ALGORITHMS)}); remove it",
            )
        elif spec.backend.kind == "megatron":
            yield Violation(
                ("train", field),
                "megatron runs fixed-shape micro-batches through its pipeline schedule, and its packed sequences (the THD "
                f"layout) need Transformer Engine's attention; remove train.{field} or use torch, deepspeed or fsdp2",
            )
    if train.micro_batch_tokens is not None and train.micro_batch_size is not None:
        yield Violation(
            ("train", "micro_batch_size"),
            "set train.micro_batch_size or train.micro_batch_tokens, not both (a token budget decides how many examples "
            "each micro-batch holds)",
        )


def engine_fits_backend(spec: RunSpec) -> Rules:
    """<section>.gen.engine: megatron needs the megatron backend, which has no other (its policy is shards);
    continuous decodes from a whole policy on each rank (not FSDP2 or ZeRO-3); gen.static_cache is for the hf
    engine and gen.vllm for the vllm engine."""
    section = ALGORITHM_SECTIONS.get(spec.algorithm)
    gen = getattr(getattr(spec, section, None), "gen", None) if section else None
    if gen is None:
        return
    kind = spec.backend.kind
    megatron = kind == "megatron"
    engine = gen.engine_on(kind)
    if engine == "megatron" and not megatron:
        yield Violation(
            (section, "gen", "engine"),
            f"the megatron engine decodes from megatron's shards: set backend.kind: megatron, or gen.engine: hf (or auto) "
            f"on {kind}",
        )
    elif engine != "megatron" and megatron:
        yield Violation(
            (section, "gen", "engine"),
            "on the megatron backend the policy is megatron-core shards, which "
            + ("transformers' generate()" if engine == "hf" else f"the {engine} engine")
            + " cannot run: set gen.engine: megatron (or auto)",
        )
    elif engine == "continuous" and (kind == "fsdp2" or (kind == "deepspeed" and spec.backend.zero_stage == 3)):
        yield Violation(
            (section, "gen", "engine"),
            f"the continuous engine decodes from a whole policy on each rank, and {kind} shards it: use gen.engine hf "
            "(or auto), or a backend that keeps a whole copy (torch, deepspeed stage 1 or 2)",
        )
    if gen.static_cache and engine != "hf":
        yield Violation(
            (section, "gen", "static_cache"), f"static_cache is for the hf engine; the {engine} engine keeps its own cache"
        )
    if gen.vllm is not None and engine != "vllm":
        yield Violation((section, "gen", "vllm"), "gen.vllm sets up the vllm engine; set gen.engine: vllm or drop it")


def async_grpo_fits(spec: RunSpec) -> Rules:
    """grpo.max_staleness > 0 or grpo.generator process or node (a generator beside the trainer): sync_every within the
    bound; a generator node is a node of the gang; a process or node runs the hf or continuous engine; one trainer
    rank, on a backend whose policy a copy (or a vllm server) can sample; no environment yet (its episodes would be
    played from two threads at once)."""
    options = spec.grpo
    if options is None:
        return
    if options.sync_every > options.max_staleness + 1:
        yield Violation(
            ("grpo", "sync_every"),
            f"sync_every {options.sync_every} leaves the generator's weights up to {options.sync_every - 1} steps behind, "
            f"more than max_staleness {options.max_staleness} allows: set sync_every to at most {options.max_staleness + 1}",
        )
    engine = options.gen.engine_on(spec.backend.kind)
    if options.generator == "node" and spec.resources.nodes < 2:
        yield Violation(
            ("grpo", "generator"),
            f"a generator node is a node of the gang, and resources.nodes is {spec.resources.nodes}: set resources.nodes "
            "to 2 (one node trains, the last one generates), or generator process to generate beside the trainer",
        )
    if options.generator in ("process", "node") and engine not in ("hf", "continuous"):
        yield Violation(
            ("grpo", "generator"),
            f"a generator {options.generator} runs the hf or continuous engine; the {engine} engine "
            + ("is a server process of its own already" if engine == "vllm" else "decodes from the live policy's shards")
            + ": leave grpo.generator colocated",
        )
    if not options.overlapped:
        return
    field = ("grpo", "max_staleness") if options.max_staleness else ("grpo", "generator")
    if spec.world_size > 1:
        yield Violation(
            field,
            f"asynchronous GRPO runs with one trainer rank for now, and this run has {spec.world_size} "
            "(the trainer's nodes x resources.gpus, or backend.processes on CPU; a generator node is not counted): set "
            "max_staleness 0 and generator colocated, or one rank",
        )
    if spec.backend.kind == "megatron":
        yield Violation(
            field,
            "the megatron engine decodes from the live policy's shards, so it cannot sample while they train: set "
            "max_staleness 0 on the megatron backend",
        )
    elif spec.backend.kind != "torch":
        yield Violation(
            field,
            f"asynchronous GRPO has run on the torch backend only, not yet on {spec.backend.kind}: set backend.kind "
            "torch (one rank needs no sharding), or max_staleness 0",
        )
    if options.environment is not None:
        yield Violation(field, "asynchronous GRPO does not play environment episodes yet (grpo.environment): set max_staleness 0")


def grpo_batch_holds_whole_groups(spec: RunSpec) -> Rules:
    """grpo: train.batch_size must be a multiple of grpo.group_size (it counts responses, group_size per prompt)."""
    if spec.grpo is not None and spec.train.batch_size % spec.grpo.group_size:
        yield Violation(
            ("train", "batch_size"),
            f"batch_size {spec.train.batch_size} must be a multiple of grpo.group_size {spec.grpo.group_size} "
            "(it counts responses, group_size per prompt)",
        )


def intervals_within_steps(spec: RunSpec) -> Rules:
    """train.checkpoint_every and train.eval_every must not exceed train.steps."""
    for name in ("checkpoint_every", "eval_every"):
        every = getattr(spec.train, name)
        if every is not None and every > spec.train.steps:
            yield Violation(
                ("train", name),
                f"{name} {every} is more than train.steps {spec.train.steps}, so it would never happen; "
                f"use at most {spec.train.steps} or null (only at the end)",
            )


def generation_fits_context(spec: RunSpec) -> Rules:
    """ppo, grpo, ilql: gen.max_new_tokens must be less than model.max_seq_len (the prompt needs room); unset, that
    is the model's context length, known here for the builtin models (the trainer checks the others)."""
    section = ALGORITHM_SECTIONS[spec.algorithm]
    gen = getattr(getattr(spec, section), "gen", None)
    if gen is None or spec.model is None:
        return
    length, fix = spec.model.max_seq_len, "lower it or raise model.max_seq_len"
    if length is None and spec.model.path.removeprefix("builtin:") in BUILTIN_SHAPES:
        length, fix = min(MAX_POSITIONS, DEFAULT_MAX_SEQ_LEN_CAP), f"lower it ({spec.model.path} has {MAX_POSITIONS} positions)"
    if gen is not None and length is not None and gen.max_new_tokens >= length:
        yield Violation(
            (section, "gen", "max_new_tokens"),
            f"max_new_tokens {gen.max_new_tokens} leaves no room for the prompt in a {length}-token sequence; {fix}",
        )


RULES = (
    model_and_data_given,
    builtin_names_exist,
    command_runs_a_command,
    section_matches_algorithm,
    reward_matches_algorithm,
    eval_is_one_step,
    grpo_variants_fit,
    environment_fits,
    pass_at_k_fits_samples,
    megatron_layout_fits,
    megatron_on_cpu,
    megatron_tensor_parallel_fits_the_builtin_model,
    megatron_algorithms,
    megatron_pipeline_fits,
    megatron_sequence_parallel_needs_tp,
    torch_without_ddp_is_single_gpu,
    fp16_needs_gpu,
    model_speed_switches_fit,
    zero_init_needs_stage_3,
    deepspeed_offload_needs_zero,
    ds_config_agrees_with_spec,
    batch_splits_over_ranks,
    ppo_minibatch_divides_batch,
    micro_batch_divides_rank_batch,
    packing_fits,
    engine_fits_backend,
    async_grpo_fits,
    grpo_batch_holds_whole_groups,
    intervals_within_steps,
    dpo_label_smoothing_needs_sigmoid,
    ppo_adaptive_kl_needs_kl_coef,
    spin_fits,
    attributes_fit,
    generate_is_one_process,
    generation_fits_context,
)


def check_rules(spec: RunSpec) -> list[Violation]:
    found: list[Violation] = []
    for rule in RULES:
        found += rule(spec)
        if found and rule is model_and_data_given:  # the other rules read those sections
            return found
    return found
