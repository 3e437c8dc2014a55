"""Prints the hostile-corpus summary table (tests/hostile/hostile_report.py) after the run."""
from __future__ import annotations

import pytest
from hostile_report import ROWS, table


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if ROWS:
        terminalreporter.section("hostile corpus")
        for line in table(ROWS):
            terminalreporter.write_line(line)
