"""Where the service's own processes' log lines go, with their time: the reconciler's (`grader
reconcile --loop`, its own process, and the reconciler thread of `grader dev`), the GPU workers'
supervisor's (`grader worker --gpus`) and the Slurm scaler's (`grader scale slurm`).

Its lines say which runs it sent again and why; read beside a worker's log or the runs' times
they only help with a timestamp, and neither process configured logging before (a warning came
out bare, an info line not at all).
"""
from __future__ import annotations

import logging
import sys
from typing import TextIO

LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"  # local time with its offset: unambiguous beside other logs

# The reconciler's loggers: its passes, the sends (a broker that refuses one), the loop's collector.
RECONCILER_LOGGERS = ("grader.runs.reconcile", "grader.runs.dispatch", "grader.reconciler")


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler this module added, so a second call adds none."""


def line_formatter() -> logging.Formatter:
    return logging.Formatter(LINE_FORMAT, datefmt=TIME_FORMAT)


def log_lines(names: tuple[str, ...], stream: TextIO | None = None) -> None:
    """Send the loggers `names`' lines (info and above) to `stream` (stderr) with their time.
    Idempotent: `grader dev` may start its reconciler thread more than once in a process (tests)."""
    for name in names:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        if not any(isinstance(handler, _Handler) for handler in logger.handlers):
            handler = _Handler(stream or sys.stderr)
            handler.setFormatter(line_formatter())
            logger.addHandler(handler)


def log_reconciler(stream: TextIO | None = None) -> None:
    log_lines(RECONCILER_LOGGERS, stream)
