"""Run states and error classes: plain enums with no dependencies, the pipeline's vocabulary for
how a run ended (it also runs on the bare GPU machine); the service stores them on its rows."""
from __future__ import annotations

import enum


class RunState(str, enum.Enum):
    queued = "queued"
    building = "building"
    running = "running"
    built = "built"  # final while no GPU stage exists on this worker: build done, not graded
    scored = "scored"
    failed = "failed"


FINAL_STATES = frozenset({RunState.built, RunState.scored, RunState.failed})
ACTIVE_STATES = (RunState.building, RunState.running)


class ErrorClass(str, enum.Enum):
    bad_archive = "bad_archive"
    build_error = "build_error"
    timeout = "timeout"
    crashed = "crashed"
    infra_error = "infra_error"
