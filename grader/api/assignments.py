"""/api/v1/assignments/{slug}: the gradebook (JSON, Canvas's CSV, the detailed CSV) and re-grading, for its staff."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, HTTPException, Query, Response, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.accepting import admit_committed
from grader.api.deps import DB, Caller, Context, require, taught_assignment
from grader.api.errors import ERRORS
from grader.api.gradebook import canvas_csv, detailed_csv, gradebook_out
from grader.api.schemas import GradebookOut, RegradeAccepted, RegradeRequest
from grader.auth.credentials import SCOPE_READ_ALL, SCOPE_REGRADE, Principal
from grader.context import AppContext
from grader.models import Submission
from grader.reads.gradebook_reads import Gradebook, gradebook
from grader.reads.submission_reads import regrade_targets
from grader.roles import Power
from grader.runs.fairshare import Admission
from grader.service import record_regrade

router = APIRouter()

PolicyParam = Annotated[
    Literal["latest", "best"] | None,
    Query(description="which scored run counts: the newest submission's, or the best one "
                      "(default: the assignment's own policy)"),
]


@router.get(
    "/assignments/{slug}/gradebook",
    response_model=GradebookOut,
    responses=ERRORS,
    summary="Gradebook (staff): one row per student with the graded run's total and per-problem points",
)
def read_gradebook(slug: str, ctx: Context, session: DB, caller: Caller, policy: PolicyParam = None) -> GradebookOut:
    return gradebook_out(_staff_gradebook(slug, ctx, session, caller, policy))


def _staff_gradebook(slug: str, ctx: AppContext, session: Session, caller: Principal, policy: str | None) -> Gradebook:
    require(caller, SCOPE_READ_ALL)
    return gradebook(session, taught_assignment(session, caller, slug), policy, ctx.settings.course_zone,
                     ctx.settings.rubric_dirs)


def csv_response(text: str, filename: str) -> Response:
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


@router.get(
    "/assignments/{slug}/gradebook.csv",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"text/csv": {}}, "description": "Canvas's gradebook import format"}},
    summary="Gradebook as CSV for Canvas import (staff): Student, ID, SIS User ID, SIS Login ID, Section, the "
            "assignment's final grades, and a Points Possible line",
)
def read_gradebook_csv(slug: str, ctx: Context, session: DB, caller: Caller, policy: PolicyParam = None) -> Response:
    book = _staff_gradebook(slug, ctx, session, caller, policy)
    return csv_response(canvas_csv([book]), f"{book.assignment}-gradebook-{book.policy}.csv")


@router.get(
    "/assignments/{slug}/gradebook-detailed.csv",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"text/csv": {}}, "description": "every grade's making"}},
    summary="Gradebook as a detailed CSV (staff): final grade, raw score, late penalty, lateness, adjustments "
            "with their reasons, per-problem points",
)
def read_gradebook_detailed_csv(slug: str, ctx: Context, session: DB, caller: Caller,
                                policy: PolicyParam = None) -> Response:
    book = _staff_gradebook(slug, ctx, session, caller, policy)
    return csv_response(detailed_csv(book), f"{book.assignment}-gradebook-detailed-{book.policy}.csv")


@router.post(
    "/assignments/{slug}/regrade",
    status_code=status.HTTP_201_CREATED,
    response_model=RegradeAccepted,
    responses=ERRORS,
    summary='Re-grade submissions of an assignment (staff): ids, "all" or "latest"; each gets a new run',
)
def regrade_assignment(
    slug: str, ctx: Context, session: DB, caller: Caller, body: Annotated[RegradeRequest, Body()]
) -> RegradeAccepted:
    require(caller, SCOPE_REGRADE)
    require(caller, SCOPE_READ_ALL)
    assignment = taught_assignment(session, caller, slug, Power.grade)
    if isinstance(body.submissions, str):
        targets = regrade_targets(session, assignment, body.submissions)
    else:
        wanted = list(dict.fromkeys(body.submissions))
        found = {
            s.id: s
            for s in session.scalars(
                select(Submission).where(Submission.id.in_(wanted), Submission.assignment_id == assignment.id)
            )
        }
        missing = [i for i in wanted if i not in found]
        if missing:  # nothing is created unless every id is valid
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submissions {missing} in assignment {slug!r}")
        targets = [found[i] for i in wanted]
    runs = [record_regrade(session, sub) for sub in targets]
    session.commit()
    admissions = [admit_committed(ctx, run.id) for run in runs]
    sent = sum(a is Admission.sent for a in admissions)
    return RegradeAccepted(
        run_ids=[r.id for r in runs],
        submission_ids=[s.id for s in targets],
        queued=sent,
        message=f"{len(runs)} run(s) created; {sent} queued now"
        + ("" if sent == len(runs) else "; the rest follow one per student as earlier runs finish"
           + (" and the queue is back" if Admission.unreachable in admissions else "")),
    )
