"""Per-algorithm options: one optional section per algorithm, each with documented defaults.

A run carries only the section of its own algorithm; when it is left out the defaults below
are filled in, so a stored spec always says exactly what ran.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from rlplane.spec.attributes import AttributeConditioning, AttributeName, AttributeSteering
from rlplane.spec.base import StrictModel
from rlplane.spec.environments import EnvironmentSpec
from rlplane.spec.generation import GenSpec, HeldOutEval
from rlplane.spec.sections import ModelSpec

ASYNC_TIS_CAP = 2.0  # grpo.tis_cap when max_staleness > 0 and it is unset

# ppo.tis_cap and grpo.tis_cap: one knob, the same in both
TIS_CAP = Field(
    None,
    gt=0,
    description="Truncated importance sampling (Yao et al. 2025): each token's policy-gradient term weighed by "
    "min(π_trainer / π_engine, tis_cap) of the sampled token, correcting for the rollout engine's numbers differing "
    "from the trainer's (a GPU engine's kernels, precision); null: off.",
)


class SftOptions(StrictModel):
    """Supervised fine-tuning on (prompt, response) pairs."""

    packing: bool = Field(False, description="Pack several examples into each max_seq_len sequence.")
    loss_on_prompt: bool = Field(False, description="Also train on prompt tokens; false: loss on the response only.")
    samples_to_log: int = Field(
        4, ge=0, description="Held-out prompts answered (greedily) at every evaluation, shown beside the dataset's answer."
    )
    sample_tokens: int = Field(64, ge=1, description="Longest answer generated for those samples, in tokens.")
    attributes: AttributeConditioning | None = Field(
        None,
        description="SteerLM's attribute-conditioned SFT (Dong et al. 2023): each row's prompt carries its attribute "
        "values (labelled by an attribute model where a row lacks them), so an evaluation can ask for the values it "
        "wants (eval.attributes); null: plain SFT.",
    )


class RewardModelOptions(StrictModel):
    """Pairwise reward model: -log sigmoid(r(chosen) - r(rejected) - margin); or, with attributes, SteerLM's attribute
    model: one regression output per named attribute."""

    margin: float | None = Field(None, description="Fixed margin in the pairwise loss; null: no margin.")
    samples_to_log: int = Field(
        4,
        ge=0,
        description="Held-out pairs shown at every evaluation: chosen and rejected with their scores and margin (with "
        "attributes: held-out rows with their predicted and true values).",
    )
    attributes: list[AttributeName] = Field(
        default_factory=list,
        max_length=16,
        description="SteerLM's attribute model (Dong et al. 2023): one regression output per name, trained with the "
        "squared error on sft rows that carry those columns as numbers (HelpSteer's shape: prompt, response, "
        "helpfulness, correctness, ...); eval/mae/<name> reports each one's error. Empty: the pairwise reward model on "
        "preference rows.",
    )


class DpoOptions(StrictModel):
    """Direct Preference Optimization on (prompt, chosen, rejected) triples."""

    beta: float = Field(0.1, gt=0, description="Strength of the implicit KL penalty to the reference model.")
    loss: Literal["sigmoid", "ipo", "hinge"] = Field(
        "sigmoid", description="sigmoid: DPO (Rafailov et al. 2023); ipo: IPO (Azar et al. 2023); hinge: SLiC."
    )
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="Assumed fraction of flipped labels (conservative DPO); sigmoid loss only."
    )
    nll_weight: float = Field(
        0.0,
        ge=0,
        description="Weight of the chosen responses' per-token NLL added to the loss (RPO, Pang et al. 2024; "
        "TRL's rpo_alpha); keeps the chosen answers likely. 0: plain DPO.",
    )
    ref_model: ModelSpec | None = Field(None, description="Reference model; null: a frozen copy of the initial policy.")
    samples_to_log: int = Field(
        4,
        ge=0,
        description="Held-out pairs shown at every evaluation: chosen and rejected with their implicit rewards "
        "(beta * log-ratio to the reference) and margin, and the policy's greedy answer to the same prompts.",
    )
    sample_tokens: int = Field(64, ge=1, description="Longest answer generated for those samples, in tokens.")


class SpinOptions(StrictModel):
    """Self-Play fine-tuning (SPIN: Chen et al. 2024) on (prompt, response) rows: each iteration the model answers the
    iteration's prompts, then learns to prefer the data's answer over its own with DPO's logistic loss, against itself
    as it was when the iteration began."""

    iterations: int = Field(
        2,
        ge=1,
        le=64,
        description="Self-play rounds: train.steps is split evenly between them (it must divide), and each begins by "
        "answering its prompts with the model as it is then, the reference of that round.",
    )
    prompts_per_iteration: int | None = Field(
        None,
        ge=1,
        description="Training prompts each iteration answers and trains on, drawn afresh (seeded by train.seed and the "
        "iteration); null: every training row. The round's steps cycle over its pairs.",
    )
    beta: float = Field(0.1, gt=0, description="SPIN's lambda (DPO's beta): how far a round may move from its reference.")
    gen: GenSpec = Field(
        default_factory=GenSpec,
        description="How the model answers (its answers are the rejected side). Sampled with the run's seed, the "
        "iteration and the data rank, so a resumed or re-run run draws the same answers.",
    )
    samples_to_log: int = Field(
        4,
        ge=0,
        description="At every evaluation: the round's first pairs (the data's answer as chosen, the model's as "
        "rejected, with their implicit rewards), and the model's greedy answers to the first held-out prompts.",
    )


class PpoOptions(StrictModel):
    """PPO with a learned value function (Ouyang et al. 2022; trlx-style defaults)."""

    kl_coef: float = Field(0.05, ge=0, description="Coefficient of the per-token KL penalty to the reference model.")
    target_kl: float | None = Field(
        None, gt=0, description="Adapt kl_coef toward this KL (Ziegler et al. 2019, e.g. 6); null: kl_coef stays fixed."
    )
    horizon: int = Field(10000, ge=1, description="Horizon of the adaptive KL controller, in rollouts.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    cliprange: float = Field(0.2, gt=0, description="PPO policy ratio clip.")
    cliprange_value: float = Field(0.2, gt=0, description="Value prediction clip around the old values.")
    vf_coef: float = Field(1.0, ge=0, description="Weight of the value loss.")
    epochs: int = Field(4, ge=1, description="Passes over each step's rollouts.")
    minibatch_size: int | None = Field(
        None, ge=1, description="Rollouts per optimizer update within a step (global); null: train.batch_size."
    )
    whiten_rewards: bool = Field(False, description="Normalize rewards to zero mean, unit variance per batch.")
    whiten_advantages: bool = Field(
        True,
        description="Normalize the GAE advantages to zero mean, unit variance over each rank's response tokens (as "
        "trlx and veRL do); false: the raw advantages, in the reward's units (a step of all-zero rewards is not "
        "scaled up to unit size).",
    )
    tis_cap: float | None = TIS_CAP
    critic: ModelSpec | None = Field(None, description="Separate critic model; null: a value head on the policy (shared trunk).")
    ref_model: ModelSpec | None = Field(None, description="Reference model for the KL penalty; null: the initial policy.")
    gen: GenSpec = Field(default_factory=GenSpec, description="Rollout sampling.")
    environment: EnvironmentSpec | None = Field(
        None,
        description="Multi-turn episodes, as grpo.environment: each policy turn goes to the environment, which answers "
        "(appended, never trained on) or ends the episode with its reward, given at the episode's last policy token "
        "(a reward section, if any, adds its score of the episode); null: one response per prompt, scored by reward.",
    )
    samples_to_log: int = Field(
        4,
        ge=0,
        description="Tracked prompts (the first held-out prompts, else the first training prompts): every "
        "samples_every steps a response to each is sampled and logged with its reward, components and KL, so the "
        "same prompts can be followed across steps; 0: no samples.",
    )
    eval: HeldOutEval = Field(
        default_factory=HeldOutEval, description="What each evaluation on the held-out prompts draws and judges."
    )
    samples_every: int = Field(
        10, ge=1, description="Log the tracked prompts' samples every N steps (and at the first and last)."
    )


class GrpoOptions(StrictModel):
    """Group Relative Policy Optimization (Shao et al. 2024): no critic, a group baseline."""

    group_size: int = Field(8, ge=2, description="Responses sampled per prompt; train.batch_size counts responses.")
    beta: float = Field(0.04, ge=0, description="Coefficient of the KL penalty to the reference model; 0: none.")
    kl_estimator: Literal["k3", "k1"] = Field(
        "k3", description="KL estimator: k3, unbiased and low-variance (as in GRPO); k1, the plain log-ratio."
    )
    cliprange: float = Field(0.2, gt=0, description="Policy ratio clip (the lower side, and the upper one unless clip_high).")
    clip_high: float | None = Field(
        None,
        gt=0,
        description="Upper ratio clip 1 + clip_high ('clip-higher', DAPO: Yu et al. 2025, 0.28 there): low-probability "
        "tokens may rise further, against entropy collapse; null: cliprange.",
    )
    loss: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "grpo",
        description="How token losses become the loss: grpo, mean over each response's tokens then over responses; "
        "dr_grpo, their sum over responses x the most policy tokens a response holds (gen.max_new_tokens; with an "
        "environment, an episode's: environment.max_tokens or max_turns x gen.max_new_tokens, the smaller), a constant, "
        "so length does not scale a response's "
        "weight (Dr. GRPO: Liu et al. 2025; with normalize_std false); dapo, mean over every response token of the "
        "step's batch (DAPO's token-level loss: Yu et al. 2025).",
    )
    importance_sampling: Literal["token", "sequence"] = Field(
        "token",
        description="token: each token's ratio to the sampling policy; sequence: one ratio per response, the exp of its "
        "tokens' mean log-ratio, clipped as one (GSPO: Zheng et al. 2025; it wants a much smaller cliprange, e.g. 4e-4).",
    )
    epochs: int = Field(1, ge=1, description="Passes over each step's rollouts.")
    baseline: Literal["group_mean", "rloo", "reinforce++"] = Field(
        "group_mean",
        description="group_mean: the group's mean reward (GRPO); rloo: mean of the other responses (Ahmadian et al. "
        "2024); reinforce++: the group mean, with the advantages then scaled by the whole batch's std instead of each "
        "group's (REINFORCE++ with a baseline: Hu et al. 2025).",
    )
    normalize_std: bool = Field(
        True, description="Divide advantages by the reward std: the group's (the batch's, for reinforce++)."
    )
    kl_in: Literal["loss", "reward"] = Field(
        "loss",
        description="Where the beta-weighted KL to the reference goes: loss, a per-token term of the loss (GRPO); "
        "reward, each response's summed log-ratio taken off its reward before advantages (as PPO and REINFORCE++ do). "
        "beta 0: no KL anywhere.",
    )
    overlong_buffer: int | None = Field(
        None,
        ge=1,
        description="DAPO's soft overlong punishment (Yu et al. 2025): a response longer than gen.max_new_tokens - "
        "overlong_buffer tokens loses reward linearly, down to -1 at gen.max_new_tokens (where it was cut off); "
        "null: none.",
    )
    dynamic_sampling: int = Field(
        0,
        ge=0,
        le=16,
        description="DAPO's dynamic sampling (Yu et al. 2025): drop the groups whose rewards are all equal (they teach "
        "nothing) and sample more prompts to refill the batch, up to this many extra rounds a step (the batch is "
        "topped up with dropped groups if still short); 0: off. grpo/sampling_rounds and grpo/kept_groups say what it did.",
    )
    tis_cap: float | None = Field(
        None,
        gt=0,
        description=TIS_CAP.description + " With max_staleness > 0 the same weights correct for the generator's older "
        "policy (the decoupled objective: Hilton et al. 2022, AReaL: Fu et al. 2025), capped at 2 unless set.",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        le=16,
        description="Asynchronous GRPO: a generator samples the next steps' groups, with its own copy of the policy "
        "(or a vllm server), while the trainer trains; a group is trained by a policy at most this many optimizer steps "
        "newer than the one that sampled it (older ones are dropped and counted: async/dropped_groups). 0: synchronous, "
        "each step samples with the policy it trains (docs/rl.md, 'Asynchronous GRPO').",
    )
    generator: Literal["colocated", "process", "node"] = Field(
        "colocated",
        description="Where asynchronous GRPO's generator runs: colocated, a thread of the trainer's process; process, a "
        "process of its own on the trainer's device (the hf or continuous engine on its copy of the policy, weights "
        "sent at each sync), so sampling and training share no interpreter; node, that process on the gang's last "
        "node, with that node's devices (resources.nodes counts it; the trainer's node reaches it over TCP). The vllm "
        "engine is a process of its own already. process or node with max_staleness 0 samples through it, in step.",
    )
    sync_every: int = Field(
        1,
        ge=1,
        description="With max_staleness > 0: the policy's weights go to the generator every this many optimizer steps "
        "(at most max_staleness + 1, or no group would be fresh enough).",
    )
    ref_model: ModelSpec | None = Field(None, description="Reference model for the KL penalty; null: the initial policy.")
    gen: GenSpec = Field(default_factory=GenSpec, description="Rollout sampling (of each policy turn, with an environment).")
    environment: EnvironmentSpec | None = Field(
        None,
        description="Multi-turn episodes, chosen by kind (builtin, http, python, openenv): each policy turn goes to "
        "the environment, which answers (a tool's result, a user's turn; appended, and never trained on) or ends the "
        "episode with its reward; a reward section, if any, adds its score of the episode (its text after the prompt) "
        "to it; null: one response per prompt, scored by reward.",
    )
    samples_to_log: int = Field(
        4,
        ge=0,
        description="Tracked prompts (the first held-out prompts, else the first training prompts): every "
        "samples_every steps a whole group (group_size responses) is sampled for each and logged with rewards, "
        "components, advantages and KL, so the same prompts can be followed across steps; 0: no samples.",
    )
    eval: HeldOutEval = Field(
        default_factory=HeldOutEval, description="What each evaluation on the held-out prompts draws and judges."
    )
    samples_every: int = Field(10, ge=1, description="Log the tracked prompts' groups every N steps (and at the first and last).")

    @property
    def overlapped(self) -> bool:
        """Whether the run samples through the generator of rollout/overlap.py (a bound, or a generator process)."""
        return self.max_staleness > 0 or self.generator != "colocated"

    @property
    def off_policy_cap(self) -> float | None:
        """The cap of the truncated importance weights the loss uses: tis_cap, or 2 when a stale generator samples."""
        return self.tis_cap if self.tis_cap is not None or not self.max_staleness else ASYNC_TIS_CAP

    @property
    def response_budget(self) -> int:
        """The most policy tokens one response holds: gen.max_new_tokens, or over an episode's turns, as many as its
        limits let it have (Dr. GRPO's constant)."""
        if self.environment is None:
            return self.gen.max_new_tokens
        return min(self.environment.max_tokens, self.environment.max_turns * self.gen.max_new_tokens)


class IlqlOptions(StrictModel):
    """Implicit Language Q-Learning (Snell et al. 2022): offline RL from rewarded data."""

    tau: float = Field(0.7, gt=0, lt=1, description="Expectile for the value loss.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    cql_scale: float = Field(0.1, ge=0, description="Weight of the conservative Q-learning loss.")
    awac_scale: float = Field(1.0, ge=0, description="Weight of the advantage-weighted LM loss.")
    alpha: float = Field(0.001, gt=0, le=1, description="Polyak rate of the target Q heads.")
    beta: float = Field(1.0, ge=0, description="Advantage scale when generating.")
    two_qs: bool = Field(True, description="Two Q heads (take the minimum) against overestimation.")
    steps_for_target_q_sync: int = Field(5, ge=1, description="Steps between target Q head updates.")
    gen: GenSpec = Field(default_factory=GenSpec, description="Sampling for evaluation generations.")


class EvalOptions(StrictModel):
    """Score a model's answers to prompts with a reward or verifier: eval/reward, eval/accuracy, eval/pass@k, eval/length.

    Each prompt gets `samples` answers (sampled with `gen`, or one greedy answer); an answer is correct when its
    reward is at least `correct_at`. pass@k is the unbiased estimate from n = samples answers with c correct
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"): 1 - C(n-c, k) / C(n, k), averaged over
    prompts."""

    samples: int = Field(1, ge=1, le=1024, description="Answers per prompt (n of pass@k).")
    k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1], min_length=1, max_length=16, description="pass@k reported for each k (each <= samples)."
    )
    greedy: bool = Field(False, description="One greedy answer per prompt (needs samples: 1); false: sample with gen.")
    correct_at: float = Field(
        1.0, description="An answer counts as correct (accuracy, pass@k) when its reward is at least this (a verifier's 1)."
    )
    split: Literal["eval", "all"] = Field(
        "eval",
        description="Which prompts: eval, the data's held-out ones (data.eval_fraction or data.eval_source; all of them "
        "when none are held out); all, every prompt.",
    )
    max_prompts: int | None = Field(None, ge=1, description="Evaluate on the first N prompts only; null: all of them.")
    batch_size: int = Field(64, ge=1, description="Answers generated at once on one process.")
    gen: GenSpec = Field(
        default_factory=GenSpec,
        description="Sampling (ignored for greedy but max_new_tokens and stop; of each policy turn, with an environment).",
    )
    attributes: AttributeSteering | None = Field(
        None,
        description="Ask an attribute-conditioned model (sft.attributes) for these attribute values: each prompt "
        "carries them through the template the model was trained with (SteerLM's steering); null: the prompts as "
        "they are.",
    )
    environment: EnvironmentSpec | None = Field(
        None,
        description="Play an episode for each answer with this environment, as grpo.environment does, and judge it by "
        "the environment's reward (eval/success, eval/pass@k, eval/turns, eval/tool_calls, ...); a reward section, if "
        "any, adds its score of the episode; null: one answer per prompt, judged by reward.",
    )


