"""A run that writes a dataset with its model: Constitutional AI's data (Bai et al. 2022, "Constitutional AI:
Harmlessness from AI Feedback", arXiv:2212.08073). A later run, or a later stage of a pipeline, reads it with
`data.source: run:<id>` (`stage:<name>`).

    critique_revise   the supervised stage: the model answers each prompt, then critiques its answer against a
                      principle drawn from generate.principles and revises it, generate.revisions times; the rows
                      are sft rows (prompt, the last revision), with the first answer and each critique kept beside
    ai_feedback       RL from AI feedback: the model answers each prompt twice, and generate.feedback_model (or the
                      model itself) chooses the answer that better follows a drawn principle, by its next-token
                      probabilities of A and B, averaged over both orders of the two answers (against position
                      bias); the rows are preference rows for a reward model, identical answer pairs dropped

Every draw is seeded by the run's seed and what it draws (answers, critiques, revisions; the principle of each
prompt and round), so a run repeated writes the same rows. The dataset is written once, at the end, to
OUT/final/data.jsonl with a manifest (registered as the run's export) and reported as step 1: data/rows and what
the kind measures (revisions that changed the answer; how often both orders agree).
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlplane.manifest import manifest_digest_and_size, write_manifest
from rlplane.spec import RunSpec
from rlplane.spec.generate import GENERATED_FILE, GenerateOptions
from trainer_core.backends import Backend
from trainer_core.checkpoint.files import fsync_tree
from trainer_core.data import load_examples
from trainer_core.data.tokenize import pad_id
from trainer_core.models import load_from_spec
from trainer_core.models.from_spec import context_length
from trainer_core.recipes import common, steering
from trainer_core.reporting import CheckpointEvent, Reporter, Sample
from trainer_core.rollout import draws, rollouts


@dataclass
class GenerateRun:
    spec: RunSpec
    backend: Backend
    reporter: Reporter
    tokenizer: Any
    policy: nn.Module
    judge: tuple[nn.Module, Any, int] | None  # ai_feedback's feedback model, its tokenizer and context length
    rows: list[dict]  # prompt rows
    out_dir: Path

    @property
    def options(self) -> GenerateOptions:
        assert self.spec.generate is not None  # RunSpec requires the section for this algorithm
        return self.spec.generate


def setup(spec: RunSpec, out_dir: Path, *, stdout: bool = True) -> GenerateRun:
    options, seed = spec.generate, spec.train.seed
    assert options is not None
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        policy, tokenizer = load_from_spec(spec.model, "causal", seed=seed)
        spec = common.fit_context(spec, policy)
        policy = backend.prepare_frozen(policy)
        judge = None
        if options.kind == "ai_feedback":
            if options.feedback_model is not None:
                model, judge_tokenizer = load_from_spec(options.feedback_model, "causal", seed=seed)
                judge = (backend.prepare_frozen(model), judge_tokenizer, context_length(options.feedback_model, model))
            else:
                judge = (policy, tokenizer, spec.model.max_seq_len)
        split = load_examples(spec.data, "prompts", seed=seed)
        rows = [*split.train, *split.eval][: options.max_prompts]
        reporter.log(f"generate ({options.kind}): {len(rows)} prompts, {len(options.principles)} principles")
    return GenerateRun(spec, backend, reporter, tokenizer, policy, judge, rows, out_dir)


# --- drawing text ---


def complete(run: GenerateRun, texts: list[str], *draw: object) -> list[str]:
    """The model's continuation of each text (sampled with generate.gen, seeded by the run and `draw`)."""
    gen = run.options.gen
    prompts = rollouts.encode_prompts([{"prompt": t} for t in texts], run.tokenizer, rollouts.prompt_budget(run.spec, gen))
    with draws.seeded(draws.seed_of(run.spec.train.seed, "generate", *draw)):
        generation = rollouts.generate(run.policy, prompts, run.tokenizer, gen, run.backend)
    return rollouts.decode(run.tokenizer, generation)


