"""The run spec's cross-field rules: each is rejected at the right field with a message that says the fix."""

from __future__ import annotations

import pytest

from rlplane.spec import (
    RULES,
    apply_overrides,
    parse_spec,
)
from rlplane.spec import rules as spec_rules
from tests.spec_cases import error_at, errors_of, ppo_spec, sft_spec

# --- cross-field rules ---
# Each case: a valid base spec, `--set` overrides that break one rule, where the error must be,
# and words its message must contain.

MEGATRON = "backend={kind: megatron}"
DEEPSPEED = "backend={kind: deepspeed}"
PREFS = "data.source=builtin:tiny-preference"  # the rows dpo and reward read

# grpo with the calculator environment in place of a reward
ENVIRONMENT = ["algorithm=grpo", "reward=null", "grpo.environment={kind: builtin, name: calculator}"]
COMMAND = {"name": "script", "algorithm": "command", "train": {"steps": 5}, "command": {"argv": ["python", "t.py"]}}

RULE_CASES = {
    "command-needs-argv": ("command", ["command.argv=[]"], "command.argv", "give the command to run, e.g. argv: [python"),
    "command-placeholder-names-a-value": (
        "command",
        ['command.argv=[python, t.py, "--lr={train.lx}"]'],
        "command.argv.2",
        "{train.lx} names nothing in the spec; use a dotted path into it (sections: backend, command, resources, train)",
    ),
    "command-lone-brace": ("command", ['command.argv=[python, "{"]'], "command.argv.1", "write {{ for a literal brace"),
    "command-env-is-not-ours": (
        "command",
        ["command.env={RLPLANE_TOKEN: x}"],
        "command.env.RLPLANE_TOKEN",
        "RLPLANE_* variables are set by the worker",
    ),
    "command-on-torch": ("command", [DEEPSPEED], "backend.kind", "a command run brings its own training code"),
    "recipe-needs-model": ("command", ["algorithm=sft", "command=null"], "model", "algorithm sft needs a model section"),
    "recipe-needs-data": ("command", ["algorithm=sft", "command=null"], "data", "algorithm sft needs a data section"),
    "other-algorithm-section": ("sft", ["ppo.epochs=2"], "ppo", "only applies to algorithm ppo"),
    "ppo-needs-reward": ("ppo", ["reward=null"], "reward", "algorithm ppo needs a reward: add reward:"),
    "grpo-needs-reward": ("ppo", ["reward=null", "algorithm=grpo"], "reward", "grpo needs a reward"),
    "eval-needs-reward": ("ppo", ["reward=null", "algorithm=eval", "train.steps=1"], "reward", "eval needs a reward"),
    "eval-one-step": ("ppo", ["algorithm=eval"], "train.steps", "an eval run trains nothing and is one step"),
    "eval-on-torch": ("ppo", ["algorithm=eval", "train.steps=1", DEEPSPEED], "backend.kind", "eval runs on backend kind torch"),
    "eval-greedy-one-answer": (
        "ppo",
        ["algorithm=eval", "train.steps=1", "eval.greedy=true", "eval.samples=4"],
        "eval.greedy",
        "set eval.samples: 1 or greedy: false",
    ),
    "eval-pass-at-k": (
        "ppo",
        ["algorithm=eval", "train.steps=1", "eval.samples=2", "eval.k=[1, 4]"],
        "eval.k.1",
        "pass@4 needs at least 4",
    ),
    "grpo-eval-pass-at-k": (
        "ppo",
        ["algorithm=grpo", "grpo.eval.samples=2", "grpo.eval.k=[8]"],
        "grpo.eval.k.0",
        "raise grpo.eval.samples to 8",
    ),
    "dr-grpo-without-std": (
        "ppo",
        ["algorithm=grpo", "grpo.loss=dr_grpo"],
        "grpo.normalize_std",
        "set grpo.normalize_std: false",
    ),
    "overlong-buffer-fits": (
        "ppo",
        ["algorithm=grpo", "grpo.overlong_buffer=64", "grpo.gen.max_new_tokens=16"],
        "grpo.overlong_buffer",
        "use at most 16",
    ),
    "kl-in-reward-needs-beta": (
        "ppo",
        ["algorithm=grpo", "grpo.kl_in=reward", "grpo.beta=0"],
        "grpo.kl_in",
        "needs grpo.beta > 0",
    ),
    "environment-fits-context": (
        "ppo",
        [*ENVIRONMENT, "model.max_seq_len=64", "grpo.environment.max_tokens=64"],
        "grpo.environment.max_tokens",
        "max_tokens 64 leaves no room for the prompt in a 64-token sequence",
    ),
    "environment-turn-fits-episode": (
        "ppo",
        [*ENVIRONMENT, "grpo.environment.max_tokens=16", "grpo.gen.max_new_tokens=20"],
        "grpo.gen.max_new_tokens",
        "one policy turn (20 tokens) is longer than a whole episode",
    ),
    "environment-without-overlong-buffer": (
        "ppo",
        [*ENVIRONMENT, "grpo.overlong_buffer=2"],
        "grpo.overlong_buffer",
        "an episode has several; remove it",
    ),
    "sandbox-for-python-only": (
        "ppo",
        [*ENVIRONMENT, "grpo.environment.sandbox={cpu_s: 1}"],
        "grpo.environment.sandbox",
        "sandbox limits apply to the python environment's code, not to calculator",
    ),
    "builtin-rows-for-the-algorithm": (
        "sft",
        ["algorithm=dpo"],
        "data.source",
        "builtin:tiny-sft has sft rows but algorithm dpo reads preference rows; use one of builtin:arithmetic, "
        "builtin:tiny-preference, builtin:randomwalks",
    ),
    "packing-not-for-ilql": (
        "sft",
        ["algorithm=ilql", "data.source=builtin:randomwalks", "train.padding_free=true"],
        "train.padding_free",
        "ilql does not take train.padding_free (it is for sft, reward, dpo, spin, ppo, grpo)",
    ),
    "packing-not-on-megatron": (
        "sft",
        [MEGATRON, "backend.precision=fp32", "train.micro_batch_tokens=256"],
        "train.micro_batch_tokens",
        "need Transformer Engine's attention; remove train.micro_batch_tokens or use torch, deepspeed or fsdp2",
    ),
    "megatron-engine-needs-megatron": (
        "ppo",
        ["ppo.gen.engine=megatron"],
        "ppo.gen.engine",
        "the megatron engine decodes from megatron's shards: set backend.kind: megatron, or gen.engine: hf (or auto)",
    ),
    "hf-engine-not-on-megatron": (
        "ppo",
        ["algorithm=grpo", "reward={kind: builtin, name: randomwalks}", MEGATRON, "backend.precision=fp32", "grpo.gen.engine=hf"],
        "grpo.gen.engine",
        "transformers' generate() cannot run: set gen.engine: megatron (or auto)",
    ),
    "static-cache-is-for-hf": (
        "ppo",
        [MEGATRON, "backend.precision=fp32", "ppo.gen.static_cache=true"],
        "ppo.gen.static_cache",
        "static_cache is for the hf engine",
    ),
    "continuous-engine-not-on-fsdp2": (
        "ppo",
        ["backend={kind: fsdp2, processes: 2}", "ppo.gen.engine=continuous"],
        "ppo.gen.engine",
        "the continuous engine decodes from a whole policy on each rank, and fsdp2 shards it",
    ),
    "static-cache-not-with-continuous": (
        "ppo",
        ["ppo.gen.engine=continuous", "ppo.gen.static_cache=true"],
        "ppo.gen.static_cache",
        "static_cache is for the hf engine; the continuous engine keeps its own cache",
    ),
    "vllm-section-needs-the-vllm-engine": (
        "ppo",
        ["ppo.gen.vllm={python: /opt/vllm/bin/python}"],
        "ppo.gen.vllm",
        "gen.vllm sets up the vllm engine; set gen.engine: vllm or drop it",
    ),
    "async-sync-every-within-the-bound": (
        "ppo",
        ["algorithm=grpo", "grpo.max_staleness=1", "grpo.sync_every=3"],
        "grpo.sync_every",
        "more than max_staleness 1 allows: set sync_every to at most 2",
    ),
    "async-sync-every-needs-a-bound": (
        "ppo",
        ["algorithm=grpo", "grpo.sync_every=2"],
        "grpo.sync_every",
        "set sync_every to at most 1",
    ),
    "async-one-trainer-rank": (
        "ppo",
        ["algorithm=grpo", "grpo.max_staleness=1", "backend={kind: torch, processes: 2}"],
        "grpo.max_staleness",
        "asynchronous GRPO runs with one trainer rank for now, and this run has 2",
    ),
    "async-not-on-megatron": (
        "ppo",
        ["algorithm=grpo", MEGATRON, "backend.precision=fp32", "grpo.max_staleness=1"],
        "grpo.max_staleness",
        "set max_staleness 0 on the megatron backend",
    ),
    "async-on-the-torch-backend": (
        "ppo",
        ["algorithm=grpo", "grpo.max_staleness=1", DEEPSPEED],
        "grpo.max_staleness",
        "asynchronous GRPO has run on the torch backend only, not yet on deepspeed",
    ),
    "generator-process-runs-hf-or-continuous": (
        "ppo",
        ["algorithm=grpo", "grpo.generator=process", "grpo.gen.engine=vllm"],
        "grpo.generator",
        "the vllm engine is a server process of its own already: leave grpo.generator colocated",
    ),
    "generator-node-runs-hf-or-continuous": (
        "ppo",
        ["algorithm=grpo", "grpo.generator=node", "resources.nodes=2", "grpo.gen.engine=vllm"],
        "grpo.generator",
        "a generator node runs the hf or continuous engine; the vllm engine",
    ),
    "generator-node-is-a-node-of-the-gang": (
        "ppo",
        ["algorithm=grpo", "grpo.generator=node", "grpo.max_staleness=1"],
        "grpo.generator",
        "a generator node is a node of the gang, and resources.nodes is 1: set resources.nodes to 2",
    ),
    "generator-node-beside-one-trainer-rank": (
        "ppo",
        ["algorithm=grpo", "grpo.generator=node", "resources.nodes=3", "grpo.max_staleness=1"],
        "grpo.max_staleness",
        "asynchronous GRPO runs with one trainer rank for now, and this run has 2",
    ),
    "async-no-environment-yet": (
        "ppo",
        [*ENVIRONMENT, "grpo.max_staleness=2"],
        "grpo.max_staleness",
        "does not play environment episodes yet (grpo.environment)",
    ),
    "token-budget-or-micro-batch-size": (
        "sft",
        ["train.micro_batch_tokens=256", "train.micro_batch_size=2"],
        "train.micro_batch_size",
        "set train.micro_batch_size or train.micro_batch_tokens, not both",
    ),
    "sft-no-reward": ("sft", ["reward={kind: builtin, name: x}"], "reward", "remove the reward section"),
    "ilql-no-reward": ("sft", ["algorithm=ilql", "reward={kind: builtin, name: x}"], "reward", "rewards in its dataset"),
    "megatron-cpu-fp32": ("sft", [MEGATRON], "backend.precision", "megatron on CPU trains in fp32, not bf16"),
    "megatron-cpu-cp": (
        "sft",
        [MEGATRON, "backend.precision=fp32", "backend.processes=2", "backend.context_parallel=2"],
        "backend.context_parallel",
        "context_parallel needs GPUs (megatron-core's context parallelism runs in Transformer Engine's attention)",
    ),
    "megatron-pp-vs-builtin-layers": (
        "sft",
        ["resources.gpus=4", MEGATRON, "backend.pipeline_parallel=4"],
        "backend.pipeline_parallel",
        "pipeline_parallel 4 does not divide builtin:tiny-gpt2's 2 layers: use one of 1, 2",
    ),
    "megatron-vp-needs-pp": (
        "sft",
        ["resources.gpus=2", MEGATRON, "backend.pipeline_parallel=2", "backend.virtual_pipeline_parallel=2"],
        "backend.virtual_pipeline_parallel",
        "virtual_pipeline_parallel needs pipeline_parallel >= 3, not 2",
    ),
    "megatron-vp-micro-batches": (
        "sft",
        ["resources.gpus=3", MEGATRON, "backend.pipeline_parallel=3", "backend.virtual_pipeline_parallel=2"],
        "train.micro_batch_size",
        "virtual_pipeline_parallel needs a multiple of pipeline_parallel (3) micro-batches per optimizer step on each "
        "data-parallel replica (megatron's interleaved schedule runs them in groups of that many); this spec gives 1",
    ),
    "megatron-vp-vs-builtin-layers": (
        "sft",
        ["resources.gpus=3", MEGATRON, "backend.pipeline_parallel=3", "backend.virtual_pipeline_parallel=2"],
        "backend.virtual_pipeline_parallel",
        "pipeline_parallel 3 x virtual_pipeline_parallel 2 = 6 chunks do not divide builtin:tiny-gpt2's 2 layers: "
        "use virtual_pipeline_parallel 1 with a pipeline_parallel that divides them",
    ),
    "megatron-cpu-layout": (
        "sft",
        [MEGATRON, "backend.precision=fp32", "backend.processes=3", "backend.tensor_parallel=2"],
        "backend.tensor_parallel",
        "= 2 must divide the 3 CPU processes (backend.processes * resources.nodes)",
    ),
    "megatron-ppo-critic": (
        "ppo",
        ["resources.gpus=1", MEGATRON, "ppo.critic={path: 'builtin:tiny-gpt2'}"],
        "ppo.critic",
        "megatron: ppo.critic (a separate critic model) not yet supported; remove it",
    ),
    "megatron-ilql": (
        "sft",
        ["resources.gpus=1", MEGATRON, "algorithm=ilql"],
        "backend.kind",
        "megatron: ilql not yet supported (it trains sft, reward, dpo, spin, ppo, grpo; ilql's value-guided decoding",
    ),
    "megatron-layout": (
        "sft",
        ["resources.gpus=4", MEGATRON, "backend.tensor_parallel=3"],
        "backend.tensor_parallel",
        "must divide",
    ),
    "megatron-tp-vs-builtin-heads": (
        "sft",
        ["resources.gpus=8", MEGATRON, "backend.tensor_parallel=8"],
        "backend.tensor_parallel",
        "tensor_parallel 8 does not divide builtin:tiny-gpt2's attention heads (4), key/value heads (4): use one of 1, 2, 4",
    ),
    "megatron-layout-pp-cp": (
        "sft",
        ["resources.gpus=8", MEGATRON, "backend.tensor_parallel=2", "backend.pipeline_parallel=2", "backend.context_parallel=4"],
        "backend.tensor_parallel",
        "= 16 must divide the 8 GPUs",
    ),
    "megatron-sp": (
        "sft",
        ["resources.gpus=2", MEGATRON, "backend.sequence_parallel=true"],
        "backend.sequence_parallel",
        "tensor_parallel > 1",
    ),
    "torch-no-ddp": ("sft", ["resources.gpus=2", "backend.ddp=false"], "backend.ddp", "set ddp: true"),
    "fp16-on-cpu": ("sft", ["backend.precision=fp16"], "backend.precision", "fp16 needs a GPU"),
    "compile-on-deepspeed": (
        "sft",
        [DEEPSPEED, "model.compile=true"],
        "model.compile",
        "model.compile is for the torch and fsdp2 backends, not deepspeed",
    ),
    "kernels-on-megatron": (
        "sft",
        ["resources.gpus=1", MEGATRON, "model.kernels=liger"],
        "model.kernels",
        "model.kernels is for the torch and fsdp2 backends, not megatron",
    ),
    "liger-on-cpu": ("sft", ["model.kernels=liger"], "model.kernels", "set resources.gpus >= 1 or model.kernels: none"),
    "ds-zero-init-stage": (
        "sft",
        [DEEPSPEED, "backend.zero_init=true"],
        "backend.zero_init",
        "set zero_stage: 3",
    ),
    "ds-nvme-path": (
        "sft",
        ["resources.gpus=1", DEEPSPEED, "backend.zero_stage=3", "backend.offload=nvme"],
        "backend.nvme_path",
        "needs nvme_path",
    ),
    "ds-nvme-stage": (
        "sft",
        ["resources.gpus=1", DEEPSPEED, "backend.offload=nvme", "backend.nvme_path=/nvme"],
        "backend.offload",
        "zero_stage: 3",
    ),
    "ds-offload-stage0": (
        "sft",
        ["resources.gpus=1", DEEPSPEED, "backend.zero_stage=0", "backend.offload=cpu"],
        "backend.offload",
        "zero_stage >= 1",
    ),
    "ds-config-stage": (
        "sft",
        [DEEPSPEED, "backend.ds_config.zero_optimization.stage=3"],
        "backend.ds_config.zero_optimization.stage",
        "conflicts with backend.zero_stage=2; set backend.zero_stage",
    ),
    "ds-config-offload": (
        "sft",
        [DEEPSPEED, "backend.ds_config.zero_optimization.offload_optimizer.device=cpu"],
        "backend.ds_config.zero_optimization.offload_optimizer.device",
        "backend.offload='none'",
    ),
    "ds-config-batch": (
        "sft",
        [DEEPSPEED, "backend.ds_config.train_batch_size=64"],
        "backend.ds_config.train_batch_size",
        "train.batch_size=8",
    ),
    "ds-config-micro": (
        "sft",
        [DEEPSPEED, "train.micro_batch_size=4", "backend.ds_config.train_micro_batch_size_per_gpu=2"],
        "backend.ds_config.train_micro_batch_size_per_gpu",
        "train.micro_batch_size=4",
    ),
    "ds-config-accumulation": (
        "sft",
        [DEEPSPEED, "backend.ds_config.gradient_accumulation_steps=4"],
        "backend.ds_config.gradient_accumulation_steps",
        "the 1 implied by train.batch_size and train.micro_batch_size",
    ),
    "ds-config-bf16": (
        "sft",
        [DEEPSPEED, "backend.precision=fp32", "backend.ds_config.bf16.enabled=true"],
        "backend.ds_config.bf16.enabled",
        "backend.precision='fp32'",
    ),
    "ds-config-fp16": (
        "sft",
        [DEEPSPEED, "backend.ds_config.fp16.enabled=true"],
        "backend.ds_config.fp16.enabled",
        "backend.precision='bf16'",
    ),
    "micro-divides-batch": ("sft", ["train.micro_batch_size=3"], "train.micro_batch_size", "micro_batch_size 3"),
    "micro-divides-rank-batch": ("sft", ["resources.gpus=4", "train.micro_batch_size=4"], "train.micro_batch_size", "2 per rank"),
    "dp-divides-batch": (
        "sft",
        ["resources.gpus=4", "resources.nodes=2", "train.batch_size=12"],
        "train.batch_size",
        "8 data-parallel ranks",
    ),
    "dp-divides-batch-cpu-nodes": (
        "sft",
        ["resources.nodes=2", "backend.processes=2", "train.batch_size=6"],
        "train.batch_size",
        "4 data-parallel ranks",
    ),
    "dp-megatron": (
        "sft",
        ["resources.gpus=8", MEGATRON, "backend.tensor_parallel=2", "train.batch_size=6"],
        "train.batch_size",
        "4 data-parallel ranks",
    ),
    "ppo-minibatch": ("ppo", ["ppo.minibatch_size=3"], "ppo.minibatch_size", "must divide train.batch_size 8"),
    "ppo-minibatch-dp": (
        "ppo",
        ["resources.gpus=4", "train.batch_size=16", "ppo.minibatch_size=2"],
        "ppo.minibatch_size",
        "4 data-parallel ranks",
    ),
    "grpo-groups": ("ppo", ["algorithm=grpo", "grpo.group_size=3"], "train.batch_size", "multiple of grpo.group_size 3"),
    "checkpoint-every": ("sft", ["train.checkpoint_every=11"], "train.checkpoint_every", "more than train.steps 10"),
    "eval-every": ("sft", ["train.eval_every=50"], "train.eval_every", "more than train.steps"),
    "dpo-smoothing": (
        "sft",
        ["algorithm=dpo", "dpo.loss=ipo", "dpo.label_smoothing=0.1"],
        "dpo.label_smoothing",
        "loss: sigmoid",
    ),
    "spin-iterations": ("sft", ["algorithm=spin", "spin.iterations=3"], "spin.iterations", "multiple of 3 (e.g. 9)"),
    "spin-engine": ("sft", ["algorithm=spin", "spin.gen.engine=vllm"], "spin.gen.engine", "gen.engine: auto, hf or continuous"),
    "attributes-twice": (
        "sft",
        ["sft.attributes={names: [correctness, correctness]}"],
        "sft.attributes.names",
        "correctness named more than once",
    ),
    "attribute-model-margin": (
        "sft",
        ["algorithm=reward", "reward_model.attributes=[correctness]", "reward_model.margin=1"],
        "reward_model.margin",
        "margin is for pairs",
    ),
    "attribute-model-padding-free": (
        "sft",
        ["algorithm=reward", "reward_model.attributes=[correctness]", "train.padding_free=true"],
        "train.padding_free",
        "runs padded",
    ),
    "generate-one-step": (
        "sft",
        ["algorithm=generate", "generate={kind: critique_revise, principles: [Be kind.]}"],
        "train.steps",
        "a generate run trains nothing and is one step",
    ),
    "generate-feedback-model-kind": (
        "sft",
        [
            "algorithm=generate",
            "train.steps=1",
            "generate={kind: critique_revise, principles: [Be kind.], feedback_model: {path: builtin:tiny-gpt2}}",
        ],
        "generate.feedback_model",
        "feedback_model is for kind ai_feedback",
    ),
    "ppo-adaptive-kl": ("ppo", ["ppo.kl_coef=0", "ppo.target_kl=6"], "ppo.kl_coef", "set kl_coef > 0"),
    "gen-fits-context": (
        "ppo",
        ["model.max_seq_len=64", "ppo.gen.max_new_tokens=64"],
        "ppo.gen.max_new_tokens",
        "model.max_seq_len",
    ),
}


