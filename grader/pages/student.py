"""One student's whole history in an assignment, for its staff (linked from the gradebook's
Uploads count): every submission with every run, each scored run's final grade and late badge,
which run the gradebook counts, and links to the runs and the submitted code. Someone who is
not staff of the assignment gets the 404 page (grader.pages.common's Staff)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from grader.api.deps import get_context
from grader.membership import role_in
from grader.models import Submission
from grader.pages.common import Db, Staff, absent, page
from grader.queries import counting_run, run_grades
from grader.service import find_user

router = APIRouter(include_in_schema=False)


@router.get("/assignments/{slug}/students/{username}", response_class=HTMLResponse)
def student_history(request: Request, username: str, session: Db, staff: Staff) -> Response:
    assignment = staff.assignment
    student = find_user(session, username)
    subs = [] if student is None else session.scalars(
        select(Submission).where(Submission.user_id == student.id, Submission.assignment_id == assignment.id)
        .options(selectinload(Submission.runs)).order_by(Submission.id.desc())
    ).all()
    if student is None or (not subs and role_in(session, student.id, assignment.id) is None):
        raise absent(f"student {username!r} in {assignment.slug}")  # the gradebook lists no such row either
    zone = get_context(request).settings.course_zone
    runs = [run for sub in subs for run in sub.runs]
    grades = run_grades(session, runs, zone)
    return page(request, "student_history.html", staff.user, student=student, assignment=assignment,
                role=role_in(session, student.id, assignment.id), submissions=subs, grades=grades,
                counting=counting_run(runs, grades, assignment.score_policy), zone=zone)
