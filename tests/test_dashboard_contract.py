"""The dashboard's words for where a run stands are the API's (rlplane.status): read from its source, no npm."""

import re
from pathlib import Path

from rlplane.status import ACTIVE, STATUSES, TERMINAL

RUN_STATUS_TS = Path(__file__).resolve().parent.parent / "frontend" / "src" / "api" / "runStatus.ts"


def _phases() -> dict[str, str]:
    body = re.search(r"const PHASE[^{]*\{(?P<body>[^}]*)\}", RUN_STATUS_TS.read_text())
    assert body, f"{RUN_STATUS_TS} no longer declares `const PHASE: Record<RunStatus, ...> = {{...}}`"
    return dict(re.findall(r"(\w+): '(\w+)'", body["body"]))


def test_the_dashboard_calls_the_same_statuses_active_and_terminal_as_the_api():
    phases = _phases()
    assert list(phases) == list(STATUSES)  # also the order the runs filter lists them in
    assert {s for s, p in phases.items() if p == "active"} == ACTIVE
    assert {s for s, p in phases.items() if p == "terminal"} == TERMINAL