class CodeSource(StrictModel):
    """Where a command run's code is: a snapshot uploaded at submit, or a directory every worker mounts."""

    snapshot: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of a code snapshot uploaded with POST /code (`rlplane submit --code DIR` uploads it and "
        "sets this); the worker unpacks it and runs the command in it.",
    )
    path: str | None = Field(
        None,
        pattern=r"^/",
        description="An absolute directory on a file system every worker of the queue mounts; the command runs there.",
    )
    git_commit: str | None = Field(None, max_length=64, description="The git commit of the snapshot (the CLI records it).")
    git_dirty: bool = Field(False, description="The tree had uncommitted changes (the snapshot holds them; see git_diff).")
    git_diff: str | None = Field(
        None, max_length=1_000_000, description="`git diff HEAD` at submit, when the tree was dirty (recorded by the CLI)."
    )
    files: int | None = Field(None, ge=0, description="Files in the snapshot.")
    size: int | None = Field(None, ge=0, description="Bytes of the snapshot archive.")

    @model_validator(mode="after")
    def _one_place(self) -> CodeSource:
        if (self.snapshot is None) == (self.path is None):
            raise ValueError("give exactly one of snapshot (rlplane submit --code DIR uploads it) or path (a shared directory)")
        return self


# Environment variable names a shell accepts (rules.command_runs_a_command keeps RLPLANE_* for the worker).
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class CommandOptions(StrictModel):
    """Your own training script as a run: the worker runs `argv` (through torchrun for several processes), with the
    run's resources, queue, cancel, hang detection, retries and hand-back; the script reports with the rlplane SDK
    (`import rlplane; run = rlplane.init()`, docs/sdk.md), which finds the run through the environment."""

    argv: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list,
        max_length=1024,
        description='The command, e.g. [python, train.py, --lr, "{train.lr}"]. A leading python (or python3) is the '
        "worker's interpreter, and with several processes it runs under torchrun. {dotted.path} placeholders are "
        "replaced by the spec's values ({train.lr}, {train.steps}, {command.config.warmup}, {run.id}, {run.dir}); "
        "{{ and }} are literal braces.",
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Your script's own settings, free-form: placeholders ({command.config.NAME}), "
        "sweeps and the dashboard read them.",
    )
    code: CodeSource | None = Field(
        None, description="The code the command runs in; null: the worker's working directory (the script must be there)."
    )
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=65536)]] = Field(
        default_factory=dict, max_length=256, description="Environment variables of the command (the worker sets RLPLANE_*)."
    )
    stop_grace_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="On cancel or hand-back the script is asked to stop (the SDK's should_stop() turns true) and gets "
        "this long to save and exit before it is killed.",
    )
    external: bool = Field(
        False,
        description="Set by the API for a run the SDK started outside any worker (rlplane.init with a user token): "
        "nothing is queued; the script reports and ends it itself.",
    )


