"""The staff's workflow on a student's grade: entries with a reason (point adjustments, manual
grades and their taking back), the students' regrade requests (open, then accepted by a
re-grade or an adjustment, or rejected with a reply), and comments on a run by its student and
the staff.

An entry is a row of its own, never changed: a correction is another entry, so the history of
a grade stays whole. It belongs to the student's grade in the assignment, not to a run, so it
stays when another run comes to count: grader.course.grades.student_grade adds the entries to
the counted run's grade, everywhere it is shown (the run it was made on is kept, as a note). A
re-grade is a new run, with no entry of its own.

A request is answered however staff act: an entry on its student's grade accepts it (the
entry's reason is the reply), and so does a re-grade of its submission, from the queue or not
(the new run is the answer); the queue shows the open ones, the answered ones, or those the
viewer answered (`Show`).

The callers (grader.pages.requests) check who may act; these functions check what may be done
and raise WorkflowError, whose message is shown as is.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from grader.course.grade_reads import counted_of
from grader.course.grades import ADJUST, MANUAL, points_text
from grader.models import (
    FINAL_STATES,
    Assignment,
    GradeAdjustment,
    RegradeRequest,
    Run,
    RunComment,
    Submission,
    User,
    utcnow,
)
from grader.service import record_regrade

MAX_TEXT = 4000  # characters of a reason or a reply
OPEN, ACCEPTED, REJECTED = "open", "accepted", "rejected"
ALREADY_OPEN = "This run already has an open regrade request; the staff's answer will appear on the run page."
TAKE_BACK = "take_back"  # an entry's kind as a form or the API names it: a manual grade taken back
KINDS = (ADJUST, MANUAL, TAKE_BACK)


class WorkflowError(ValueError):
    """A request or decision that cannot be taken, in a sentence for the page."""


def _text(value: str, what: str, shown: str = "to the student with the grade") -> str:
    text = value.strip()
    if not text:
        raise WorkflowError(f"Write {what}: it is shown {shown}.")
    if len(text) > MAX_TEXT:
        raise WorkflowError(f"Shorten {what} to {MAX_TEXT} characters (it has {len(text)}).")
    return text


def _number(value: str, example: str) -> float:
    try:
        points = float(value.strip().replace(",", "."))
    except ValueError:
        raise WorkflowError(f"The points “{value.strip()}” are not a number; write one such as {example}.") from None
    if not math.isfinite(points):
        raise WorkflowError(f"The points “{value.strip()}” are not a number; write one such as {example}.")
    return round(points, 2)


def _ceiling(assignment: Assignment) -> tuple[float, str]:
    """The most a grade may reach in `assignment`, and what that is in words."""
    if assignment.extra_credit_points:
        return (assignment.total_points + assignment.extra_credit_points,
                f"the assignment's {points_text(assignment.total_points)} and its "
                f"{points_text(assignment.extra_credit_points)} of extra credit")
    return assignment.total_points, "the assignment's total"


def parse_points(value: str, assignment: Assignment) -> float:
    """Adjustment points from a form field: a signed number, not zero, at most the assignment's
    total with its extra credit either way."""
    points, (ceiling, words) = _number(value, "2 or -1.5"), _ceiling(assignment)
    if points == 0:
        raise WorkflowError("Give a number of points other than zero (negative to take points off).")
    if abs(points) > ceiling:
        raise WorkflowError(f"An adjustment is at most {points_text(ceiling)} points either way, {words}.")
    return points


def parse_grade(value: str, assignment: Assignment) -> float:
    """A manual grade from a form field: from 0 to the assignment's total with its extra credit."""
    points, (ceiling, words) = _number(value, f"{points_text(assignment.total_points)} or 72.5"), _ceiling(assignment)
    if not 0 <= points <= ceiling:
        raise WorkflowError(f"A manual grade is from 0 to {points_text(ceiling)} points, {words}.")
    return points