def spec_with(base: str, sets: list[str]) -> dict:
    bases = {"sft": sft_spec, "ppo": ppo_spec, "command": lambda: dict(COMMAND)}
    return apply_overrides(bases[base](), sets)


def test_a_generate_run_needs_its_section_named() -> None:
    """generate has no defaults for what it writes: leaving its section out is refused at the section, naming the fields."""
    error = error_at(spec_with("sft", ["algorithm=generate", "train.steps=1"]), ["generate"])
    assert error["msg"] == "algorithm generate needs its generate section: give kind, principles"


class TestCrossFieldRules:
    @pytest.mark.parametrize("base, sets, where, words", RULE_CASES.values(), ids=RULE_CASES.keys())
    def test_rule(self, base, sets, where, words):
        error = error_at(spec_with(base, sets), [int(p) if p.isdigit() else p for p in where.split(".")])
        assert words in error["msg"], error["msg"]
        assert error["type"] == "spec_rule"

    def test_every_rule_has_a_case(self, monkeypatch):
        # Build each case's spec with the rules switched off, then see which rules it breaks.
        monkeypatch.setattr(spec_rules, "RULES", ())
        specs = [parse_spec(spec_with(base, sets)) for base, sets, _, _ in RULE_CASES.values()]
        fired = {rule for spec in specs for rule in RULES if list(rule(spec))}
        assert [rule.__name__ for rule in RULES if rule not in fired] == []

    @pytest.mark.parametrize(
        "sets",
        [
            ["backend.precision=bf16"],  # bf16 runs on CPU
            [MEGATRON, "backend.precision=fp32", "backend.processes=2", "backend.tensor_parallel=2"],  # TP on CPU
            [MEGATRON, "backend.precision=fp32", "backend.processes=2", "backend.pipeline_parallel=2"],  # PP on CPU
            [MEGATRON, "backend.precision=fp32", "backend.processes=2", "backend.pipeline_parallel=2", "algorithm=dpo", PREFS],
            [MEGATRON, "backend.precision=fp32", "algorithm=dpo", PREFS],
            [MEGATRON, "backend.precision=fp32", "algorithm=reward", PREFS],
            [
                "resources.gpus=8",
                MEGATRON,
                "backend.tensor_parallel=2",
                "backend.pipeline_parallel=2",
                "train.micro_batch_size=1",
            ],
            ["resources.gpus=1", DEEPSPEED, "backend.zero_stage=3", "backend.offload=nvme", "backend.nvme_path=/nvme"],
            [
                DEEPSPEED,
                "backend.ds_config={zero_optimization: {stage: 2}, train_batch_size: auto}",
                "backend.ds_config.bf16.enabled=true",
            ],  # agreeing or "auto" values are fine
            ["resources.gpus=8", "resources.nodes=2", "train.batch_size=64", "train.micro_batch_size=2"],
            ["train.checkpoint_every=10", "train.eval_every=10"],
        ],
    )
    def test_valid_combinations_pass(self, sets):
        parse_spec(spec_with("sft", sets))

    @pytest.mark.parametrize(
        "environment",
        [
            "{kind: builtin, name: python, max_turns: 2, sandbox: {cpu_s: 2, memory_mb: 256}}",
            "{kind: http, url: 'http://127.0.0.1:8080/env', stop: ['</call>'], max_tokens: 200}",
            "{kind: python, entrypoint: 'my_envs.wordle:make'}",
            "{kind: builtin, name: calculator}",
        ],
    )
    def test_environments_pass_in_place_of_a_reward(self, environment):
        spec = parse_spec(spec_with("ppo", ["algorithm=grpo", "reward=null", f"grpo.environment={environment}"]))
        assert spec.reward is None and spec.grpo.environment is not None
        # the stored spec states every default (the calculator's sandbox too) and parses again: a resume reads it
        assert parse_spec(spec.model_dump(mode="json")) == spec

    def test_an_eval_run_may_leave_train_out_and_is_one_step(self):
        spec = {k: v for k, v in ppo_spec().items() if k != "train"} | {"algorithm": "eval", "eval": {"samples": 8, "k": [1, 8]}}
        parsed = parse_spec(spec)
        assert parsed.train.steps == 1 and parsed.eval.k == [1, 8] and not parsed.eval.greedy
        # A training algorithm still needs its train section.
        assert error_at({k: v for k, v in sft_spec().items() if k != "train"}, ["train"])["type"] == "missing"
        # On an environment an eval run needs no reward; its max_tokens must leave the prompt room as grpo's must.
        environment = {"kind": "builtin", "name": "calculator"}
        played = parse_spec({**spec, "reward": None, "eval": {"greedy": True, "environment": environment}})
        assert played.reward is None and played.eval.environment.name == "calculator"
        model = {**spec["model"], "max_seq_len": 64}
        cramped = {**spec, "model": model, "reward": None, "eval": {"environment": {**environment, "max_tokens": 64}}}
        assert "leaves no room for the prompt" in error_at(cramped, ["eval", "environment", "max_tokens"])["msg"]

    def test_ppo_with_a_shared_trunk_passes_on_megatron(self):
        parse_spec(spec_with("ppo", [MEGATRON, "backend.precision=fp32", "backend.processes=2", "backend.tensor_parallel=2"]))
        parse_spec(spec_with("ppo", [MEGATRON, "backend.precision=fp32", "backend.processes=2", "backend.pipeline_parallel=2"]))

    def test_an_environment_runs_with_or_without_a_reward_to_add(self):
        with_reward = parse_spec(spec_with("ppo", ["algorithm=grpo", "grpo.environment={kind: builtin, name: calculator}"]))
        assert with_reward.reward is not None and with_reward.grpo.environment is not None
        assert parse_spec(spec_with("ppo", ENVIRONMENT)).reward is None

    def test_several_violations_are_reported_together(self):
        data = spec_with("sft", ["train.checkpoint_every=100", "train.eval_every=100", "backend.precision=fp16"])
        locs = {tuple(e["loc"]) for e in errors_of(data)}
        assert locs == {("train", "checkpoint_every"), ("train", "eval_every"), ("backend", "precision")}

    def test_message_with_braces_is_kept_verbatim(self):
        assert "{kind: builtin, name: ...}" in error_at(spec_with("ppo", ["reward=null"]), ["reward"])["msg"]

    def test_derived_batch_values(self):
        spec = parse_spec(spec_with("sft", ["resources.gpus=2", "train.batch_size=32", "train.micro_batch_size=4"]))
        assert (spec.data_parallel_size, spec.micro_batch_size, spec.gradient_accumulation_steps) == (2, 4, 4)


