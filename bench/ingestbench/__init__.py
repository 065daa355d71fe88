"""The parts of bench/ingest.py, the rlplane-against-MLflow benchmark; here, what they all share: the repo root and the log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