def principle(run: GenerateRun, index: int, round_: int) -> str:
    """The principle prompt `index` is held to in round `round_`: drawn from the constitution, seeded."""
    return random.Random(f"{run.spec.train.seed}:principle:{index}:{round_}").choice(run.options.principles)


def critique_revise(run: GenerateRun, prompts: list[str]) -> tuple[list[dict], dict[str, float]]:
    """sft rows of the last revisions, and data/revised (the share of rows whose revision differs from the answer)."""
    options = run.options
    first = complete(run, prompts, "answer")
    answers, history = list(first), [[] for _ in prompts]
    for round_ in range(options.revisions):
        drawn = [principle(run, i, round_) for i in range(len(prompts))]
        asks = [
            options.critique_template.format(prompt=p, response=a, principle=q)
            for p, a, q in zip(prompts, answers, drawn, strict=True)
        ]
        critiques = complete(run, asks, "critique", round_)
        asks = [
            options.revision_template.format(prompt=p, response=a, principle=q, critique=c)
            for p, a, q, c in zip(prompts, answers, drawn, critiques, strict=True)
        ]
        answers = complete(run, asks, "revision", round_)
        for i, (q, c, r) in enumerate(zip(drawn, critiques, answers, strict=True)):
            history[i].append({"principle": q, "critique": c, "revision": r})
    rows = [
        _with_answer(row, answer) | {"first_response": answer0, "critiques": steps}
        for row, answer, answer0, steps in zip(run.rows, answers, first, history, strict=True)
    ]
    revised = sum(a.strip() != b.strip() for a, b in zip(answers, first, strict=True)) / max(1, len(rows))
    return rows, {"data/revised": revised}


def _with_answer(row: dict, answer: str) -> dict:
    """An sft row of a prompt row and its answer: prompt and completion, or a conversation with the answer last."""
    prompt = row["prompt"]
    if isinstance(prompt, list):
        return {"messages": [*prompt, {"role": "assistant", "content": answer}]}
    return {"prompt": prompt, "completion": answer}


def ai_feedback(run: GenerateRun, prompts: list[str]) -> tuple[list[dict], dict[str, float]]:
    """Preference rows ranked by the feedback model; data/agreement (both orders chose the same answer),
    data/preference (the mean probability of the chosen side) and data/identical (pairs dropped: the same answer)."""
    first, second = complete(run, prompts, "first"), complete(run, prompts, "second")
    drawn = [principle(run, i, 0) for i in range(len(prompts))]
    template = run.options.comparison_template
    ab = [
        template.format(prompt=p, principle=q, first=a, second=b)
        for p, q, a, b in zip(prompts, drawn, first, second, strict=True)
    ]
    ba = [
        template.format(prompt=p, principle=q, first=b, second=a)
        for p, q, a, b in zip(prompts, drawn, first, second, strict=True)
    ]
    p_ab, p_ba = choice_of_a(run, ab), choice_of_a(run, ba)
    rows, agree, kept = [], 0, []
    for i, row in enumerate(run.rows):
        if first[i].strip() == second[i].strip():
            continue
        p_first = (p_ab[i] + (1 - p_ba[i])) / 2  # the first answer's probability of being the better, in both orders
        agree += (p_ab[i] >= 0.5) == (p_ba[i] < 0.5)
        chosen, rejected = (first[i], second[i]) if p_first >= 0.5 else (second[i], first[i])
        kept.append(max(p_first, 1 - p_first))
        pair = {"prompt": row["prompt"], "chosen": chosen, "rejected": rejected}
        rows.append(pair | {"preference": kept[-1], "principle": drawn[i]})
    values = {
        "data/agreement": agree / max(1, len(rows)),
        "data/preference": sum(kept) / max(1, len(kept)),
        "data/identical": float(len(run.rows) - len(rows)),
    }
    return rows, values