@pytest.mark.parametrize(
    "environment, loc, words",
    [
        ({"kind": "builtin", "name": "calc"}, ["grpo", "environment", "name"], "'calculator' or 'python'"),
        ({"kind": "http", "url": "ftp://x"}, ["grpo", "environment", "url"], "should match pattern"),
        ({"kind": "shell"}, ["grpo", "environment"], "builtin, http, openenv, python"),
        ({"kind": "openenv", "url": "tcp://x:1"}, ["grpo", "environment", "url"], "should match pattern"),
        ({"kind": "python", "entrypoint": "no colon"}, ["grpo", "environment", "entrypoint"], "should match pattern"),
        ({"kind": "builtin", "name": "calculator", "chat_role": "T!"}, ["grpo", "environment", "chat_role"], "match pattern"),
        ({"kind": "builtin", "name": "python", "sandbox": {"memory_mb": 1}}, ["grpo", "environment", "sandbox", "memory_mb"],
         "greater than or equal to 64"),
    ],
)  # fmt: skip
def test_environment_fields_are_checked_with_their_names(environment: dict, loc: list, words: str) -> None:
    """grpo.environment's own fields: a wrong one is named, with what it takes."""
    spec = {
        "name": "t",
        "algorithm": "grpo",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 64},
        "data": {"source": "builtin:calculator"},
        "train": {"steps": 1, "batch_size": 8},
        "grpo": {"group_size": 4, "gen": {"max_new_tokens": 16}, "environment": environment},
    }
    errors = errors_of(spec)
    matching = [e for e in errors if e["loc"] == loc]
    assert matching and words in matching[0]["msg"], errors


