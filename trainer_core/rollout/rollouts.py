"""What the online RL recipes (ppo, grpo) share: prompts in, sampled responses out, scored and reported.

    encode_prompts()   prompt rows -> token ids (text as is, messages through the chat template)
    generate()         left-padded prompts -> Generation: prompt + response ids, masks, positions
    score()            decoded responses -> rewards from spec.reward (trainer_core.rewards)
    evaluate()         greedy responses to the eval prompts, scored: eval/reward (+ eval/accuracy, ...)

Layout of a Generation: B rows of [P prompt positions | R response positions]. Prompts are
left-padded so every response starts at column P; a response ends at its first eos (kept, it is
the action that ends the episode) and what follows is padding. `response_mask` [B, R] marks the
real response tokens. Positions are counted over real tokens only, as generate() does, so a
left-padded row scores exactly like the same row without padding.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from rlplane.spec import RunSpec
from rlplane.spec.generation import GenSpec, HeldOutEval
from trainer_core.backends import Backend, rank_chunks
from trainer_core.data import DataError
from trainer_core.data.tasks import BUILTIN_EVAL_NAMES, builtin_reward, builtin_task
from trainer_core.data.tokenize import pad_id
from trainer_core.rollout import draws
from trainer_core.rollout.engines import Completion, Engine, Sampling, make_engine, opened


@dataclass
class Generation:
    input_ids: torch.Tensor  # [B, P + R]
    attention_mask: torch.Tensor  # [B, P + R]: real prompt tokens and real response tokens
    position_ids: torch.Tensor  # [B, P + R]
    response_mask: torch.Tensor  # [B, R] bool
    prompt_width: int  # P
    logprobs: torch.Tensor | None = None  # [B, R]: the rollout engine's log-probabilities of the response tokens
    versions: torch.Tensor | None = None  # [B] on the CPU: the policy version that sampled each row

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width :]

    def rows(self, index: torch.Tensor | slice) -> Generation:
        return Generation(
            self.input_ids[index],
            self.attention_mask[index],
            self.position_ids[index],
            self.response_mask[index],
            self.prompt_width,
            None if self.logprobs is None else self.logprobs[index],
            None if self.versions is None else self.versions[index.cpu() if isinstance(index, torch.Tensor) else index],
        )

    def inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments of a model forward over prompt + response."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "position_ids": self.position_ids}

    @staticmethod
    def concat(parts: list[Generation], pad: int) -> Generation:
        """The rows of several generations as one: prompts padded on the left and responses on the right to the
        widest (padding is masked out, so every row's forward gives what it gave alone)."""
        prompt = max(p.prompt_width for p in parts)
        response = max(p.response_mask.shape[1] for p in parts)

        def widen(g: Generation, tensor: torch.Tensor, value: int) -> torch.Tensor:
            left, right = prompt - g.prompt_width, response - g.response_mask.shape[1]
            return torch.nn.functional.pad(tensor, (left, right), value=value)

        return Generation(
            torch.cat([widen(g, g.input_ids, pad) for g in parts]),
            torch.cat([widen(g, g.attention_mask, 0) for g in parts]),
            torch.cat([widen(g, g.position_ids, 0) for g in parts]),
            torch.cat([torch.nn.functional.pad(g.response_mask, (0, response - g.response_mask.shape[1])) for g in parts]),
            prompt,
            None
            if any(g.logprobs is None for g in parts)
            else torch.cat([torch.nn.functional.pad(g.logprobs, (0, response - g.logprobs.shape[1])) for g in parts]),
            None if any(g.versions is None for g in parts) else torch.cat([g.versions for g in parts]),
        )


def prompt_budget(spec: RunSpec, gen: GenSpec) -> int:
    """Longest prompt in tokens: model.max_seq_len minus room for the response (spec rules keep it ≥ 1)."""
    return max(1, spec.model.max_seq_len - gen.max_new_tokens)


def encode_prompts(rows: list[dict], tokenizer: Any, max_tokens: int) -> list[list[int]]:
    """Each row's prompt as ids, cut from the left to max_tokens (the end of a prompt is what the response follows)."""
    return encode_and_cut(rows, tokenizer, max_tokens)[0]


def encode_and_cut(rows: list[dict], tokenizer: Any, max_tokens: int) -> tuple[list[list[int]], list[bool]]:
    """encode_prompts, and for each prompt whether it was cut (it lost its start: gen/prompt_cut)."""
    whole = [prompt_ids(row, tokenizer) for row in rows]
    return [ids[-max_tokens:] for ids in whole], [len(ids) > max_tokens for ids in whole]


def prompt_ids(row: dict, tokenizer: Any) -> list[int]:
    """A row's whole prompt as ids: text as is, messages through the chat template (ending where the assistant's turn
    starts)."""
    prompt = row["prompt"]
    if isinstance(prompt, list):
        require_chat_template(tokenizer)
        return list(tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=False))
    return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])


