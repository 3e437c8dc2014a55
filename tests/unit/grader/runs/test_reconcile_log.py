"""The reconciler's log lines carry their time (grader.runs.reconcile_log): `grader reconcile
--loop` and `grader dev`'s reconciler thread both set it up."""
from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from datetime import datetime

import pytest

from grader.runs.reconcile_log import RECONCILER_LOGGERS, TIME_FORMAT, log_reconciler


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    before = {name: list(logging.getLogger(name).handlers) for name in RECONCILER_LOGGERS}
    levels = {name: logging.getLogger(name).level for name in RECONCILER_LOGGERS}
    yield out
    for name in RECONCILER_LOGGERS:  # the handlers the test added go, so other tests' lines don't land here
        logger = logging.getLogger(name)
        logger.handlers[:] = before[name]
        logger.setLevel(levels[name])


def test_a_resend_line_starts_with_its_time_level_and_logger(stream: io.StringIO) -> None:
    log_reconciler(stream)
    log_reconciler(stream)  # a second start adds no second handler
    logging.getLogger("grader.runs.reconcile").info("run %s sent to the front of its queue: %s", 7, "its worker died")
    (line,) = stream.getvalue().splitlines()
    found = re.fullmatch(r"(\S+) INFO grader\.runs\.reconcile: run 7 sent to the front of its queue: its worker died",
                         line)
    assert found, line
    stamp = datetime.strptime(found.group(1), TIME_FORMAT)
    assert stamp.tzinfo is not None, "the time names its offset"
    assert abs((datetime.now(stamp.tzinfo) - stamp).total_seconds()) < 60


def test_every_reconciler_logger_is_timed_and_shows_info(stream: io.StringIO) -> None:
    log_reconciler(stream)
    for name in RECONCILER_LOGGERS:
        logging.getLogger(name).info("a line of %s", name)
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [f"INFO {name}: a line of {name}" for name in RECONCILER_LOGGERS]
