"""/api/v1/courses/{slug}: a course's gradebooks as the one CSV Canvas imports (a column per
assignment), for its staff."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status
from sqlalchemy import select

from grader.api.assignments import PolicyParam, csv_response
from grader.api.deps import DB, Caller, Context, refuse_unless
from grader.api.errors import ERRORS
from grader.api.gradebook import canvas_csv
from grader.models import Course
from grader.reads.gradebook_reads import course_gradebooks
from grader.roles import Power

router = APIRouter()


@router.get(
    "/courses/{slug}/gradebook.csv",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"text/csv": {}}, "description": "Canvas's gradebook import format"}},
    summary="The course's gradebook as CSV for Canvas import (staff): Student, ID, SIS User ID, SIS Login ID, "
            "Section, a column per assignment with its final grades, and a Points Possible line",
)
def read_course_csv(slug: str, ctx: Context, session: DB, caller: Caller, policy: PolicyParam = None) -> Response:
    course = session.scalar(select(Course).where(Course.slug == slug))
    if course is None or not course.assignments:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no course {slug!r} that holds an assignment")
    for assignment in course.assignments:  # 404 outside the course, 403 for its students
        refuse_unless(caller, Power.view, assignment)
    books = course_gradebooks(session, course, policy, ctx.settings.course_zone, ctx.settings.rubric_dirs)
    return csv_response(canvas_csv(books), f"{slug}-canvas.csv")