def add_entry(session: Session, assignment: Assignment, student: User, staff: User, kind: str, points: str,
              reason: str, answering: Sequence[RegradeRequest] | None = None) -> GradeAdjustment:
    """Record `staff`'s entry of `kind` (KINDS) on `student`'s grade in `assignment`: an
    adjustment by `points` (the form's text), a manual grade of `points`, or the manual grade
    taken back, for `reason`. It answers the open ones of `answering` (None: every open
    request of the student there), listed in `answers`."""
    counted = counted_of(session, assignment, student.id)
    if kind == ADJUST:
        if counted.grade is None:
            raise WorkflowError(f"{student.username} has no grade in {assignment.slug} to adjust (no scored run): "
                                "give a manual grade instead.")
        value: float | None = parse_points(points, assignment)
    elif kind == MANUAL:
        value = parse_grade(points, assignment)
    elif kind == TAKE_BACK:
        if counted.grade is None or counted.grade.manual is None:
            raise WorkflowError(f"{student.username} has no manual grade in {assignment.slug} to take back.")
        kind, value = MANUAL, None
    else:
        raise WorkflowError("Choose an adjustment, a manual grade, or taking the manual grade back.")
    row = GradeAdjustment(assignment_id=assignment.id, user_id=student.id, kind=kind, points=value,
                          reason=_text(reason, f"the reason for the {'adjustment' if kind == ADJUST else 'manual grade'}"),
                          by=staff, run_id=counted.run_id)
    session.add(row)
    session.flush()
    for request in _open(_student_requests(session, assignment, student) if answering is None else answering):
        _decide(request, staff, ACCEPTED, row.reason)
        request.adjustment = row
    return row


def adjust(session: Session, run: Run, staff: User, points: str, reason: str) -> GradeAdjustment:
    """`staff`'s adjustment by `points` of the grade of `run`'s student in its assignment, for
    `reason`, from the run's page: it answers the run's open request."""
    sub = run.submission
    return add_entry(session, sub.assignment, sub.user, staff, ADJUST, points, reason, run.regrade_requests)


def _student_requests(session: Session, assignment: Assignment, student: User) -> list[RegradeRequest]:
    return list(session.scalars(
        select(RegradeRequest).join(Run, Run.id == RegradeRequest.run_id)
        .join(Submission, Submission.id == Run.submission_id)
        .where(Submission.assignment_id == assignment.id, Submission.user_id == student.id)
        .order_by(RegradeRequest.id)))


def regrade(session: Session, submission: Submission, staff: User, reply: str = "") -> Run:
    """Grade `submission` again (a new run; the caller commits, then admits it); it answers the
    open requests of the submission's runs (`answers`), with `reply` or words naming the run."""
    answered = [r for run in submission.runs for r in _open(run.regrade_requests)]
    run = record_regrade(session, submission)
    for request in answered:
        _decide(request, staff, ACCEPTED, reply.strip()[:MAX_TEXT] or
                f"Re-graded as run {run.id}; its grade shows on its page once it is scored.")
        request.regrade_run = run
    return run


def request_regrade(session: Session, run: Run, student: User, reason: str) -> RegradeRequest:
    """`student`'s request that staff look at their final `run` again, for `reason`."""
    if run.state not in FINAL_STATES:
        raise WorkflowError("This run is still being graded; ask for a regrade once it has finished.")
    if any(r.state == OPEN for r in run.regrade_requests):
        raise WorkflowError(ALREADY_OPEN)
    why = _text(reason, "why the run should be looked at", shown="to the course staff")
    row = RegradeRequest(run=run, student_id=student.id, reason=why)
    session.add(row)
    try:
        session.flush()
    except IntegrityError:  # a second request sent at the same moment (the open-request index)
        session.rollback()
        raise WorkflowError(ALREADY_OPEN) from None
    return row


def _open(requests: Sequence[RegradeRequest]) -> list[RegradeRequest]:
    return [r for r in requests if r.state == OPEN]


def _check_open(request: RegradeRequest) -> None:
    if request.state != OPEN:
        raise WorkflowError(f"This request was already {request.state}; the student has seen the answer.")


def _decide(request: RegradeRequest, staff: User, state: str, reply: str) -> None:
    _check_open(request)
    request.state, request.decided_by, request.decided_at, request.reply = state, staff, utcnow(), reply


