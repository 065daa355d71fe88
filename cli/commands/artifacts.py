"""`rlplane checkpoints` and `rlplane download`: a run's saved models, fetched and verified."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

from cli import output
from cli.context import JsonFlag, RunArg, fail, handled, state
from rlplane.client import Client, RangeIgnored
from rlplane.layout import MANIFEST
from rlplane.manifest import sha256_file


@handled
def checkpoints(ctx: typer.Context, run_id: RunArg, as_json: JsonFlag = False) -> None:
    """List a run's checkpoints and its final export (kind 'export'), each with its evaluations (`rlplane eval`).

    \b
    Example:
      rlplane checkpoints 12
    """
    page = state(ctx).client().checkpoints(run_id)
    if as_json:
        return output.print_json(page)
    output.table(
        ["STEP", "KIND", "SIZE", "SHA256", "CREATED", "PATH", "EVALUATIONS"],
        (
            [
                c["step"],
                c["kind"],
                output.size(c["size"]),
                c["sha256"][:12],
                output.when(c["created_at"]),
                c["path"],
                "; ".join(_evaluation(e) for e in c.get("evaluations", [])),
            ]
            for c in page["data"]
        ),
    )
    if not page["data"]:
        output.say(f"run {run_id} has no checkpoints yet")


def _evaluation(evaluation: dict) -> str:
    """An eval run of the checkpoint in short: its id and status, or its accuracy, pass@k and reward."""
    shown = {k.removeprefix("eval/"): v for k, v in evaluation["metrics"].items()}
    picked = [k for k in shown if k == "accuracy" or k.startswith("pass@")] or [k for k in shown if k == "reward"]
    if not picked:
        return f"run {evaluation['run_id']} {evaluation['status']}"
    values = " ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in ((k, shown[k]) for k in picked))
    drawn = f" ({evaluation['decoding']})" if evaluation.get("decoding") else ""  # greedy and sampled accuracies differ
    return f"run {evaluation['run_id']}: {values}{drawn}"


def _choose(client: Client, run_id: int, step: int | None, kind: str | None) -> dict:
    """The checkpoint to fetch: the given step, else the run's final export, else its latest checkpoint."""
    saved = client.checkpoints(run_id)["data"]
    wanted = [c for c in saved if (step is None or c["step"] == step) and (kind is None or c["kind"] == kind)]
    if not wanted:
        have = ", ".join(f"{c['kind']}@{c['step']}" for c in saved) or "none yet"
        what = " ".join(filter(None, [kind or "checkpoint", f"at step {step}" if step is not None else ""]))
        raise fail(f"run {run_id} has no {what} (it has: {have})")
    exports = [c for c in wanted if c["kind"] == "export"]
    return max(exports or wanted, key=lambda c: c["step"])


def _fetch(client: Client, ckpt: dict, name: str, size: int, dest: Path, progress: Progress, task: TaskID) -> None:
    """Download one file into dest, continuing the `.part` an interrupted download of this checkpoint left."""
    part = dest.with_name(f"{dest.name}.{ckpt['sha256'][:12]}.part")  # never continue another checkpoint's bytes
    start = part.stat().st_size if part.is_file() and part.stat().st_size <= size else 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    progress.advance(task, start)
    try:
        chunks = client.stream_file(ckpt["run_id"], ckpt["step"], name, kind=ckpt["kind"], start=start)
        with part.open("ab" if start else "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                progress.advance(task, len(chunk))
    except RangeIgnored:  # a server that cannot resume (an object-store root): fetch it whole
        progress.advance(task, -start)
        part.unlink()
        return _fetch(client, ckpt, name, size, dest, progress, task)
    part.replace(dest)
    return None


def _expected_hashes(out: Path, ckpt: dict, names: list[str]) -> dict[str, str]:
    """Every file's sha256 as the record pins it: through the manifest, or the record's own hash for one file."""
    if MANIFEST not in names:
        return {name: ckpt["sha256"] for name in names}
    if sha256_file(out / MANIFEST) != ckpt["sha256"]:
        (out / MANIFEST).unlink()
        raise fail(f"{MANIFEST} does not match the checkpoint's sha256; removed it: run the command again")
    listed = json.loads((out / MANIFEST).read_text())["files"]
    return {MANIFEST: ckpt["sha256"], **{name: entry["sha256"] for name, entry in listed.items()}}


@handled
def download(
    ctx: typer.Context,
    run_id: RunArg,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Directory to write into (default ./run-<id>-<kind>-<step>)")
    ] = None,
    step: Annotated[
        int | None, typer.Option(min=0, help="This step (default: the final export, else the latest checkpoint)")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="checkpoint or export")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Download a checkpoint and check every file's sha256; run it again to continue an interrupted download.

    \b
    Examples:
      rlplane download 12 -o models/sft          # the final model (a Hugging Face directory)
      rlplane download 12 --step 500 --kind checkpoint -o ckpt-500
    """
    if kind not in (None, "checkpoint", "export"):
        raise fail(f"--kind must be checkpoint or export, not {kind!r}", 2)
    client = state(ctx).client()
    ckpt = _choose(client, run_id, step, kind)
    out = out or Path(f"run-{run_id}-{ckpt['kind']}-{ckpt['step']}")
    sizes = {f["name"]: f["size"] for f in client.checkpoint_files(run_id, ckpt["step"], ckpt["kind"])["data"]}
    for name in sizes:  # never write outside the target directory, whatever the server says
        if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
            raise fail(f"refusing file name {name!r} from the server")
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    bad = []
    with Progress(*columns, console=output.stderr, disable=as_json or not output.stderr.is_terminal) as progress:
        task = progress.add_task(f"run {run_id} {ckpt['kind']}@{ckpt['step']}", total=sum(sizes.values()))
        if MANIFEST in sizes:  # first, and always anew: it says what every other file must be
            (out / MANIFEST).unlink(missing_ok=True)
            _fetch(client, ckpt, MANIFEST, sizes[MANIFEST], out / MANIFEST, progress, task)
        expected = _expected_hashes(out, ckpt, list(sizes))
        for name, size in sizes.items():
            dest = out / name
            if name == MANIFEST:
                continue
            if dest.is_file() and dest.stat().st_size == size and sha256_file(dest) == expected.get(name):
                progress.advance(task, size)  # already here from an earlier download
                continue
            _fetch(client, ckpt, name, size, dest, progress, task)
            if sha256_file(dest) != expected.get(name):
                dest.unlink()
                bad.append(name)
    if bad:
        raise fail(f"sha256 mismatch for {', '.join(bad)}; removed them: run the command again to fetch them anew")
    summary = {
        "run_id": run_id,
        "step": ckpt["step"],
        "kind": ckpt["kind"],
        "path": str(out),
        "files": len(sizes),
        "size": sum(sizes.values()),
        "sha256": ckpt["sha256"],
        "verified": True,
    }
    if as_json:
        return output.print_json(summary)
    output.say(
        f"downloaded {ckpt['kind']} of run {run_id} at step {ckpt['step']} to {out} "
        f"({len(sizes)} files, {output.size(summary['size'])}, sha256 verified)"
    )
    return None