def test_a_negative_staleness_bound_is_refused_by_name() -> None:
    error = error_at(spec_with("ppo", ["algorithm=grpo", "grpo.max_staleness=-1"]), ["grpo", "max_staleness"])
    assert "greater than or equal to 0" in error["msg"]


def test_dr_grpos_constant_is_the_most_policy_tokens_one_response_or_episode_holds() -> None:
    """Dr. GRPO divides by a constant: one answer's gen.max_new_tokens, or an episode's turns x max_new_tokens capped
    by its max_tokens (policy and environment tokens together)."""
    from rlplane.spec.algorithms import GrpoOptions

    assert GrpoOptions(gen={"max_new_tokens": 16}).response_budget == 16
    calculator = {"kind": "builtin", "name": "calculator"}
    assert GrpoOptions(gen={"max_new_tokens": 16}, environment={**calculator, "max_turns": 3}).response_budget == 48
    capped = {**calculator, "max_turns": 4, "max_tokens": 40}
    assert GrpoOptions(gen={"max_new_tokens": 16}, environment=capped).response_budget == 40


def test_a_generator_node_is_the_gangs_last_node_and_holds_no_trainer_rank() -> None:
    """grpo.generator node: the gang's last node generates, the others train, and world_size counts only theirs."""
    spec = parse_spec(spec_with("ppo", ["algorithm=grpo", "grpo.generator=node", "grpo.max_staleness=1", "resources.nodes=2"]))
    assert [spec.node_role(rank) for rank in range(2)] == ["trainer", "generator"]
    assert (spec.trainer_nodes, spec.world_size) == (1, 1)
    plain = parse_spec(spec_with("ppo", ["algorithm=grpo", "resources.nodes=2"]))
    assert [plain.node_role(rank) for rank in range(2)] == ["trainer", "trainer"] and plain.world_size == 2
