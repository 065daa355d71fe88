"""The trainer's command line: `python -m trainer_core run SPEC.yaml [--set k=v ...] [--out DIR] [--resume DIR]`.

Bad input (the spec, the data, the model, batch sizes, a checkpoint) ends with one paragraph on
stderr and exit status 2; a run that diverged (train.on_nonfinite) says where in one line and exits 3; a rollout
engine's process that died under the run (asynchronous GRPO's generator) is said with its last lines, exit 5 (the
worker retries the attempt); anything unexpected prints its traceback and exits 1. Torch is imported
only inside `run`, so `--help` and spec errors stay fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from rlplane.spec import RunSpec, SpecError, apply_overrides, load_spec_file, parse_spec
from rlplane.spec.algorithms import ENTRIES
from rlplane.status import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_ENGINE_LOST, EXIT_FENCED, EXIT_HANDED_BACK
from trainer_core.data import DataError
from trainer_core.failures import EngineLost
from trainer_core.launch import prefix_rank_output, relaunch, under_a_launcher
from trainer_core.recipes.divergence import Diverged

EXAMPLES = """\
examples:
  python -m trainer_core run examples/sft.yaml --out runs/sft
  python -m trainer_core run examples/sft.yaml --set train.steps=20 --set train.lr=1e-3
  python -m trainer_core run examples/sft.yaml --resume runs/sft      # continue from its latest checkpoint