def require_chat_template(tokenizer: Any) -> None:
    """Conversation prompts (message lists) need the model's chat template: a DataError saying so where it has none."""
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            "the prompts are conversations (message lists) but the model's tokenizer has no chat template; use "
            "plain-text prompts or a model whose tokenizer has one"
        )


def prompt_text(row: dict) -> str:
    """How a prompt reads in samples and what reward functions receive: the text, or the last user message."""
    prompt = row["prompt"]
    if isinstance(prompt, list):
        return next((m["content"] for m in reversed(prompt) if m["role"] == "user"), prompt[-1]["content"])
    return prompt


def metadata(row: dict) -> dict:
    """The prompt row's other columns (e.g. the task's "answer"), passed to the reward; a messages
    prompt also goes whole as "prompt_messages", so a reward model scores it through the chat template."""
    extra = {k: v for k, v in row.items() if k != "prompt"}
    if isinstance(row["prompt"], list):
        extra["prompt_messages"] = row["prompt"]
    return extra


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def generate(
    policy: nn.Module,
    prompts: list[list[int]],
    tokenizer: Any,
    gen: GenSpec,
    backend: Backend,
    *,
    greedy: bool = False,
    engine: Engine | None = None,
) -> Generation:
    """Sample one response per prompt (greedy for evaluation) with `engine` (the run's; None: the colocated engine
    gen.engine names, on `policy`), and its log-probabilities of the response tokens; in calls of
    gen.micro_batch_size prompts of like length where that is set. The rows come back in the prompts' order."""
    engine = engine or make_engine(gen, backend, policy, tokenizer)
    with contextlib.nullcontext() if greedy else draws.drawing():
        return _generate(engine, prompts, tokenizer, Sampling.of(gen, greedy), gen.micro_batch_size, backend)


def _generate(
    engine: Engine, prompts: list[list[int]], tokenizer: Any, sampling: Sampling, size: int | None, backend: Backend
) -> Generation:
    if size is None:
        return _generate_call(engine, prompts, tokenizer, sampling, backend)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # the longest first: peak memory shows at once
    calls = [order[i : i + size] for i in range(0, len(order), size)]
    parts = [_generate_call(engine, [prompts[i] for i in call], tokenizer, sampling, backend) for call in calls]
    if backend.forward_is_collective:
        # Each forward gathers parameters from every rank: a rank with fewer calls runs stand-in ones, and discards them.
        most = int(backend.all_reduce(torch.tensor(float(len(calls)), device=backend.device), "max"))
        for _ in range(most - len(calls)):
            _generate_call(engine, prompts[:1], tokenizer, sampling, backend)
    merged = Generation.concat(parts, pad_id(tokenizer))
    back = torch.empty(len(order), dtype=torch.long)
    back[torch.tensor(order)] = torch.arange(len(order))
    return merged.rows(back.to(merged.input_ids.device))