@torch.no_grad()
def choice_of_a(run: GenerateRun, texts: list[str]) -> list[float]:
    """The feedback model's probability of A against B as the next token of each text (cut from the left to its
    context), in batches of train.micro_batch_size."""
    assert run.judge is not None
    model, tokenizer, length = run.judge
    a, b = (tokenizer(letter, add_special_tokens=False)["input_ids"][-1] for letter in ("A", "B"))
    out: list[float] = []
    for start in range(0, len(texts), run.spec.micro_batch_size):
        ids = [tokenizer(t)["input_ids"][-length:] for t in texts[start : start + run.spec.micro_batch_size]]
        width = max(len(i) for i in ids)
        batch = torch.tensor([[pad_id(tokenizer)] * (width - len(i)) + i for i in ids], device=run.backend.device)
        mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids], device=run.backend.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with run.backend.autocast():
            logits = model(input_ids=batch, attention_mask=mask, position_ids=positions).logits[:, -1].float()
        out += torch.softmax(logits[:, [a, b]], dim=-1)[:, 0].tolist()
    return out


# --- writing it ---


def write_dataset(run: GenerateRun, rows: list[dict]) -> CheckpointEvent:
    """OUT/final/data.jsonl with a manifest, written whole or not at all (a temporary sibling renamed)."""
    final = run.out_dir / "final"
    tmp = run.out_dir / f".final.tmp-{secrets.token_hex(4)}"
    tmp.mkdir(parents=True)
    try:
        (tmp / GENERATED_FILE).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        fsync_tree(tmp)
        write_manifest(tmp, 1)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sha256, size = manifest_digest_and_size(final)
    rows_kind = run.options.rows
    return CheckpointEvent(
        step=1, path=final.name, size=size, sha256=sha256, metadata={"kind": "export", "format": "jsonl", "rows": rows_kind}
    )


def _samples(run: GenerateRun, rows: list[dict]) -> list[Sample]:
    shown = []
    for row in rows[: run.options.samples_to_log]:
        prompt = (
            rollouts.prompt_text({"prompt": row["prompt"]})
            if "prompt" in row
            else rollouts.prompt_text({"prompt": row["messages"][:-1]})
        )
        if "chosen" in row:
            score = {"preference": float(row["preference"])}
            shown.append(Sample(prompt=prompt, response=row["chosen"], scores=score, label="chosen"))
            shown.append(Sample(prompt=prompt, response=row["rejected"], scores=score, label="rejected"))
            continue
        revision = row.get("completion") or row["messages"][-1]["content"]
        shown.append(Sample(prompt=prompt, response=row["first_response"], label="answer"))
        shown.append(Sample(prompt=prompt, response=revision, label="revision", reference=row["critiques"][-1]["critique"]))
    return shown


def run_generate(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> GenerateRun:
    """setup, generate, write, report; the reporter and backend are closed whatever happens. A resumed run starts
    again (its draws are seeded: it writes the same rows)."""
    run = setup(spec, out_dir)
    return common.drive_one_step(run, lambda: _written(run))


def _written(run: GenerateRun) -> None:
    run.reporter.status("running", f"writing {run.options.kind} rows")
    # what the model answers: each prompt, carrying the attribute values asked of a SteerLM model where given
    prompts = [rollouts.prompt_text(row) for row in steering.steered(run.rows, run.options.attributes)]
    make = critique_revise if run.options.kind == "critique_revise" else ai_feedback
    with common.evaluating(run.policy, run.backend):
        rows, values = make(run, prompts)
    event = write_dataset(run, rows)
    run.reporter.samples(1, _samples(run, rows))
    run.reporter.metrics(1, {"data/rows": float(len(rows)), "data/prompts": float(len(run.rows)), **values})
    run.reporter.checkpoint(event)
    run.reporter.log(f"wrote {len(rows)} {run.options.rows} rows to {run.out_dir / 'final' / GENERATED_FILE}")


run = run_generate  # the name trainer_core.cli calls every recipe by
