"""/api/v1/assignments/{slug}: the bulk paths for grading by hand (a GPU outage), for its staff:
every student's upload as one zip with a manifest (`read:all`, Power.view), and manual grades
and adjustments from a CSV (`regrade`, Power.grade), previewed (`dry_run`) or applied, all or
nothing. The web pages (grader.pages.bulk) offer the same and share archive_response."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, BackgroundTasks, Body, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from grader.api.assignments import PolicyParam
from grader.api.deps import DB, Caller, Context, get_context, require, taught_assignment
from grader.api.errors import ERRORS, ErrorBody, error_response
from grader.api.schemas import RequestBody
from grader.auth.credentials import SCOPE_READ_ALL, SCOPE_REGRADE
from grader.course.grade_import import MAX_BYTES, GradeImport, import_entries
from grader.models import Assignment
from grader.notify import answer_messages, send_quietly
from grader.reads import submission_archive
from grader.reads.gradebook_reads import gradebook
from grader.roles import Power

router = APIRouter()


def archive_response(request: Request, session: Session, assignment: Assignment,
                     which: submission_archive.Which, policy: str | None = None) -> Response:
    """The zip of every student's `which` upload of `assignment`, streamed from its temp file."""
    ctx = get_context(request)
    book = gradebook(session, assignment, policy, ctx.settings.course_zone, ctx.settings.rubric_dirs)
    archive = submission_archive.write_archive(submission_archive.pick(session, assignment, book, which), ctx.blobs)
    size = archive.seek(0, 2)
    archive.seek(0)
    return StreamingResponse(submission_archive.chunks(archive), media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{assignment.slug}-{which}-uploads.zip"',
        "Content-Length": str(size), "Cache-Control": "no-store"})


@router.get(
    "/assignments/{slug}/submissions.zip",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"application/zip": {}},
                               "description": "each student's upload under <login>/, and manifest.csv"}},
    summary="Every student's counted (or latest) upload as one zip, with manifest.csv (staff): login, name, "
            "submission id, run id, uploaded at, sha256, the rule that picked it, the file in the zip",
)
def read_submissions_zip(
    slug: str, request: Request, session: DB, caller: Caller, policy: PolicyParam = None,
    which: Annotated[Literal["counted", "latest"], Query(
        description="counted: the upload of the run that counts (the newest upload where no run is scored); "
                    "latest: each student's newest upload")] = "counted",
) -> Response:
    require(caller, SCOPE_READ_ALL)
    return archive_response(request, session, taught_assignment(session, caller, slug), which, policy)


class GradeImportIn(RequestBody):
    csv: str = Field(max_length=MAX_BYTES, description="the CSV: a header row naming login, kind (manual or "
                                                       "adjust), points and reason, then a line per entry")
    dry_run: bool = Field(False, description="true: only the preview; nothing is applied")


class EffectOut(BaseModel):
    line: int
    login: str
    kind: Literal["manual", "adjust"]
    points: str = Field(description="as the file writes them")
    reason: str
    before: float | None = Field(description="the student's grade before this line; null: none")
    after: float | None = Field(description="after it (later lines on the same student build on it)")


class LineErrorOut(BaseModel):
    line: int
    message: str


class GradeImportOut(BaseModel):
    applied: bool = Field(description="the entries were recorded (never with a refused line)")
    lines: list[EffectOut]
    errors: list[LineErrorOut] = Field(description="refused lines, by line number: with any, nothing is applied")


def _out(result: GradeImport) -> GradeImportOut:
    return GradeImportOut(
        applied=result.applied, errors=[LineErrorOut(line=e.line, message=e.message) for e in result.errors],
        lines=[EffectOut(line=e.entry.line, login=e.entry.login, kind=e.entry.kind, points=e.entry.points,  # type: ignore[arg-type]
                         reason=e.entry.reason, before=e.before, after=e.after) for e in result.effects])


@router.post(
    "/assignments/{slug}/grade-entries",
    response_model=GradeImportOut,
    responses={**ERRORS, 409: {"model": ErrorBody, "description": "lines refused: nothing applied (details: "
                                                                   "each line and why)"}},
    summary="Import manual grades and adjustments from a CSV (staff): preview with dry_run, else apply all in "
            "one transaction, or none when any line is refused",
)
def import_grade_entries(slug: str, background: BackgroundTasks, ctx: Context, session: DB, caller: Caller,
                         body: Annotated[GradeImportIn, Body()]) -> Response | GradeImportOut:
    require(caller, SCOPE_REGRADE)
    assignment = taught_assignment(session, caller, slug, Power.grade)
    result = import_entries(session, assignment, caller.user, body.csv, apply=not body.dry_run)
    if body.dry_run:
        return _out(result)
    if not result.applied:
        return error_response(status.HTTP_409_CONFLICT, f"{len(result.errors)} line(s) refused; nothing applied"
                              if result.errors else "the file holds no entry; nothing applied", code="conflict",
                              details=[{"line": e.line, "message": e.message} for e in result.errors])
    mail = answer_messages(ctx.settings, result.answered)
    session.commit()
    background.add_task(send_quietly, ctx.settings.smtp, mail)  # after the answer
    return _out(result)