@dataclass(frozen=True)
class AlgorithmEntry:
    """What the rest of the system knows about an algorithm, in one place: the spec, the trainer, the API's runs list
    and alerts, and the dashboard (its copy generated: scripts/gen_openapi.py) all read it from TABLE."""

    name: str
    section: str  # its options section of the spec
    recipe: str | None = None  # its module in trainer_core/recipes/; None: the user's own script
    rows: str | None = None  # the kind of dataset rows it reads (rlplane/dataset_rows.py); None: any, or none
    trains: bool = False  # it trains (eval only reads a model): it needs train.steps
    online: bool = False  # it generates responses while it trains and scores them with spec.reward
    rewarded: bool = False  # it scores generated responses with spec.reward
    packs: bool = False  # it takes train.packing (sequences packed into rows)
    megatron: bool = False  # the megatron backend runs it
    headlines: tuple[str, ...] = ()  # what says most about a run of it, best first: the runs list's metric
    metric_prefix: str | None = None  # the namespace of its own diagnostics (grpo/clipfrac): the dashboard's RL panel
    detectors: tuple[str, ...] = ()  # the alert detectors (api/alerts/detectors.py) that watch its runs by default


_RL_DETECTORS = (
    "kl_unbounded",
    "length_at_max",
    "entropy_collapse",
    "reward_falling",
    "mostly_truncated",
    "prompts_cut",
    "clipping_heavily",
)
# Headlines: a held-out number where the run has one (eval/*), else its training signal. DPO's rewards/chosen is not
# one: it falls while training works. "reward" is taken by the reward source, hence its section reward_model; ilql
# reads sft rows that also carry a "reward".
TABLE: tuple[AlgorithmEntry, ...] = (
    AlgorithmEntry("sft", "sft", "sft", "sft", trains=True, packs=True, megatron=True, headlines=("eval/loss", "train/loss")),
    AlgorithmEntry(
        "reward",
        "reward_model",
        "reward",
        "preference",
        trains=True,
        packs=True,
        megatron=True,
        headlines=("eval/accuracy", "train/accuracy", "eval/loss", "train/loss"),
    ),
    AlgorithmEntry(
        "dpo",
        "dpo",
        "dpo",
        "preference",
        trains=True,
        packs=True,
        megatron=True,
        headlines=("eval/loss", "rewards/margin", "eval/margin", "train/loss"),
    ),
    AlgorithmEntry(
        "spin",
        "spin",
        "spin",
        "sft",
        trains=True,
        packs=True,
        megatron=True,
        headlines=("eval/loss", "spin/answers_equal", "rewards/margin", "train/loss"),
        metric_prefix="spin",
    ),
    AlgorithmEntry(
        "ppo",
        "ppo",
        "ppo",
        "prompts",
        trains=True,
        online=True,
        rewarded=True,
        packs=True,
        megatron=True,
        headlines=("reward/mean", "eval/reward"),
        metric_prefix="ppo",
        detectors=(*_RL_DETECTORS, "critic_blind"),
    ),
    AlgorithmEntry(
        "grpo",
        "grpo",
        "grpo",
        "prompts",
        trains=True,
        online=True,
        rewarded=True,
        packs=True,
        megatron=True,
        headlines=("reward/mean", "eval/reward"),
        metric_prefix="grpo",
        detectors=("all_groups_equal", *_RL_DETECTORS, "async_idle"),
    ),
    AlgorithmEntry("ilql", "ilql", "ilql", "sft", trains=True, headlines=("eval/optimality", "eval/reward", "train/loss")),
    AlgorithmEntry("eval", "eval", "eval", "prompts", rewarded=True, headlines=("eval/accuracy", "eval/success", "eval/reward")),
    AlgorithmEntry("generate", "generate", "generate", "prompts", headlines=("data/rows", "data/agreement")),
    AlgorithmEntry("command", "command"),
)
ENTRIES: dict[str, AlgorithmEntry] = {entry.name: entry for entry in TABLE}
# The alert detectors (api/alerts/detectors.py implements them): each one watches the algorithms whose row names it.
DETECTOR_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for entry in TABLE for name in entry.detectors))

Algorithm = Literal[
    "sft", "reward", "dpo", "spin", "ppo", "grpo", "ilql", "eval", "generate", "command"
]  # TABLE's names (a test holds it)
ALGORITHMS: tuple[str, ...] = typing.get_args(Algorithm)
ALGORITHM_SECTIONS: dict[str, str] = {a.name: a.section for a in TABLE}
ALGORITHM_ROWS: dict[str, str] = {a.name: a.rows for a in TABLE if a.rows is not None}
ONLINE_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in TABLE if a.online)
REWARDED_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in TABLE if a.rewarded)
RECIPE_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in TABLE if a.recipe is not None)
TRAINING_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in TABLE if a.trains)
PACKED_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in TABLE if a.packs)
MEGATRON_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in TABLE if a.megatron)
