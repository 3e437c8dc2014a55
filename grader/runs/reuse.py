"""Measurements reused (issue 55, "never measure the same thing twice"): a run whose measurement
key (worker.measure_key) equals that of the same student's earlier scored run of the assignment
takes that run's problems, score and report instead of building and measuring; it records
`reused_from` and says "measured in run N".

Whose runs: the same submitting student's only. Identical staged sources from two students are
a copying case for the similarity report to show, not a grade to hand over: a reused run
carries the earlier run's texts (log tails of the student's own code, the report's lines) and
names that run, which another student may not read. A student's own repeat (the same kernels
with a README changed, an upload sent again after a deadline moved) is where nearly all the
saving is.

Which runs: the newest `scored` run with the key that measured itself (never one that reused:
every reused run names the run that measured), and only where each of its measurements ended
`ok` (a problem not graded for a kernel that did not build has none, which is as repeatable as
the build). A timeout, a crash, an error or a problem left for the GPU budget may be the
machine's moment, so the student's next upload measures afresh.

Never: a staff re-grade (it exists to measure again), or with KG_REUSE_MEASUREMENTS=false (the
key is still recorded, so turning it on later finds these runs). The look-up is best-effort:
a database error measures afresh.
"""
from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.models import Run, RunState, Submission
from grader.settings import Settings
from worker.assignment import assignment_of
from worker.pieces import PASSED_OVER
from worker.pipeline import Outcome, ProblemOutcome, Reuse, StageRecord
from worker.rubric import Rubric

log = logging.getLogger(__name__)
SAME_INPUTS = "the same staged sources, rubric, toolchain and GPU model"
NO_GPU = "none (the stage needs no GPU)"
CANDIDATES = 5  # the newest runs with the key looked at for one that measured cleanly
# The sandbox's settings that shape what a problem's child can do (not where it runs: its user, GPU slot)
SANDBOX_FIELDS = {"cpu_s", "memory_bytes", "max_processes", "file_size_bytes", "wall_s", "disk_bytes", "backend",
                  "docker_image"}


def stage_context(settings: Settings, gpu_model: str, targets: dict[str, float] | None) -> dict[str, Any]:
    """What besides the sources, rubric and toolchain shapes a measurement, for the key."""
    return {
        "gpu_model": gpu_model,
        "targets": targets,  # the stage measures until clear of them, and they score
        "seed": settings.grading_seed,
        "gpu_budget_s": settings.gpu_budget_s,
        "sanitizer": [settings.sanitizer, settings.sanitizer_cap_s],
        "sandbox": settings.sandbox.model_dump(include=SANDBOX_FIELDS),
    }


def reuse_for(settings: Settings, sessions: sessionmaker[Session], run_id: int, rubric: Rubric,
              gpu_model: str | None, targets: dict[str, float] | None) -> Reuse | None:
    """The pipeline's Reuse for `run_id` on this worker: None where no key can be made (a stage
    that needs a GPU, on a worker whose GPU model NVML did not name)."""
    if gpu_model is None and assignment_of(rubric).stage_needs_gpu:
        return None
    context = stage_context(settings, gpu_model or NO_GPU, targets)
    if not settings.reuse_measurements:
        return Reuse(context)

    def lookup(key: str, so_far: Outcome) -> Outcome | None:
        return _lookup(sessions, run_id, key, so_far)

    return Reuse(context, lookup)


def _lookup(sessions: sessionmaker[Session], run_id: int, key: str, so_far: Outcome) -> Outcome | None:
    try:
        with session_scope(sessions) as session:
            run = session.get(Run, run_id)
            if run is None or run.reason == "regrade":
                return None
            source = earlier_measurement(session, run, key)
            if source is None:
                return None
            log.info("run %s: the same inputs as run %s; its measurements are taken", run_id, source.id)
            return reused_outcome(source, so_far)
    except SQLAlchemyError:
        log.warning("run %s: looking for an earlier measurement failed; measuring afresh", run_id, exc_info=True)
        return None


def earlier_measurement(session: Session, run: Run, key: str) -> Run | None:
    """The newest scored run of `run`'s student and assignment with `key` that measured, cleanly."""
    candidates = session.scalars(
        select(Run).join(Submission, Run.submission_id == Submission.id)
        .where(Run.measure_key == key, Run.state == RunState.scored, Run.reused_from.is_(None), Run.id != run.id,
               Submission.user_id == run.submission.user_id,
               Submission.assignment_id == run.submission.assignment_id)
        .order_by(Run.finished_at.desc(), Run.id.desc()).limit(CANDIDATES)
    )
    return next((c for c in candidates if measured_cleanly(c)), None)


def measured_cleanly(run: Run) -> bool:
    """Every measurement of `run` ended `ok` (a problem without one was not graded for its build),
    and its timing was not passed over (worker.pieces: a newer upload counted, so it has no speed)."""
    measurements = [(r.details or {}).get("measurement") for r in run.results]
    passed_over = bool((run.toolchain or {}).get(PASSED_OVER))
    return bool(run.results) and not passed_over and all(m is None or m.get("status") == "ok" for m in measurements)


def reused_outcome(source: Run, so_far: Outcome) -> Outcome:
    """`source`'s problems, score and report as this run's outcome, after this run's own unpack and
    stage records; the build, reference and run records are `source`'s, under a note saying so."""
    note = f"Measured in run {source.id}: {SAME_INPUTS}, so it was not measured again."
    stages = {**so_far.stages, "reuse": StageRecord(
        "ok", 0.0, f"{note} The build, reference and run logs are run {source.id}'s.")}
    for name, record in (source.stages or {}).items():
        stages.setdefault(name, StageRecord(str(record.get("status", "ok")), float(record.get("seconds") or 0.0),
                                            str(record.get("log") or "")))
    report = None
    if source.report is not None:
        report = {**source.report, "output": f"{source.report.get('output') or ''}\n\n{note}".strip()}
    return Outcome(
        state=RunState.scored,
        message=f"{source.message or ''} {note}".strip(),
        score=source.score,
        stages=stages,
        toolchain=dict(source.toolchain or so_far.toolchain),
        problems=[ProblemOutcome(r.problem_id, r.title, r.status, r.points, r.max_points, r.message or "",
                                 dict(r.details or {})) for r in source.results],
        report=report,
        reused_from=source.id,
    )
