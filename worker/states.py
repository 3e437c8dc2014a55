"""Run states and error classes: plain enums with no dependencies, the pipeline's vocabulary for
how a run ended (it also runs on the bare GPU machine); the service stores them on its rows."""
from __future__ import annotations

import enum


class RunState(str, enum.Enum):
    queued = "queued"
    building = "building"
    running = "running"
    # the checks piece ended: correctness verdicts and points are recorded, the timing piece waits
    # for the GPU (worker.pipeline's two pieces)
    checked = "checked"
    timing = "timing"  # the timing piece holds the GPU alone
    built = "built"  # final while no GPU stage exists on this worker: build done, not graded
    scored = "scored"
    failed = "failed"


FINAL_STATES = frozenset({RunState.built, RunState.scored, RunState.failed})
ACTIVE_STATES = (RunState.building, RunState.running, RunState.timing)
# a run waiting for its turn: the whole grade or its checks (queued), or its timing (checked)
WAITING_STATES = (RunState.queued, RunState.checked)


class Piece(str, enum.Enum):
    """Which part of a grade one task does. `whole`: unpack to score in one go. With the split,
    `checks` (build, every correctness case, Problem 3's checked steps: runs of several
    submissions share the GPU) ends the run `checked`, and `timing` (the speedups, the GPU and
    its timing cores held alone) scores it."""

    whole = "whole"
    checks = "checks"
    timing = "timing"


class ErrorClass(str, enum.Enum):
    bad_archive = "bad_archive"
    build_error = "build_error"
    timeout = "timeout"
    crashed = "crashed"
    infra_error = "infra_error"
