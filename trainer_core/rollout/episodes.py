"""Multi-turn rollouts (grpo.environment, ppo.environment): the policy and an environment take turns until each episode ends.

    play()        prompt rows -> rollouts.Scored: every row's episode, played turn by turn, all at once or as many at
                  once as the environment's sessions allow
    evaluate()    the eval prompts' episodes: eval/reward, eval/success, eval/pass@k, eval/turns, ...
    step_stats()  a step's env/* sums;  error_summary()  its errors' reasons, for the log;  sample_extra() and
                  sample_turns()  per sample

Each turn, every live episode gets one policy turn from a single batched rollouts.generate() call, which stops at
EOS, a stop string (the environment's, and gen.stop) or gen.max_new_tokens; then the environment answers each
(text that is appended, or the end with a reward). An episode the environment has not ended after
environment.max_turns policy turns, or that would grow past environment.max_tokens, is cut off, and the
environment gives its verdict on it. When a row's prompt is a conversation (messages), the environment's opening and
answers join it as messages through the model's chat template (chat_turns.py). The tools an environment offers
(Episode.tools) are shown through the template where it renders tools, else as text heading the opening.

Layout: the Generation of rollouts.py, B rows of [P prompt positions | R response positions]. The environment's
opening text (reset) joins the prompt. In the response region the policy's turns and the environment's answers
follow each other as they were played, every real token with attention_mask 1, only the policy's with
response_mask 1: log-probs, the loss, the KL, entropy and lengths count the policy's tokens alone, each conditioned
on everything before it, as it was sampled. Positions are counted over real tokens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from rlplane.spec.environments import EnvironmentSpec
from rlplane.spec.generation import GenSpec
from trainer_core.backends import rank_chunks
from trainer_core.data.tokenize import pad_id
from trainer_core.environments import EnvError, Environment, Episode, Reply
from trainer_core.environments.tool_calls import listed
from trainer_core.environments.tool_formats import FORMATS
from trainer_core.rewards import RewardScores
from trainer_core.rollout import engines, rollouts
from trainer_core.rollout.chat_turns import ChatTurns

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class EpisodeRecord:
    """What a step reports of one episode."""

    turns: int  # the policy's
    tool_calls: int
    errors: tuple[str, ...]  # the reason of each answer marked as an error
    truncated: bool  # cut off by max_turns or max_tokens
    reason: str | None  # why it ended, in the environment's words


@dataclass
class _Playing:
    episode: Episode
    prompt: list[int]  # the row's, then with the environment's opening (cut from the left to the budget)
    opening: str = ""  # the environment's text that opened the episode
    ids: list[int] = field(default_factory=list)  # after the prompt: the policy's and the environment's tokens
    mine: list[bool] = field(default_factory=list)  # per id: the policy's
    drawn: list[float] | None = field(default_factory=list)  # per id: the rollout engine's log-prob (0: not sampled)
    tool_calls: int = 0
    errors: list[str] = field(default_factory=list)
    cut: str | None = None  # max_turns or max_tokens, when the limits ended it
    prompt_cut: bool = False  # the prompt with the opening lost its start to fit the budget
    verdict: Reply | None = None

    def add(self, ids: Sequence[int], policy: bool, drawn: Sequence[float] | None = None) -> None:
        self.ids += ids
        self.mine += [policy] * len(ids)
        if self.drawn is not None:
            self.drawn = None if policy and drawn is None else self.drawn + list(drawn or [0.0] * len(ids))

    def heard(self, reply: Reply) -> None:
        self.tool_calls += reply.tool_call
        if reply.error:
            self.errors.append(reply.reason or "error (no reason given)")


def prompt_budget(spec: Any, limits: EnvironmentSpec) -> int:
    """Longest prompt (with the environment's opening) in tokens: model.max_seq_len less the episode's room."""
    return max(1, spec.model.max_seq_len - limits.max_tokens)


def _each(environment: Environment, call: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """call(item) for each item: at once when the environment says it can serve several (a service, a sandbox)."""
    workers = min(getattr(environment, "concurrency", 1), len(items))
    if workers <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(call, items))


def _is_chat(row: dict) -> bool:
    return isinstance(row["prompt"], list)


def markers_of(limits: Any) -> tuple[str, ...]:
    """The special tokens an environment's tool format writes (none for environments that read no tool calls)."""
    return FORMATS[getattr(limits, "tool_format", None) or "hermes"].markers if limits is not None else ()


def marker_ids(tokenizer: Any, markers: tuple[str, ...]) -> dict[int, str]:
    """The ids of the tokenizer's special tokens among `markers` (a tool format's), with their text."""
    if not markers:
        return {}
    return {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special and t.content in markers}


def policy_text(tokenizer: Any, ids: list[int], kept: dict[int, str]) -> str:
    """`ids` as text without special tokens, but for those `kept` (marker_ids): a tool format's own special tokens
    (Mistral's [TOOL_CALLS], Kimi's and gpt-oss's <|...|>) are the call, and decoding drops every special token."""
    if not any(i in kept for i in ids):
        return tokenizer.decode(ids, skip_special_tokens=True)
    parts, run = [], []
    for i in ids:
        if i in kept:
            parts += [tokenizer.decode(run, skip_special_tokens=True), kept[i]]
            run = []
        else:
            run.append(i)
    return "".join([*parts, tokenizer.decode(run, skip_special_tokens=True)])


def _ending(ids: list[int], eos: int | None, limit: int) -> str:
    if ids and ids[-1] == eos:
        return "eos"
    return "length" if len(ids) >= limit else "stop"


@torch.no_grad()
def play(
    run: Any,
    policy: nn.Module,
    rows: list[dict],
    gen: GenSpec,
    environment: Environment,
    limits: EnvironmentSpec,
    repeat: int = 1,
    *,
    greedy: bool = False,
) -> rollouts.Scored:
    """`repeat` episodes for each row (consecutive: a GRPO group), played to their ends: all at once, or, where the
    environment holds a session per live episode and allows only `sessions` of them, that many at a time, the next
    episode starting as soon as one ends (its session freed). Every rank generates as many times as the rank that
    needs most (on a stand-in when its own episodes are over): generation on a sharded policy is a collective."""
    tokenizer, backend = run.tokenizer, run.backend
    rows = [row for row in rows for _ in range(repeat)]
    engine = engines.opened(run, gen, policy)  # before the clock: a weight push is not generation
    started = time.perf_counter()
    budget = prompt_budget(run.spec, limits)
    prompts = [rollouts.prompt_ids(row, tokenizer) for row in rows]  # whole: cut with the opening, at the reset
    playing = [_Playing(Episode(row=row), prompt) for row, prompt in zip(rows, prompts, strict=True)]
    encode = lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []  # noqa: E731
    stops = [*environment.stop, *getattr(limits, "stop", ()), *gen.stop]
    turn = gen.model_copy(update={"stop": list(dict.fromkeys(stops))})
    tool_format = getattr(limits, "tool_format", None) or "hermes"  # how the listing of an episode's tools says to call one
    kept = marker_ids(tokenizer, FORMATS[tool_format].markers)  # decoded as they are: the calls of its tool format
    chat = ChatTurns(tokenizer, limits.chat_role, tool_format) if any(_is_chat(row) for row in rows) else None
    sessions = getattr(environment, "sessions", None) or len(playing)
    waiting, live = list(reversed(playing)), []  # waiting: popped from its end, so episodes start in order

    def start() -> None:
        """Open episodes in the free sessions."""
        opening = [waiting.pop() for _ in range(min(sessions - len(live), len(waiting)))]
        for p, text in zip(opening, _each(environment, environment.reset, [p.episode for p in opening]), strict=True):
            tools = p.episode.tools
            if chat is not None and _is_chat(p.episode.row) and (text or tools):
                whole = chat.prompt(p.episode.row["prompt"], text, tools)
            else:
                text = (listed(tools, tool_format) if tools else "") + text  # the tools as text, heading the opening
                whole = p.prompt + encode(text)
            p.opening, p.prompt, p.prompt_cut = text, whole[-budget:], len(whole) > budget
        live.extend(opening)

    def settle() -> None:
        """The episodes the limits cut off get the environment's verdict; every ended one frees its session."""
        cut = [p for p in live if p.verdict is None and p.cut is not None]
        for p, verdict in zip(cut, _each(environment, lambda p: environment.cut_off(p.episode, p.cut), cut), strict=True):
            p.heard(verdict)
            p.verdict = verdict
        live[:] = [p for p in live if p.verdict is None]

    start()
    while float(backend.all_reduce(torch.tensor([float(len(live))]), "max")[0]) > 0:
        contexts = [p.prompt + p.ids for p in live] or [playing[0].prompt]  # a stand-in keeps this rank in step
        generation = rollouts.generate(policy, contexts, tokenizer, turn, backend, greedy=greedy, engine=engine)
        _add_policy_turns(live, generation, tokenizer, kept, limits.max_tokens, turn.max_new_tokens)
        answering = [p for p in live if p.cut is None]
        replies = _each(environment, lambda p: environment.step(p.episode, p.episode.messages[-1][1]), answering)
        for p, reply in zip(answering, replies, strict=True):
            _add_reply(p, reply, encode, chat, limits)
        settle()
        start()
    return _scored(playing, rows, tokenizer, backend.device, time.perf_counter() - started, kept)


def _add_policy_turns(
    live: list[_Playing],
    generation: rollouts.Generation,
    tokenizer: Any,
    kept: dict[int, str],
    max_tokens: int,
    max_new_tokens: int,
) -> None:
    """Each live episode's turn from the one batched generation: cut off at max_tokens where it outgrows the episode."""
    eos = tokenizer.eos_token_id
    drawn = generation.logprobs if generation.logprobs is not None else [None] * len(live)
    for p, ids, keep, logprobs in zip(live, generation.response_ids, generation.response_mask, drawn, strict=False):
        new = ids[keep].tolist()
        room = max_tokens - len(p.ids)
        p.add(new[:room], policy=True, drawn=None if logprobs is None else logprobs[keep].tolist()[:room])
        if len(new) > room:
            p.cut = "max_tokens"
            continue
        p.episode.messages.append(("policy", policy_text(tokenizer, new, kept)))
        p.episode.ended_by = _ending(new, eos, max_new_tokens)  # type: ignore[assignment]


def _add_reply(
    p: _Playing, reply: Reply, encode: Callable[[str], list[int]], chat: ChatTurns | None, limits: EnvironmentSpec
) -> None:
    """The environment's answer to the policy's turn: the episode's end, its next text, or the limits' cut-off."""
    p.heard(reply)
    if reply.done:
        p.verdict = reply
        return
    if chat is not None and _is_chat(p.episode.row):
        text = encode(chat.reply(reply.text, ended_with_eos=p.episode.ended_by == "eos", tool=reply.tool))
    else:
        text = encode(reply.text)
    if p.episode.turns >= limits.max_turns:
        p.cut = "max_turns"
    elif len(p.ids) + len(text) >= limits.max_tokens:  # no room left for the policy's next turn
        p.cut = "max_tokens"
    else:
        p.add(text, policy=False)
        p.episode.messages.append(("environment", reply.text))


def _scored(
    playing: list[_Playing], rows: list[dict], tokenizer: Any, device: torch.device, seconds: float, kept: dict[int, str]
) -> rollouts.Scored:
    pad = pad_id(tokenizer)
    width, length = max(len(p.prompt) for p in playing), max(1, max(len(p.ids) for p in playing))
    ids = torch.full((len(playing), width + length), pad, dtype=torch.long)
    attention = torch.zeros_like(ids)
    response_mask = torch.zeros((len(playing), length), dtype=torch.bool)
    for i, p in enumerate(playing):
        start, end = width - len(p.prompt), width + len(p.ids)
        ids[i, start:end] = torch.tensor(p.prompt + p.ids, dtype=torch.long)
        attention[i, start:end] = 1
        response_mask[i, : len(p.ids)] = torch.tensor(p.mine, dtype=torch.bool)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    drawn = None  # the engine's log-probs of the policy's tokens, when every turn had them (0 elsewhere)
    if all(p.drawn is not None for p in playing):
        drawn = torch.zeros((len(playing), length), dtype=torch.float32)
        for i, p in enumerate(playing):
            drawn[i, : len(p.ids)] = torch.tensor(p.drawn, dtype=torch.float32)
        drawn = drawn.to(device)
    generation = rollouts.Generation(
        ids.to(device), attention.to(device), positions.to(device), response_mask.to(device), width, drawn
    )
    verdicts = [p.verdict for p in playing]
    names = sorted({name for v in verdicts for name in v.components})
    scores = RewardScores(
        [v.reward for v in verdicts], {name: [float(v.components.get(name, 0.0)) for v in verdicts] for name in names}
    )
    records = [
        EpisodeRecord(p.episode.turns, p.tool_calls, tuple(p.errors), p.cut is not None, p.verdict.reason) for p in playing
    ]
    prompts = [rollouts.prompt_text(row) + p.opening for row, p in zip(rows, playing, strict=True)]
    texts = [policy_text(tokenizer, p.ids, kept) for p in playing]  # the whole episode after the prompt
    cut = [p.prompt_cut for p in playing]
    return rollouts.Scored(generation, prompts, texts, scores, seconds, episodes=records, prompt_cut=cut)


def with_reward(
    scored: rollouts.Scored, reward: Any | None, rows: list[dict], repeat: int = 1, *, observe: bool = False
) -> rollouts.Scored:
    """The episodes of `rows` (`repeat` each) with the reward section's score of each added to the environment's
    reward: it reads the prompt with the environment's opening, the episode's text after it (the policy's turns and
    the environment's answers, as the samples show it) and the row's columns. Its components join the environment's;
    a name both report is an EnvError. `observe` leaves the reward's normaliser as it was."""
    if reward is None:
        return scored
    repeated = [row for row in rows for _ in range(repeat)]
    with rollouts.unchanged(reward) if observe else contextlib.nullcontext():
        added = reward(scored.prompts, scored.responses, [rollouts.metadata(row) for row in repeated])
    if shared := sorted(set(added.components) & set(scored.scores.components)):
        raise EnvError(
            f"reward: its component {shared[0]!r} has the name of one the environment reports; name it otherwise "
            f"(reward: {{kind: sum, terms: [{{name: ..., source: ...}}]}})"
        )
    total = [played + score for played, score in zip(scored.scores.total, added.total, strict=True)]
    return dataclasses.replace(scored, scores=RewardScores(total, {**scored.scores.components, **added.components}))


def step_stats(scored: rollouts.Scored) -> dict[str, float]:
    """This rank's sums over its episodes (the step divides them by the episodes of all ranks): env/turns,
    env/tool_calls, env/errors (answers marked as errors), env/truncated and gen/truncated (cut off by the limits)."""
    records = scored.episodes or []
    truncated = float(sum(r.truncated for r in records))
    return {
        "env/turns": float(sum(r.turns for r in records)),
        "env/tool_calls": float(sum(r.tool_calls for r in records)),
        "env/errors": float(sum(len(r.errors) for r in records)),
        "env/truncated": truncated,
        "gen/truncated": truncated,
    }


def sample_extra(scored: rollouts.Scored) -> dict[str, list[float]]:
    """Per episode, for its sample: turns, tool calls and errors, and truncated (cut off by the limits); nothing for
    single responses."""
    if scored.episodes is None:
        return {}
    return {
        "turns": [r.turns for r in scored.episodes],
        "tool_calls": [r.tool_calls for r in scored.episodes],
        "errors": [len(r.errors) for r in scored.episodes],
        "truncated": [float(r.truncated) for r in scored.episodes],
    }


def sample_turns(
    scored: rollouts.Scored, tokenizer: Any, markers: tuple[str, ...] = ()
) -> list[tuple[tuple[str, str], ...]] | None:
    """Per episode, for its sample: the response region as runs of the policy's and the environment's tokens, each
    decoded (what the policy wrote and read, a chat template's markers included, a tool format's `markers` too, a
    cut-off last turn too); None for single responses. Only the samples pay for it."""
    if scored.episodes is None:
        return None
    g, out, kept = scored.generation, [], marker_ids(tokenizer, markers)
    for i in range(len(scored.episodes)):
        real = g.attention_mask[i, g.prompt_width :].bool()
        ids, mine = g.response_ids[i][real].tolist(), g.response_mask[i][real].tolist()
        spans, start = [], 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or mine[end] != mine[start]:
                text = policy_text(tokenizer, ids[start:end], kept)
                spans.append(("policy" if mine[start] else "environment", text))
                start = end
        out.append(tuple(spans))
    return out


def error_summary(scored: rollouts.Scored, most: int = 5) -> str | None:
    """The commonest error reasons with their counts, as one structured log line; None without errors."""
    reasons = Counter(reason for record in scored.episodes or [] for reason in record.errors)
    if not reasons:
        return None
    shown = "; ".join(f"{reason} (x{count})" for reason, count in reasons.most_common(most))
    return f"env errors={sum(reasons.values())} reasons={shown!r}"


def evaluate(
    run: Any,
    policy: nn.Module,
    rows: list[dict],
    gen: GenSpec,
    environment: Environment,
    limits: EnvironmentSpec,
    plan: rollouts.EvalPlan,
) -> dict[str, float]:
    """`plan.samples` episodes for each of this rank's share of `rows` (greedy turns, or sampled with `gen`), reduced
    over ranks: eval/reward (the environment's, plus run.reward's score when the run has a reward section; its
    normaliser is left as it was) and eval/reward/<component>; eval/success, the share of episodes whose
    environment's reward reaches plan.correct_at (1 when unset: a verifier's pass), and eval/pass@k; eval/turns,
    eval/tool_calls, eval/errors and eval/truncated per episode; eval/length, the policy's tokens per episode;
    eval/prompt_cut, the share of episodes whose prompt (with the opening) lost its start."""
    backend, n = run.backend, plan.samples
    threshold = 1.0 if plan.correct_at is None else plan.correct_at
    keys = ["reward", "success", "length", "turns", "tool_calls", "errors", "truncated", "prompt_cut"]
    sums: dict[str, float] = {key: 0.0 for key in keys} | {f"pass@{k}": 0.0 for k in plan.k}
    episodes = prompts_seen = 0
    for chunk, real in rank_chunks(rows, max(1, plan.batch_size // n), backend):
        played = play(run, policy, chunk, gen, environment, limits, repeat=n, greedy=plan.greedy)
        scored = with_reward(played, run.reward, chunk, n, observe=True)  # a model reward is a collective: stand-ins too
        for name in scored.scores.components:
            sums.setdefault(f"reward/{name}", 0.0)
        if not real:
            continue
        episodes, prompts_seen = episodes + len(chunk) * n, prompts_seen + len(chunk)
        correct = [total >= threshold for total in played.scores.total]  # the environment's verdict alone
        stats = step_stats(scored)
        sums["reward"] += sum(scored.scores.total)
        sums["success"] += sum(correct)
        sums["length"] += float(scored.generation.response_mask.sum())
        sums["prompt_cut"] += sum(scored.prompt_cut)
        for key in ("turns", "tool_calls", "errors", "truncated"):
            sums[key] += stats[f"env/{key}"]
        for name, values in scored.scores.components.items():
            sums[f"reward/{name}"] += sum(values)
        for i in range(len(chunk)):
            c = sum(correct[i * n : (i + 1) * n])
            for k in plan.k:
                sums[f"pass@{k}"] += rollouts.pass_at_k(n, c, k)
    names = sorted(sums)
    totals = backend.all_reduce(
        torch.tensor([sums[k] for k in names] + [episodes, prompts_seen], dtype=torch.float64), "sum"
    ).tolist()
    episodes, prompts_seen = max(totals[-2], 1), max(totals[-1], 1)
    return {
        f"eval/{k}": v / (prompts_seen if k.startswith("pass@") else episodes) for k, v in zip(names, totals[:-2], strict=True)
    }
