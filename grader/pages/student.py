"""One student's whole history in an assignment, for its staff (linked from the gradebook's
Uploads count): every submission with every run, each scored run's final grade and late badge,
which run the gradebook counts (and who chose it), and links to the runs and the submitted
code. Staff (instructors and TAs) can pin one scored run as the one that counts (an optional reason),
replacing a student's own choice, and unpin it back to the score policy; and make an entry on the
student's grade (an adjustment, a manual grade, the manual grade taken back:
grader.course.adjustments), which answers their open regrade requests; a refused entry comes back
on the page with why and what was typed. Someone outside the course gets the 404 page, its
students a 403 page (grader.pages.common's Staff and GraderForm)."""
from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from grader.api.deps import get_context
from grader.course import adjustments
from grader.course.adjustments import WorkflowError
from grader.course.counted_choice import choose, clear, is_scored
from grader.course.grade_reads import counted_for, run_grades, set_aside_entries
from grader.course.roster_entries import entry_of, shown_name
from grader.ids import parse_row_id
from grader.models import Assignment, Run, Submission, User
from grader.notify import answer_messages, send_quietly
from grader.pages.common import Db, GraderForm, Staff, StaffOf, absent, page, see_other
from grader.reads.submission_reads import student_submissions
from grader.runs.dispatch import chosen_timing
from grader.runs.timing_piece import time_if_passed_over

router = APIRouter(include_in_schema=False)


def _student(session: Session, assignment: Assignment, username: str) -> tuple[User, list[Submission]]:
    """The student and their submissions in `assignment` (submission_reads.student_submissions); the
    404 page for a login the gradebook lists no row of."""
    found = student_submissions(session, assignment, username)
    if found is None:
        raise absent(f"student {username!r} in {assignment.slug}")
    return found


@router.get("/assignments/{slug}/students/{username}", response_class=HTMLResponse)
def student_history(request: Request, username: str, session: Db, staff: Staff) -> Response:
    return _history_page(request, session, staff, username)


def _history_page(request: Request, session: Session, staff: StaffOf, username: str, status_code: int = 200,
                  refused: str | None = None, kept: dict[str, str] | None = None) -> HTMLResponse:
    """The page; `refused`: why an entry on the grade was not made, `kept` what was typed in its form."""
    assignment = staff.assignment
    student, subs = _student(session, assignment, username)
    zone = get_context(request).settings.course_zone
    runs = [run for sub in subs for run in sub.runs]
    grades = run_grades(session, runs, zone)
    counted = counted_for(session, assignment, student.id, runs, grades)
    entry = entry_of(session, student.id, assignment.course_id)
    return page(request, "student_history.html", staff.user, status_code, student=student, assignment=assignment,
                role=entry.role if entry else None, roster_name=shown_name(entry, student),
                section=entry.section if entry else None, submissions=subs, grades=grades,
                counting=counted.run_id, zone=zone, pin=counted.pin, error=request.query_params.get("error"),
                grade=counted.grade, set_aside=set_aside_entries(session, assignment.id, student.id),
                refused=refused, kept=kept or {})


@router.post("/assignments/{slug}/students/{username}/grade")
async def grade_entry(request: Request, background: BackgroundTasks, username: str, session: Db,
                      staff: GraderForm) -> Response:
    """An entry on the student's grade: an adjustment, a manual grade or the manual grade taken
    back (`kind`), with `points` and a `reason`; the students whose requests it answers are mailed."""
    student, _ = _student(session, staff.assignment, username)
    form = await request.form()
    typed = {name: str(form.get(name) or "") for name in ("kind", "points", "reason")}
    try:
        made = adjustments.add_entry(session, staff.assignment, student, staff.user, typed["kind"], typed["points"],
                                     typed["reason"])
    except WorkflowError as exc:
        session.rollback()
        return _history_page(request, session, staff, username, status.HTTP_400_BAD_REQUEST,
                             f"{exc} Nothing was changed.", typed)
    background.add_task(send_quietly, get_context(request).settings.smtp,
                        answer_messages(get_context(request).settings, made.answers))
    return see_other(f"/assignments/{staff.assignment.slug}/students/{student.username}#grade")


@router.post("/assignments/{slug}/students/{username}/counted")
async def pin_counted(request: Request, username: str, session: Db, staff: GraderForm) -> Response:
    """Make one scored run of the student the one that counts, replacing any earlier pin."""
    assignment = staff.assignment
    student, subs = _student(session, assignment, username)
    form = await request.form()
    here = f"/assignments/{assignment.slug}/students/{student.username}"
    run_id = str(form.get("run_id", ""))
    named = parse_row_id(run_id)
    run = session.get(Run, named) if named is not None else None
    if run is None or run.submission not in subs or not is_scored(run):
        return see_other(f"{here}?error=unscored#counted")
    choose(session, assignment, student.id, run, staff.user, str(form.get("reason", "")).strip() or None)
    time_if_passed_over(session, run, chosen_timing(get_context(request)))
    return see_other(f"{here}#counted")


@router.post("/assignments/{slug}/students/{username}/counted/remove")
def unpin_counted(username: str, session: Db, staff: GraderForm) -> Response:
    """Back to the score policy's pick."""
    student, _ = _student(session, staff.assignment, username)
    clear(session, staff.assignment, student.id)
    session.commit()
    return see_other(f"/assignments/{staff.assignment.slug}/students/{student.username}#counted")
