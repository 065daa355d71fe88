"""Implicit Language Q-Learning (Snell et al. 2022; trlx's offline RL): learn from logged responses and
their rewards, with no sampling during training.

    setup()     backend, LM + ILQL heads, tokenizer, rewarded sft rows, optimizer, schedule (and the resume point)
    train()     train.steps optimizer steps over the logged rows: Q heads fit r + γ·V(s'), the V head the
                τ-expectile of the target Q, CQL keeps unseen tokens' Q low, the LM learns by advantage-weighted
                cross-entropy (losses_ilql); every ilql.steps_for_target_q_sync steps the target Q heads move
                toward the Q heads by ilql.alpha (Polyak); metrics, eval and checkpoints when due
    evaluate()  responses to the eval rows' distinct prompts, each token the argmax of
                logits + β·(min Q_target - V), scored by the builtin task's reward; eval/loss on eval rows
and the LM alone is exported to OUT/final as a plain Hugging Face model (the heads only steer decoding).

The heads are MLPs on the LM's last hidden states. The LM and heads train as one module (one optimizer,
one DDP wrapper); a checkpoint holds the LM as its model and the heads (target heads included) as the
module "ilql_heads", so a resumed run continues bit for bit. The reward is terminal: each row's reward
sits on its last response token (eos), prompt tokens are never actions. train.batch_size counts rows and
every loss term is a mean over the global batch's response tokens.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from rlplane.spec import RunSpec
from rlplane.spec.generation import GenSpec
from trainer_core.backends import Backend, micro_batch_ranges, rank_chunks
from trainer_core.data import DataError, kind_for_algorithm, load_examples
from trainer_core.data.tasks import BUILTIN_EVAL_NAMES, builtin_reward, builtin_task
from trainer_core.data.tokenize import Example, collate, pad_id, tokenize_counting
from trainer_core.losses import IGNORE_INDEX
from trainer_core.losses.ilql import IlqlLoss, guided_logits, ilql_loss
from trainer_core.models import load_from_spec
from trainer_core.recipes import checkpointing, common, loop
from trainer_core.reporting import Sample
from trainer_core.rollout import rollouts

SAMPLES_TO_LOG = 4


def _mlp(hidden_size: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.ReLU(), nn.Linear(2 * hidden_size, out))


class IlqlHeads(nn.Module):
    """V(s) and Q(s, ·) over the vocabulary from a hidden state; the target Q heads start as copies and are
    never trained, only moved toward the Q heads by `sync_targets`."""

    def __init__(self, hidden_size: int, vocab_size: int, two_qs: bool, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):  # seeded apart from the run's RNG, so resuming rebuilds them alike
            torch.manual_seed(seed)
            self.v_head = _mlp(hidden_size, 1)
            self.q_heads = nn.ModuleList(_mlp(hidden_size, vocab_size) for _ in range(2 if two_qs else 1))
        self.target_q_heads = copy.deepcopy(self.q_heads).requires_grad_(False)

    def forward(self, hidden: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        hidden = hidden.to(self.v_head[0].weight.dtype)  # fp32 beside an autocast trunk; bf16 under DeepSpeed's cast
        qs = [head(hidden).float() for head in self.q_heads]
        with torch.no_grad():
            target_qs = [head(hidden).float() for head in self.target_q_heads]
        return qs, target_qs, self.v_head(hidden).float().squeeze(-1)

    @torch.no_grad()
    def sync_targets(self, alpha: float, backend: Backend | None = None) -> None:
        """target <- alpha·Q + (1 - alpha)·target (Polyak averaging); with a backend that partitions parameters,
        on whole parameters it gathers for the update and partitions again."""
        targets, sources = list(self.target_q_heads.parameters()), list(self.q_heads.parameters())
        with contextlib.nullcontext() if backend is None else backend.whole_parameters(targets + sources):
            for target, source in zip(targets, sources, strict=True):
                target.lerp_(source, alpha)


class IlqlOutput(NamedTuple):
    logits: torch.Tensor  # [B, L, V]
    qs: list[torch.Tensor]  # each [B, L, V]
    target_qs: list[torch.Tensor]  # each [B, L, V], no gradient
    values: torch.Tensor  # [B, L]
    past_key_values: Any


class IlqlModel(nn.Module):
    """The LM and its heads as one module, so the optimizer and DDP see them together."""

    def __init__(self, lm: nn.Module, heads: IlqlHeads) -> None:
        super().__init__()
        self.lm, self.heads = lm, heads

    def forward(self, use_cache: bool = False, **inputs: Any) -> IlqlOutput:
        out = self.lm(**inputs, output_hidden_states=True, use_cache=use_cache)
        qs, target_qs, values = self.heads(out.hidden_states[-1])
        return IlqlOutput(out.logits, qs, target_qs, values, out.past_key_values if use_cache else None)


Rewarded = tuple[Example, float]  # a tokenized row and its reward


@dataclass(kw_only=True)
class IlqlRun(common.Run):  # model: the IlqlModel, wrapped by the backend
    train_examples: list[Rewarded]
    eval_examples: list[Rewarded]
    prompts: list[dict]  # distinct prompt rows that evaluation answers
    reward_mean: float  # the behaviour data's mean reward over train rows

    @property
    def ilql(self) -> IlqlModel:
        return self.backend.unwrap(self.model)


def _rewarded(rows: list[dict], tokenizer: Any, max_len: int, column: str) -> tuple[list[Rewarded], int]:
    """The rows tokenized with their rewards, and how many were cut at max_len (their reward then falls on the last
    token kept)."""
    rewards = []
    for i, row in enumerate(rows):
        value = row.get("reward")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataError(f"row {i} has no numeric reward ({value!r}); ilql needs data.columns.reward (now {column!r})")
        rewards.append(float(value))
    examples, cut = tokenize_counting(rows, tokenizer, max_len)
    return list(zip(examples, rewards, strict=True)), cut


def _distinct_prompts(rows: list[dict]) -> list[dict]:
    seen: dict[str, dict] = {}
    for row in rows:
        if isinstance(row.get("prompt"), str):
            seen.setdefault(row["prompt"], {"prompt": row["prompt"]})
    return list(seen.values())


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> IlqlRun:
    options, seed = spec.ilql, spec.train.seed
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        lm, tokenizer = load_from_spec(spec.model, "causal", seed=seed)
        spec = common.fit_context(spec, lm)
        heads = IlqlHeads(lm.config.hidden_size, lm.get_output_embeddings().out_features, options.two_qs, seed)
        model = IlqlModel(lm, heads)
        split = load_examples(spec.data, kind_for_algorithm(spec.algorithm), seed=seed)
        column, max_len = spec.data.columns.reward, spec.model.max_seq_len
        (train_examples, cut), (eval_examples, _) = (
            _rewarded(rows, tokenizer, max_len, column) for rows in (split.train, split.eval)
        )
        common.report_cut(reporter, cut, len(train_examples), "rows are", max_len)
        saved = (lm, {"ilql_heads": heads})  # the checkpoint's model and the modules beside it
        opt = common.prepare_optimization(spec, backend, model, len(train_examples), resume_from, saved=saved)
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step}")
    return IlqlRun(
        train_examples=train_examples,
        eval_examples=eval_examples,
        prompts=_distinct_prompts(split.eval) or _distinct_prompts(split.train),
        reward_mean=sum(r for _, r in train_examples) / len(train_examples),
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


# --- loss ---


def _actions(examples: list[Rewarded]) -> int:
    """Response tokens (labels[1:] not masked): the actions the loss averages over."""
    return sum(sum(label != IGNORE_INDEX for label in e["labels"][1:]) for e, _ in examples)


def _batch(run: IlqlRun, examples: list[Rewarded]) -> dict[str, torch.Tensor]:
    batch = collate([e for e, _ in examples], pad_id(run.tokenizer))
    batch["rewards"] = torch.tensor([r for _, r in examples], dtype=torch.float32)
    return {k: v.to(run.backend.device) for k, v in batch.items()}


def _loss(run: IlqlRun, batch: dict[str, torch.Tensor], normalizer: float | None = None) -> IlqlLoss:
    options = run.spec.ilql
    out = run.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return ilql_loss(
        out.logits[:, :-1],
        [q[:, :-1] for q in out.qs],
        [q[:, :-1] for q in out.target_qs],
        out.values,
        batch["input_ids"][:, 1:],
        batch["rewards"],
        batch["labels"][:, 1:] != IGNORE_INDEX,
        tau=options.tau,
        gamma=options.gamma,
        cql_scale=options.cql_scale,
        awac_scale=options.awac_scale,
        beta=options.beta,
        normalizer=normalizer,
    )


def _means(run: IlqlRun, sums: list[float]) -> dict[str, float]:
    """[q, v, cql, awac, Q, V, actions], summed over ranks -> the loss and its terms per action."""
    options = run.spec.ilql
    q, v, cql, awac, q_sum, v_sum, count = sums
    count = max(count, 1.0)
    loss = (q + v + options.cql_scale * cql + options.awac_scale * awac) / count
    return {
        "train/loss": loss,
        "ilql/loss_q": q / count,
        "ilql/loss_v": v / count,
        "ilql/loss_cql": cql / count,
        "ilql/loss_awac": awac / count,
        "ilql/q_mean": q_sum / count,
        "ilql/v_mean": v_sum / count,
    }


# --- generation ---


def _filtered(scores: torch.Tensor, gen: GenSpec) -> torch.Tensor:
    """Temperature, then top-k and top-p, as -inf on the tokens left out."""
    scores = scores / gen.temperature
    if 0 < gen.top_k < scores.shape[-1]:
        kth = scores.topk(gen.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if gen.top_p < 1.0:
        ordered, index = scores.sort(dim=-1, descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # mass above each token: keep the first past top_p
        scores = scores.scatter(-1, index, ordered.masked_fill(before > gen.top_p, float("-inf")))
    return scores


def _cut(text: str, stop: list[str]) -> tuple[str, bool]:
    ends = [text.index(s) for s in stop if s in text]
    return (text[: min(ends)], True) if ends else (text, False)


@torch.no_grad()
def generate(run: IlqlRun, prompts: list[list[int]], gen: GenSpec, *, greedy: bool) -> list[str]:
    """One response per prompt, each token from logits + β·(min Q_target - V): the argmax when `greedy`, else
    sampled with ilql.gen; a response ends at eos, a stop string or gen.max_new_tokens."""
    model, tokenizer, device = run.ilql, run.tokenizer, run.backend.device
    width, eos = max(len(p) for p in prompts), tokenizer.eos_token_id
    ids = torch.tensor([[pad_id(tokenizer)] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    tokens: list[list[int]] = [[] for _ in prompts]
    texts, done = [""] * len(prompts), [False] * len(prompts)
    was_training = model.training
    model.eval()
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    for _ in range(gen.max_new_tokens):
        last = [q[:, -1] for q in out.target_qs]
        scores = guided_logits(out.logits[:, -1], last, out.values[:, -1], run.spec.ilql.beta)
        chosen = scores.argmax(-1) if greedy else torch.multinomial(_filtered(scores, gen).softmax(-1), 1).squeeze(-1)
        for i, token in enumerate(chosen.tolist()):
            if done[i]:
                continue
            done[i] = token == eos
            if not done[i]:
                tokens[i].append(token)
                texts[i], done[i] = _cut(tokenizer.decode(tokens[i], skip_special_tokens=True), gen.stop)
        finished = all(done)
        if run.backend.forward_is_collective:  # a sharded model: every rank decodes until the last rank is done
            finished = run.backend.all_reduce(torch.tensor(float(not finished)), "sum").item() == 0
        if finished:
            break
        mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
        positions = positions[:, -1:] + 1
        cached = {"past_key_values": out.past_key_values, "use_cache": True}
        out = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=positions, **cached)
    model.train(was_training)
    return texts


# --- evaluation ---


def _eval_loss(run: IlqlRun) -> dict[str, float]:
    sums = common.evaluate(run, run.eval_examples, lambda chunk: _loss(run, _batch(run, chunk)).sums())
    return {"eval/loss": _means(run, sums)["train/loss"]}


def _eval_rewards(run: IlqlRun, task: str, step: int) -> dict[str, float]:
    """Greedy guided responses to this rank's share of the prompts, scored by the task's reward; samples from rank zero."""
    backend, gen = run.backend, run.spec.ilql.gen
    reward, total, count, shown = builtin_reward(task), 0.0, 0, []
    for chunk, real in rank_chunks(run.prompts, 64, backend):
        ids = rollouts.encode_prompts(chunk, run.tokenizer, rollouts.prompt_budget(run.spec, gen))
        with backend.autocast():
            responses = generate(run, ids, gen, greedy=True)
        if not real:
            continue
        count += len(chunk)
        for row, response in zip(chunk, responses, strict=True):
            score = reward(row["prompt"], response)
            total += score
            if len(shown) < SAMPLES_TO_LOG:
                shown.append(Sample(prompt=row["prompt"], response=response, reward=score))
    if backend.is_rank_zero and shown:
        run.reporter.samples(step, shown)
    score_sum, count = backend.all_reduce(torch.tensor([total, count], dtype=torch.float64), "sum").tolist()
    mean = score_sum / max(count, 1.0)
    return {"eval/reward": mean, f"eval/{BUILTIN_EVAL_NAMES[task]}": mean}


def evaluate(run: IlqlRun, step: int) -> dict[str, float] | None:
    """eval/loss on the eval rows; for a builtin task also eval/reward and its named score (eval/optimality)."""
    values: dict[str, float] = {}
    if run.eval_examples:
        values |= _eval_loss(run)
    if (task := builtin_task(run.spec.data.source)) is not None and run.prompts:
        values |= _eval_rewards(run, task, step)
    run.model.train()
    return values or None


# --- training ---


def train_step(run: IlqlRun) -> loop.StepResult:
    """One optimizer step over the next global batch (then the target sync when due): metrics, grad norm, tokens."""
    backend, spec = run.backend, run.spec
    local = common.local_batch(run, run.train_examples)
    micro = micro_batch_ranges(range(len(local)), spec.train.micro_batch_size)
    actions = max(1, _actions(local))  # every response token of the rank's rows weighs the same
    totals = torch.zeros(7, dtype=torch.float64, device=backend.device)
    run.model.train()
    for i, piece in enumerate(micro):
        sync = i == len(micro) - 1
        with contextlib.nullcontext() if sync else backend.no_sync(run.model), backend.autocast():
            out = _loss(run, _batch(run, local[piece.start : piece.stop]), normalizer=actions)
            backend.backward(out.loss * len(micro), len(micro))  # the backend divides by len(micro) again
        totals += out.sums()
    grad_norm = backend.step()
    run.step += 1
    if run.step % spec.ilql.steps_for_target_q_sync == 0:
        run.ilql.heads.sync_targets(spec.ilql.alpha, backend)
    tokens = sum(len(e["input_ids"]) for e, _ in local) * backend.data_world_size
    means = _means(run, backend.all_reduce(totals, "sum").tolist())
    return loop.StepResult({**means, "train/grad_norm": grad_norm}, tokens)


def checkpoint_state(run: IlqlRun) -> checkpointing.CheckpointState:
    """The LM as the checkpoint's model and every head (target heads included) as the module ilql_heads."""
    return checkpointing.run_state(run, model=run.ilql.lm, modules={"ilql_heads": run.ilql.heads})


def train(run: IlqlRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(
        run,
        stop_at,
        step=train_step,
        evaluate=lambda r: evaluate(r, r.step),
        checkpoint_state=checkpoint_state,
        first_eval=lambda r: {"data/reward_mean": r.reward_mean, **(evaluate(r, 0) or {})},
    )


def run_ilql(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> IlqlRun:
    """setup, train, export the LM; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at, export=lambda run: run.ilql.lm)


run = run_ilql  # the name trainer_core.cli calls every recipe by
