"""The cross-field rules of one algorithm's options (the shared ones: rules.py, which lists them all in RULES).

Each rule yields (loc, msg) pairs where loc is the field to fix and msg says how; the first line of each docstring is
the rule as docs/spec.md lists it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlplane.spec.violation import Rules, Violation

if TYPE_CHECKING:
    from rlplane.spec import RunSpec


def dpo_label_smoothing_needs_sigmoid(spec: RunSpec) -> Rules:
    """dpo.label_smoothing > 0 only works with loss: sigmoid."""
    if spec.dpo is not None and spec.dpo.label_smoothing > 0 and spec.dpo.loss != "sigmoid":
        yield Violation(
            ("dpo", "label_smoothing"),
            f"label_smoothing only applies to loss: sigmoid (got loss: {spec.dpo.loss}); set it to 0 or use sigmoid",
        )


def ppo_adaptive_kl_needs_kl_coef(spec: RunSpec) -> Rules:
    """ppo.target_kl (adaptive KL) needs ppo.kl_coef > 0, since the controller scales the coefficient."""
    if spec.ppo is not None and spec.ppo.target_kl is not None and spec.ppo.kl_coef == 0:
        yield Violation(("ppo", "kl_coef"), "target_kl adapts kl_coef multiplicatively, so it cannot start at 0; set kl_coef > 0")


def attributes_fit(spec: RunSpec) -> Rules:
    """SteerLM's attributes: each name once; an attribute model (reward_model.attributes) takes no margin (it regresses
    each attribute, no pairs) and runs padded on torch, deepspeed or fsdp2 (not megatron, not train.padding_free)."""
    named = [(("reward_model", "attributes"), spec.reward_model.attributes if spec.reward_model else [])]
    named.append((("sft", "attributes", "names"), spec.sft.attributes.names if spec.sft and spec.sft.attributes else []))
    for loc, names in named:
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            yield Violation(loc, f"{', '.join(twice)} named more than once; name each attribute once")
    if spec.reward_model is None or not spec.reward_model.attributes:
        return
    if spec.reward_model.margin is not None:
        yield Violation(("reward_model", "margin"), "an attribute model regresses each attribute: margin is for pairs; remove it")
    if spec.backend.kind == "megatron":
        yield Violation(
            ("backend", "kind"),
            "megatron: an attribute model (reward_model.attributes) is not supported yet; use torch, deepspeed or fsdp2",
        )
    if spec.train.padding_free:
        yield Violation(
            ("train", "padding_free"), "an attribute model runs padded (padding_free is not offered for it yet); remove it"
        )


def generate_is_one_process(spec: RunSpec) -> Rules:
    """generate: train.steps is 1 (it writes a dataset, trains nothing), in one process on the torch backend."""
    if spec.generate is None:
        return
    if spec.train.steps != 1:
        yield Violation(
            ("train", "steps"), "a generate run trains nothing and is one step; set train.steps: 1 or leave train out"
        )
    if spec.backend.kind != "torch" or spec.world_size != 1:
        yield Violation(
            ("backend", "kind"),
            "generate runs in one process on backend kind torch (resources.nodes 1, one GPU or backend.processes 1); "
            "set backend: {kind: torch}",
        )
    if spec.generate.feedback_model is not None and spec.generate.kind != "ai_feedback":
        yield Violation(("generate", "feedback_model"), "feedback_model is for kind ai_feedback; remove it or set that kind")


def spin_fits(spec: RunSpec) -> Rules:
    """spin.iterations must divide train.steps (every self-play round trains as many steps); spin answers with the
    policy's own weights, so its gen.engine is one that runs on them (not vllm)."""
    if spec.spin is None:
        return
    steps, rounds = spec.train.steps, spec.spin.iterations
    if steps % rounds:
        yield Violation(
            ("spin", "iterations"),
            f"{rounds} iterations do not split train.steps {steps} evenly; set train.steps to a multiple of {rounds} "
            f"(e.g. {rounds * max(1, round(steps / rounds))}) or choose iterations that divide {steps}",
        )
    if spec.spin.gen.engine == "vllm":
        yield Violation(
            ("spin", "gen", "engine"),
            "spin answers with the policy's own weights once per iteration; the vllm engine is not offered for it yet: "
            "set gen.engine: auto, hf or continuous",
        )
