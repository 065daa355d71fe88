"""Where the suite's time goes, by module: printed after `--durations`' slowest tests at the end of `make test`.

The suite's budget is one number (25 minutes for the whole `.ci/run` on 2 cores) and CI keeps only its output, so
that output says which modules spent it: each module's setup, call and teardown seconds summed over its tests (on
the worker that ran them; two workers run side by side, so the sum over modules is about twice the wall time).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

SHOWN = 15
_seconds: defaultdict[str, float] = defaultdict(float)
_tests: defaultdict[str, set[str]] = defaultdict(set)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _seconds[module] += report.duration
    _tests[module].add(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _seconds:
        return
    total = sum(_seconds.values())
    terminalreporter.write_sep("=", f"modules by their tests' seconds (all {total:.0f} s; {SHOWN} shown)")
    for module, seconds in sorted(_seconds.items(), key=lambda item: -item[1])[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {len(_tests[module]):4d} tests  {module}")
