"""/api/v1/runs: one run, as a student (their own) or staff (their assignments') reads it."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from grader.api.deps import DB, Caller, Context, require
from grader.api.errors import ERRORS
from grader.api.schemas import AssignmentGradeOut, BandwidthOut, GpuTimeOut, GradeOut, RunOut
from grader.auth.credentials import SCOPE_READ
from grader.course.grade_reads import counted_of, run_grades
from grader.ids import RowId
from grader.models import Run
from grader.reads.bandwidth import run_bandwidth
from grader.reads.gpu_phases import plugin_of, run_gpu_time

router = APIRouter()


@router.get(
    "/runs/{run_id}",
    response_model=RunOut,
    responses=ERRORS,
    summary="One run: state, logs, toolchain, per-problem results and the report",
)
def read_run(run_id: RowId, ctx: Context, session: DB, caller: Caller) -> RunOut:
    require(caller, SCOPE_READ)
    run = session.get(Run, run_id)
    if run is None or not caller.can_read_submission(run.submission):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
    # The run that counts shows the student's grade (with the staff's entries), as on its page
    grade = run_grades(session, [run], ctx.settings.course_zone).get(run.id)
    counted = counted_of(session, run.submission.assignment, run.submission.user_id, ctx.settings.course_zone)
    grade = counted.grade if grade is not None and counted.run_id == run.id else grade
    staff = caller.teaches(run.submission.assignment_id)
    phases = run_gpu_time(run, plugin_of(run.submission.assignment.slug, ctx.settings.rubric_dirs)) if staff else None
    bandwidth = run_bandwidth(session, run)
    standing = AssignmentGradeOut(assignment=run.submission.assignment.slug, counted_run_id=counted.run_id,
                              grade=GradeOut.of(counted.grade) if counted.grade else None)
    return RunOut.of(run, stages=run.stages or {}, grade=GradeOut.of(grade) if grade else None, assignment_grade=standing,
                     gpu_time=GpuTimeOut.of(phases) if phases else None,
                     bandwidth=[BandwidthOut.of(p, staff) for p in bandwidth.problems] if bandwidth else [])