"""


class BadInput(Exception):
    """A problem the user fixes by changing the command, the spec or the files it names."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer_core", description="rlplane trainer.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="train a run spec",
        description="Train the run a spec describes: reports to OUT/metrics.jsonl, checkpoints under "
        "OUT/checkpoints/, exports the final model to OUT/final/.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("spec", nargs="?", type=Path, help="run spec (.yaml or .json); optional with --resume")
    run.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field, e.g. train.lr=3e-5 (repeatable)",
    )
    run.add_argument("--out", type=Path, help="run directory (default: the resumed run's, else runs/<name>)")
    run.add_argument("--resume", type=Path, metavar="DIR", help="an OUT directory or a checkpoint directory to continue from")
    run.add_argument(
        "--stop-at", type=int, metavar="STEP", help="stop after this step with a checkpoint, as a preempted run would"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    prefix_rank_output()
    # Hugging Face's progress bars (writing shards, loading checkpoints) redraw one line with "\r": in a run's
    # log they are noise, and the trainer's own step lines say how far it is. Set before transformers loads.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return run(args, argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return _leave_if_a_rank(130)
    except (BadInput, SpecError, DataError) as exc:
        return _leave_if_a_rank(_bad_input(exc))
    except Exception as exc:
        if isinstance(exc, Diverged):  # the run went NaN/inf: said in one line, no traceback
            print(f"error: {exc}", file=sys.stderr)
            return _leave_if_a_rank(EXIT_DIVERGED)
        if isinstance(exc, EngineLost):  # a rollout engine's process died: the attempt is lost, not the run failed
            print(f"error (rollout engine lost): {exc}", file=sys.stderr)
            return _leave_if_a_rank(EXIT_ENGINE_LOST)
        if _is_fenced(exc):  # not an error of the run: another attempt of it owns the run directory
            print(f"stopped: {exc}", file=sys.stderr)
            return _leave_if_a_rank(EXIT_FENCED)
        if _is_bad_input(exc):
            return _leave_if_a_rank(_bad_input(exc))
        traceback.print_exc()
        return _leave_if_a_rank(1)


def _leave_if_a_rank(code: int) -> int:
    """One of several ranks exits here, before Python tears the run down: freeing torch's gloo process
    group can deadlock when its worker thread still frees a finished collective (that thread waits for
    the GIL the freeing thread holds); seen as a 2-process DPO run that never exited. Everything the run
    writes is closed and flushed by the time the recipe returns or raises."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def run(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    resume_from = _resume_point(args.resume) if args.resume is not None else None
    spec = _spec(args, resume_from)
    if spec.command is not None:
        raise BadInput(
            "algorithm command is your own script, which this trainer does not run: run the script itself (the SDK "
            "reports it to a run of its own, docs/sdk.md) or submit it to a worker: rlplane submit SPEC --code DIR"
        )
    out_dir = args.out or (_out_of(resume_from) if resume_from else None) or Path("runs") / spec.name
    if resume_from is None and (out_dir / "checkpoints").is_dir() and any((out_dir / "checkpoints").iterdir()):
        raise BadInput(
            f"{out_dir} already holds checkpoints: pass --resume {out_dir} to continue that run, or choose another --out."
        )
    if args.stop_at is not None and args.stop_at < 1:
        raise BadInput(f"--stop-at must be a step >= 1, got {args.stop_at}.")
    if spec.resources.gpus == 0 and spec.world_size > 1 and not under_a_launcher() and argv is not None:
        # A CPU spec that asks for several ranks, started as one process: start them (a multi-node spec's
        # whole world, here on this machine; a worker gang starts each node's share itself).
        print(f"starting {spec.world_size} processes with torchrun", file=sys.stderr)
        return relaunch(spec.world_size, argv)

    import importlib  # torch from here on

    # One module per algorithm, each with run(spec, out_dir, resume_from, stop_at=...).
    from trainer_core.recipes import run_dir_signals

    run_dir_signals.handle_sigterm()  # a hand-back: checkpoint after the current step, then leave
    recipe = importlib.import_module(f"trainer_core.recipes.{ENTRIES[spec.algorithm].recipe}")
    finished = recipe.run(spec, out_dir, resume_from, stop_at=args.stop_at)  # noqa: F841  (alive until the exit below)
    if run_dir_signals.handed_back:
        print(f"stopped: handed back after a checkpoint (exit {EXIT_HANDED_BACK}); resume it with --resume", file=sys.stderr)
        return _leave_if_a_rank(EXIT_HANDED_BACK)
    return _leave_if_a_rank(0)


def _spec(args: argparse.Namespace, resume_from: Path | None) -> RunSpec:
    if args.spec is not None:
        return load_spec_file(args.spec, args.sets)
    if resume_from is None:
        raise BadInput("give a run spec (python -m trainer_core run SPEC.yaml), or --resume DIR to continue a run.")
    data = json.loads((resume_from / "trainer_state.json").read_text())["spec"]
    return parse_spec(apply_overrides(data, args.sets) if args.sets else data)


def _resume_point(path: Path) -> Path:
    """The checkpoint to continue from: `path` itself, or the latest under path/checkpoints or path."""
    from trainer_core.checkpoint import latest_checkpoint

    if not path.is_dir():
        raise BadInput(f"--resume {path}: no such directory.")
    if (path / "trainer_state.json").is_file():
        return path
    found = latest_checkpoint(path / "checkpoints") or latest_checkpoint(path)
    if found is None:
        raise BadInput(f"--resume {path}: no complete checkpoint in {path} or {path / 'checkpoints'}.")
    return found


def _out_of(checkpoint: Path) -> Path | None:
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def _is_fenced(exc: Exception) -> bool:
    from trainer_core.checkpoint.fence import Fenced

    return isinstance(exc, Fenced)


def _is_bad_input(exc: Exception) -> bool:
    from trainer_core.backends import BackendError, BatchSplitError
    from trainer_core.checkpoint import CheckpointError
    from trainer_core.models import ModelError

    if isinstance(exc, NotImplementedError) and "backend.kind" in str(exc):
        return True
    return isinstance(exc, BackendError | BatchSplitError | CheckpointError | ModelError)


def _bad_input(exc: Exception) -> int:
    what = {
        "SpecError": "invalid spec",
        "DataError": "bad data",
        "ModelError": "bad model",
        "BatchSplitError": "bad batch sizes",
        "BackendError": "bad backend",
        "CheckpointError": "bad checkpoint",
        "RewardError": "bad reward",
    }.get(type(exc).__name__, "error")
    print(f"error ({what}): {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT
