"""Run states, error classes and roles: plain enums with no dependencies, shared by the
service (models, API) and the pure pipeline (which also runs on the bare GPU machine)."""
from __future__ import annotations

import enum


class Role(str, enum.Enum):
    student = "student"
    instructor = "instructor"


class CourseRole(str, enum.Enum):
    """A user's part in one assignment (grader.membership): students submit and read their own
    work; staff read, re-grade and export everyone's."""

    student = "student"
    staff = "staff"


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