def _generate_call(engine: Engine, prompts: list[list[int]], tokenizer: Any, sampling: Sampling, backend: Backend) -> Generation:
    """One engine call over `prompts`, laid out as a Generation (prompts left-padded to the longest)."""
    return from_completions(prompts, engine.generate(prompts, sampling), pad_id(tokenizer), backend.device)


def from_completions(prompts: list[list[int]], completions: list[Completion], pad: int, device: Any) -> Generation:
    """Prompts and their engine's completions as one Generation: each prompt left-padded to the longest, each
    response right-padded to the longest, its log-probabilities 0 past its end; `versions` each row's policy version."""
    width = max(len(p) for p in prompts)
    longest = max(len(c.tokens) for c in completions)
    ids, mask, logprobs = [], [], []
    for prompt, done in zip(prompts, completions, strict=True):
        left, right = width - len(prompt), longest - len(done.tokens)
        ids.append([pad] * left + prompt + done.tokens + [pad] * right)
        mask.append([0] * left + [1] * (len(prompt) + len(done.tokens)) + [0] * right)
        logprobs.append(list(done.logprobs) + [0.0] * right)
    attention_mask = torch.tensor(mask, dtype=torch.long, device=device)
    return Generation(
        torch.tensor(ids, dtype=torch.long, device=device),
        attention_mask,
        _positions(attention_mask),
        attention_mask[:, width:].bool(),
        width,
        torch.tensor(logprobs, dtype=torch.float32, device=device),
        torch.tensor([c.version for c in completions], dtype=torch.long),
    )


def decode(tokenizer: Any, generation: Generation) -> list[str]:
    """Each response's text, without eos or padding."""
    return [
        tokenizer.decode(ids[keep].tolist(), skip_special_tokens=True)
        for ids, keep in zip(generation.response_ids, generation.response_mask, strict=True)
    ]


@dataclass
class Scored:
    generation: Generation
    prompts: list[str]  # one per response
    responses: list[str]
    scores: Any  # trainer_core.rewards.RewardScores
    gen_s: float  # seconds spent generating (and, for episodes, playing them)
    episodes: list[Any] | None = None  # episodes.EpisodeRecord per response, when an environment played them
    prompt_cut: list[bool] = field(default_factory=list)  # per response: its prompt lost its start to fit the budget


def keep(scored: Scored, index: list[int], pad: int, also: Scored | None = None) -> Scored:
    """The responses `index` of `scored` (appended to `also`'s, when given): one batch from several rounds. Its
    gen_s is 0: the caller knows how long all its rounds took."""
    rows = torch.tensor(index, dtype=torch.long)
    picked = Scored(
        scored.generation.rows(rows),
        [scored.prompts[i] for i in index],
        [scored.responses[i] for i in index],
        type(scored.scores)(
            [scored.scores.total[i] for i in index], {k: [v[i] for i in index] for k, v in scored.scores.components.items()}
        ),
        0.0,
        None if scored.episodes is None else [scored.episodes[i] for i in index],
        [scored.prompt_cut[i] for i in index],
    )
    if also is None:
        return picked
    components = {k: also.scores.components.get(k, []) + v for k, v in picked.scores.components.items()}
    return Scored(
        Generation.concat([also.generation, picked.generation], pad),
        also.prompts + picked.prompts,
        also.responses + picked.responses,
        type(scored.scores)(also.scores.total + picked.scores.total, components),
        0.0,
        None if also.episodes is None else also.episodes + (picked.episodes or []),
        also.prompt_cut + picked.prompt_cut,
    )


@dataclass
class Sampled:
    """Responses drawn and not yet scored: what `score` turns into Scored (asynchronous GRPO scores one batch while the
    next is drawn: rollout/overlap.py)."""

    generation: Generation
    rows: list[dict]  # one per response (a row repeated for each of its group)
    responses: list[str]
    gen_s: float
    prompt_cut: list[bool]


