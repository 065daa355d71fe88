"""`rlplane eval MODEL`: score a checkpoint's answers with a reward or verifier, as an eval run (docs/evaluation.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli import output
from cli.commands.runs import Name, Sets, _invalid, send
from cli.context import JsonFlag, handled, state
from cli.submission import prepare
from rlplane.spec.algorithms import ALGORITHM_SECTIONS, ONLINE_ALGORITHMS
from rlplane.spec.base import parse_run_ref

if TYPE_CHECKING:
    from rlplane.spec import RunSpec


def reward_section(text: str) -> dict[str, Any]:
    """--reward in short: builtin:<name>, model:<path or run:<id>>, python:<module:function>, or run:<id>[@step]."""
    kind, _, rest = text.partition(":")
    if kind == "builtin" and rest:
        return {"kind": "builtin", "name": rest}
    if kind == "model" and rest:
        return {"kind": "model", "path": rest}
    if kind == "python" and rest:
        return {"kind": "python", "entrypoint": rest}
    if parse_run_ref(text):
        return {"kind": "model", "path": text}
    raise _invalid(
        [
            {
                "loc": ["reward"],
                "msg": f"--reward {text!r}: use builtin:<name>, model:<path or run:<id>>, python:<module:function> "
                "or run:<id> (a reward model run)",
            }
        ]
    )


def eval_spec(model: str, source: RunSpec | None, **given: Any) -> dict[str, Any]:
    """The eval run's spec: what was given, the rest from the source run's spec (data, reward, environment, context,
    response length, project, resources) when MODEL is one of its checkpoints."""
    options = {k: v for k, v in given["eval"].items() if v is not None}
    gen = {k: v for k, v in options.pop("gen").items() if v is not None}
    online = getattr(source, ALGORITHM_SECTIONS[source.algorithm]) if source and source.algorithm in ONLINE_ALGORITHMS else None
    if online is not None:
        gen = {**online.gen.model_dump(mode="json", exclude_unset=True), **gen}
        if getattr(online, "environment", None) is not None:  # a run that played episodes: its evaluation plays them too
            options.setdefault("environment", online.environment.model_dump(mode="json", exclude_unset=True))
    model_section = {"path": model}
    if source and source.model and source.model.max_seq_len:
        model_section["max_seq_len"] = source.model.max_seq_len
    name = given["name"] or (f"eval-{source.name}" if source else "eval")
    inherited = source.model_dump(mode="json", include={"data", "reward"}, exclude_unset=True) if source else {}
    out: dict[str, Any] = {
        "name": name[:128],
        "project": given["project"] or (source.project if source else "default"),
        "algorithm": "eval",
        "model": model_section,
        "data": {"source": given["data"]} if given["data"] else inherited.get("data"),
        "reward": reward_section(given["reward"]) if given["reward"] else inherited.get("reward"),
        "eval": {**options, **({"gen": gen} if gen else {})},
    }
    if source:
        out["resources"] = source.resources.model_dump(mode="json", exclude_unset=True)
        out["tags"] = ["eval"]
    problems = []
    if out["data"] is None:
        problems.append({"loc": ["data"], "msg": "no data: pass --data <source> (a file, dataset:<id> or builtin:<name>)"})
    if out["reward"] is None and "environment" not in options:
        why = f"run {source.name} has no reward to reuse" if source else "MODEL is not a run"
        problems.append(
            {"loc": ["reward"], "msg": f"{why}: pass --reward builtin:<name> | model:<path> | python:<module:function>"}
        )
    if problems:
        raise _invalid(problems)
    return out


@handled
def evaluate(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Argument(metavar="MODEL", help="run:<id>@<step> (a checkpoint), run:<id> (its output), or a path")
    ],
    data: Annotated[str | None, typer.Option(help="Prompts (default: the run's own data)")] = None,
    reward: Annotated[
        str | None, typer.Option(help="builtin:<name>, model:<path>, python:<module:function> (default: the run's reward)")
    ] = None,
    samples: Annotated[int | None, typer.Option(min=1, help="Answers per prompt (n of pass@k; default 1)")] = None,
    k: Annotated[str | None, typer.Option("--k", help="pass@k for each k, comma-separated (default 1)")] = None,
    greedy: Annotated[bool, typer.Option("--greedy", help="One greedy answer per prompt")] = False,
    correct_at: Annotated[
        float | None, typer.Option(help="An answer is correct when its reward reaches this (default 1)")
    ] = None,
    split: Annotated[str | None, typer.Option(help="eval: the held-out prompts (default); all: every prompt")] = None,
    max_prompts: Annotated[int | None, typer.Option(min=1, help="Only the first N prompts")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(min=1, help="Longest answer (default: the run's)")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (default: the run's, else 1)")] = None,
    project: Annotated[str | None, typer.Option(help="Project of the eval run (default: the run's)")] = None,
    sets: Sets = None,
    name: Name = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the result and print it; exit 0 succeeded, 1 failed, 2 cancelled")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Evaluate a checkpoint: answers to prompts, judged by a reward or verifier (eval/accuracy, eval/pass@k,
    eval/reward, eval/length), as an eval run; prints its id. A run that played episodes (grpo or ppo .environment)
    is evaluated on episodes of its environment (eval/success, eval/turns, ...; --reward adds its score). The result
    shows beside the checkpoint on its run's Checkpoints tab and in `rlplane checkpoints RUN`.

    \b
    Examples:
      rlplane eval run:12@100 --samples 8 --k 1,4,8 --wait      # the run's own held-out prompts and reward
      rlplane eval run:12 --data heldout.jsonl --reward python:my_rewards:exact_match --greedy
    """
    ks = None
    if k is not None:
        try:
            ks = [int(part) for part in k.split(",") if part.strip()]
        except ValueError:
            raise _invalid([{"loc": ["eval", "k"], "msg": f"--k {k!r}: comma-separated whole numbers, e.g. 1,4,8"}]) from None
    ref = parse_run_ref(model)
    source = state(ctx).client().run(ref[0])["spec"] if ref else None
    from rlplane.spec import SpecError, parse_spec

    if source is not None:
        try:
            source = parse_spec(source)  # the contract's RunSpec, as the API answers it (RunDetail.spec)
        except SpecError as exc:
            raise _invalid([{**e, "msg": f"run {ref[0]}'s spec: {e['msg']}"} for e in exc.errors]) from None
    options = {
        "samples": samples,
        "k": ks,
        "greedy": greedy or None,
        "correct_at": correct_at,
        "split": split,
        "max_prompts": max_prompts,
        "gen": {"max_new_tokens": max_new_tokens, "temperature": temperature},
    }
    spec = eval_spec(model, source, name=name, project=project, data=data, reward=reward, eval=options)
    try:
        submission = prepare(None, spec, sets, None)
    except SpecError as exc:
        raise _invalid(exc.errors) from None
    client, run = send(ctx, submission)
    if not wait:
        output.print_json(run) if as_json else typer.echo(run["id"])
        return
    from cli.follow import exit_code, wait_for

    final = wait_for(client, run, logs=False)
    run_id = run["id"]
    keys = [key["key"] for key in client.metric_keys(run_id)["data"] if key["key"].startswith("eval/")]
    values = {s["key"]: s["points"][-1]["value"] for s in client.metrics(run_id, keys)["series"] if s["points"]} if keys else {}
    if as_json:
        output.print_json({"run": final, "metrics": values})
    else:
        typer.echo(run_id)
        rows = [[key, _shown(value)] for key, value in sorted(values.items())]
        if (final.get("config") or {}).get("decoding"):  # how the answers were drawn: greedy and sampled differ
            rows.append(["decoding", final["config"]["decoding"]])
        output.table(["METRIC", "VALUE"], rows)
    raise typer.Exit(exit_code(final))


def _shown(value: float | str) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
