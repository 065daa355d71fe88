"""Sinks for local use: JSONL files in the run directory, a line per step on stdout, Weights & Biases."""

import sys
from pathlib import Path
from typing import IO, Any

import orjson

from rlplane.layout import claimed_by_another
from rlplane.reporting.events import Batch, checkpoint_record, log_record, metric_record, sample_record


class JsonlSink:
    """Appends to metrics.jsonl, logs.jsonl, samples.jsonl and events.jsonl (checkpoints, status) in `out_dir`.

    With an `attempt` (a worker started this process as one attempt of the run), a batch is written only while that
    attempt owns the directory (rlplane.layout.ATTEMPT_FILE): once the control plane has given the run to another
    attempt, the one that goes on (its worker silent) adds nothing to what the new one reports. Said once, on stderr."""

    def __init__(self, out_dir: Path | str, attempt: int | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.attempt = attempt
        self._files: dict[str, IO[bytes]] = {}
        self._fenced = False

    def write(self, batch: Batch) -> None:
        if claimed_by_another(self.out_dir, self.attempt) is not None:
            if not self._fenced:
                self._fenced = True
                print(f"attempt {self.attempt} was ended: another attempt owns {self.out_dir}; reports dropped", file=sys.stderr)
            return
        self._append("metrics", (metric_record(p) for p in batch.metrics))
        self._append("logs", (log_record(line) for line in batch.logs))
        self._append("samples", ({**sample_record(s), "time": s.time} for s in batch.samples))
        events = [{"type": "checkpoint", **checkpoint_record(c)} for c in batch.checkpoints]
        events += [
            {"type": "status", "status": s.status, "reason": s.reason, "last_step": s.last_step, "time": s.time}
            for s in batch.statuses
        ]
        self._append("events", events)
        for file in self._files.values():
            file.flush()

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        self._files.clear()

    def _append(self, name: str, records) -> None:
        lines = b"".join(orjson.dumps(record) + b"\n" for record in records)
        if lines:
            if name not in self._files:
                self._files[name] = open(self.out_dir / f"{name}.jsonl", "ab")  # kept open across batches
            self._files[name].write(lines)


class StdoutSink:
    """One compact line per step (every `every` steps): `step 12 | train/loss 1.234 | train/lr 3e-05`,
    and the trainer's log lines as they are (a worker forwards stdout as the run's logs)."""

    def __init__(self, every: int = 1, stream: IO[str] | None = None) -> None:
        if every < 1:
            raise ValueError(f"StdoutSink every={every}: must be 1 or more")
        self.every = every
        self._stream = stream

    def write(self, batch: Batch) -> None:
        out = self._stream or sys.stdout  # looked up late so redirected stdout (pytest's capsys) is honoured
        for line in batch.logs:
            print(line.text, file=out)
        for step, values in batch.metrics_by_step().items():
            if step % self.every == 0:
                print(" | ".join([f"step {step}", *(f"{key} {value:.4g}" for key, value in values.items())]), file=out)
        for event in batch.checkpoints:
            print(f"checkpoint step {event.step} | {event.path}", file=out)
        for event in batch.statuses:
            print(f"status {event.status}" + (f" | {event.reason}" if event.reason else ""), file=out)
        out.flush()

    def close(self) -> None:
        pass


class WandbSink:
    """Weights & Biases (offline by default: `wandb sync` uploads later). Needs `pip install wandb`."""

    def __init__(self, project: str, run_name: str, mode: str = "offline", dir: Path | str | None = None) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError("WandbSink needs the wandb package: pip install wandb") from exc
        self._wandb = wandb
        self._run = wandb.init(project=project, name=run_name, mode=mode, dir=str(dir) if dir else None)
        self._failed = False

    def write(self, batch: Batch) -> None:
        logged: dict[int, dict[str, Any]] = batch.metrics_by_step()
        for item in batch.samples:
            logged.setdefault(item.step, {}).setdefault("samples", []).append(item)
        for step, values in sorted(logged.items()):
            if "samples" in values:
                values["samples"] = self._table(values["samples"])
            self._run.log(values, step=step)
        self._failed = self._failed or any(s.status in ("failed", "lost") for s in batch.statuses)

    def close(self) -> None:
        self._run.finish(exit_code=1 if self._failed else 0)

    def _table(self, items: list) -> Any:
        table = self._wandb.Table(columns=["index", "prompt", "response", "reward", "kl"])
        for item in items:
            table.add_data(item.index, item.sample.prompt, item.sample.response, item.sample.reward, item.sample.kl)
        return table