def sample(run: Any, policy: nn.Module, rows: list[dict], gen: GenSpec, repeat: int = 1) -> Sampled:
    """`repeat` sampled responses to each row's prompt (consecutive: a GRPO group), with run's engine."""
    rows = [row for row in rows for _ in range(repeat)]
    engine = opened(run, gen, policy)  # a weight push is counted in perf/weight_sync_s, not in gen_s
    started = time.perf_counter()
    encoded, cut = encode_and_cut(rows, run.tokenizer, prompt_budget(run.spec, gen))
    generation = generate(policy, encoded, run.tokenizer, gen, run.backend, engine=engine)
    gen_s = time.perf_counter() - started
    return Sampled(generation, rows, decode(run.tokenizer, generation), gen_s, cut)


def score(run: Any, sampled: Sampled, *, observe: bool = False) -> Scored:
    """`sampled`, scored by run.reward. `observe`: for samples that are only shown, so the reward's running normaliser is
    left as it was."""
    rows = sampled.rows
    prompts = [prompt_text(r) for r in rows]
    with unchanged(run.reward) if observe else contextlib.nullcontext():
        scores = run.reward(prompts, sampled.responses, [metadata(r) for r in rows])
    return Scored(sampled.generation, prompts, sampled.responses, scores, sampled.gen_s, prompt_cut=sampled.prompt_cut)


def sample_and_score(
    run: Any, policy: nn.Module, rows: list[dict], gen: GenSpec, repeat: int = 1, *, observe: bool = False
) -> Scored:
    """`repeat` sampled responses to each row's prompt (consecutive: a GRPO group), scored by run.reward (`score`)."""
    return score(run, sample(run, policy, rows, gen, repeat), observe=observe)


@contextlib.contextmanager
def unchanged(reward: Any) -> Iterator[None]:
    """Scoring inside leaves the reward's running normaliser as it was: what is only shown or evaluated does not
    move what training is normalised by."""
    with getattr(reward, "lock", contextlib.nullcontext()):  # a reward the generator scores with too (overlap.py)
        state = reward.state_dict()
        try:
            yield
        finally:
            reward.load_state_dict(state)


# --- evaluation ---


@dataclass(frozen=True)
class EvalPlan:
    """How evaluation draws and judges answers: `samples` per prompt (greedy: one), and, when `correct_at` is set, an
    answer is correct when its reward is at least that (eval/accuracy and eval/pass@k for each of `k`)."""

    samples: int = 1
    greedy: bool = True
    correct_at: float | None = None
    k: tuple[int, ...] = ()
    batch_size: int = 64  # answers per generate call


GREEDY = EvalPlan()


def plan_of(held_out: HeldOutEval) -> EvalPlan:
    """An RL run's evaluation (ppo/grpo eval: one greedy answer per prompt unless it asks for more samples)."""
    return EvalPlan(samples=held_out.samples, greedy=held_out.samples == 1, correct_at=held_out.correct_at, k=tuple(held_out.k))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k from n answers of which c are correct (Chen et al. 2021, eq. 1): 1 - C(n-c, k) / C(n, k),
    as the running product that avoids the large binomials."""
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def evaluate(
    run: Any, policy: nn.Module, rows: list[dict], gen: GenSpec, reward: Any | None, plan: EvalPlan = GREEDY
) -> dict[str, float]:
    """`plan.samples` answers to each of this rank's share of `rows` (greedy, or sampled with `gen`), scored, reduced
    over ranks.

    eval/reward is spec.reward's total per answer (its normaliser is left as it was), eval/reward/<name> each
    component; eval/length the answers' mean length in tokens and eval/truncated the share that reached
    gen.max_new_tokens; eval/prompt_cut the share whose prompt lost its start to fit model.max_seq_len; with
    plan.correct_at, eval/accuracy is the share of answers whose reward reaches it and eval/pass@<k> the mean over
    prompts of pass_at_k. When the data is a builtin task its own reward is reported
    by the task's name (eval/accuracy for arithmetic, eval/optimality for randomwalks; it does not change when a
    run swaps in a reward model) unless plan.correct_at already says what eval/accuracy is."""
    backend, tokenizer, n = run.backend, run.tokenizer, plan.samples
    task = builtin_task(run.spec.data.source)
    task_name = BUILTIN_EVAL_NAMES[task] if task else None
    judged = plan.correct_at is not None and reward is not None
    if judged and task_name == "accuracy":
        task_name = None
    sums = _eval_sums(reward is not None, task_name, judged, plan.k)
    budget, answers, prompts_seen = prompt_budget(run.spec, gen), 0, 0
    # Stand-in chunks run too (generation and a model or normalised reward are collectives) but do not count.
    for chunk, real in rank_chunks(rows, max(1, plan.batch_size // n), backend):
        repeated = [row for row in chunk for _ in range(n)]
        encoded, cut = encode_and_cut(repeated, tokenizer, budget)
        generation = generate(policy, encoded, tokenizer, gen, backend, greedy=plan.greedy, engine=opened(run, gen, policy))
        responses = decode(tokenizer, generation)
        prompts = [prompt_text(r) for r in repeated]
        scores = None
        if reward is not None:
            with unchanged(reward):
                scores = reward(prompts, responses, [metadata(r) for r in repeated])
            for name in scores.components:  # every rank reduces the same keys, stand-ins included
                sums.setdefault(f"reward/{name}", 0.0)
        if not real:
            continue
        answers += len(repeated)
        prompts_seen += len(chunk)
        lengths = generation.response_mask.sum(dim=1)
        sums["length"] += float(lengths.sum())
        sums["truncated"] += float((lengths >= gen.max_new_tokens).sum())
        sums["prompt_cut"] += sum(cut)
        if scores is not None:
            sums["reward"] += sum(scores.total)
            for name, values in scores.components.items():
                sums[f"reward/{name}"] += sum(values)
        if judged:
            _add_judged(sums, scores.total, plan, len(chunk))
        if task_name:
            task_reward = builtin_reward(task)
            sums[task_name] += sum(
                task_reward(p, r, m.get("answer")) for p, r, m in zip(prompts, responses, map(metadata, repeated), strict=True)
            )
    keys = sorted(sums)
    totals = backend.all_reduce(
        torch.tensor([sums[k] for k in keys] + [answers, prompts_seen], dtype=torch.float64), "sum"
    ).tolist()
    answers, prompts_seen = max(totals[-2], 1), max(totals[-1], 1)
    return {f"eval/{k}": v / (prompts_seen if k.startswith("pass@") else answers) for k, v in zip(keys, totals[:-2], strict=True)}


def _eval_sums(rewarded: bool, task_name: str | None, judged: bool, ks: tuple[int, ...]) -> dict[str, float]:
    """The sums evaluate reports, each at zero: every rank reduces the same keys, whether or not its chunks count."""
    sums: dict[str, float] = {"length": 0.0, "truncated": 0.0, "prompt_cut": 0.0}
    if rewarded:
        sums["reward"] = 0.0
    if task_name:
        sums[task_name] = 0.0
    if judged:
        sums["accuracy"] = 0.0
        sums |= {f"pass@{k}": 0.0 for k in ks}
    return sums


def _add_judged(sums: dict[str, float], totals: list[float], plan: EvalPlan, prompts: int) -> None:
    """eval/accuracy's and eval/pass@k's sums from the rewards of `prompts` prompts' answers, plan.samples each."""
    n = plan.samples
    correct = [total >= plan.correct_at for total in totals]
    sums["accuracy"] += sum(correct)
    for i in range(prompts):
        c = sum(correct[i * n : (i + 1) * n])
        for k in plan.k:
            sums[f"pass@{k}"] += pass_at_k(n, c, k)


def eval_rows(run: Any) -> list[dict]:
    """The held-out prompts; the training prompts when the data has none held out (tiny prompt sets)."""
    return run.eval_rows or run.train_rows