def accept_with_regrade(session: Session, request: RegradeRequest, staff: User, reply: str) -> Run:
    """Accept by grading the submission again (regrade: the new run answers it)."""
    _check_open(request)
    return regrade(session, request.run.submission, staff, reply)


def accept_with_adjustment(session: Session, request: RegradeRequest, staff: User, points: str,
                           reply: str) -> GradeAdjustment:
    """Accept by adjusting the student's grade (the adjustment answers the request); the reply is
    the adjustment's reason."""
    _check_open(request)
    sub = request.run.submission
    return add_entry(session, sub.assignment, sub.user, staff, ADJUST, points, reply, [request])


def reject(request: RegradeRequest, staff: User, reply: str) -> None:
    _decide(request, staff, REJECTED, _text(reply, "a reply that says why the request is rejected",
                                              shown="to the student on the run page"))


def comment(session: Session, run: Run, author: User, body: str) -> RunComment:
    row = RunComment(run=run, author_id=author.id, body=_text(body, "the comment", shown="on the run page"))
    session.add(row)
    session.flush()
    return row


def assignment_requests(session: Session, assignment: Assignment) -> list[RegradeRequest]:
    """The assignment's regrade requests: open ones first (oldest first: the queue), then the
    decided ones, newest first; run, submission, student and decider loaded (four statements)."""
    rows = session.scalars(
        select(RegradeRequest).join(Run, Run.id == RegradeRequest.run_id)
        .join(Submission, Submission.id == Run.submission_id)
        .where(Submission.assignment_id == assignment.id)
        .options(selectinload(RegradeRequest.run).selectinload(Run.submission),
                 selectinload(RegradeRequest.student), selectinload(RegradeRequest.decided_by))
        .order_by(RegradeRequest.id)
    ).all()
    return [r for r in rows if r.state == OPEN] + [r for r in reversed(rows) if r.state != OPEN]


class Show(StrEnum):
    """Which of an assignment's requests the staff queue shows."""

    open = "open"  # waiting for an answer (the default: the queue)
    answered = "answered"  # accepted or rejected
    mine = "mine"  # those the viewer answered
    all = "all"


def shown(requests: Sequence[RegradeRequest], show: Show, viewer: User) -> list[RegradeRequest]:
    """The `requests` (assignment_requests' order) that `show` selects for `viewer`."""
    keep = {Show.open: lambda r: r.state == OPEN, Show.answered: lambda r: r.state != OPEN,
            Show.mine: lambda r: r.decided_by_id == viewer.id, Show.all: lambda r: True}[show]
    return [r for r in requests if keep(r)]


def open_requests(session: Session, assignment: Assignment) -> dict[int, int]:
    """student id -> the id of their oldest open request in `assignment` (the gradebook's link
    to it); one statement."""
    return dict(session.execute(  # type: ignore[arg-type]
        select(RegradeRequest.student_id, func.min(RegradeRequest.id))
        .join(Run, Run.id == RegradeRequest.run_id).join(Submission, Submission.id == Run.submission_id)
        .where(Submission.assignment_id == assignment.id, RegradeRequest.state == OPEN)
        .group_by(RegradeRequest.student_id)).all())


def waiting(session: Session, assignment_ids: Sequence[int]) -> tuple[int, str | None]:
    """How many requests wait for an answer in the assignments of `assignment_ids`, and the slug
    of the assignment whose request has waited longest (None: none waits); two statements."""
    if not assignment_ids:
        return 0, None
    where = (Submission.assignment_id.in_(assignment_ids), RegradeRequest.state == OPEN)
    joined = (select(func.count(RegradeRequest.id)).join(Run, Run.id == RegradeRequest.run_id)
              .join(Submission, Submission.id == Run.submission_id).where(*where))
    count = session.scalar(joined) or 0
    oldest = session.scalar(joined.with_only_columns(Assignment.slug).join(Assignment, Assignment.id ==
                                                                           Submission.assignment_id)
                            .order_by(RegradeRequest.id).limit(1)) if count else None
    return count, oldest
