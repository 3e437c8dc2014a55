"""The course pages: the courses a user is staff of (with the form that makes one, for an
account that may: site role instructor), a course's page (its assignments and its staff's
pages of each; its instructors add an assignment there, set its run quota and choose what its TAs
may do besides viewing and grading: grader.roles.TA_GRANTABLE) and its members (who is an
instructor, TA or student: add an existing account or change its part, or take someone out
after a confirmation page). The same functions as `grader course` and `grader user enroll`:
grader.course.courses and grader.course.membership.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.auth.ownership import record_enrollment
from grader.course.courses import CourseError, add_assignment, create_course, free_assignments
from grader.course.membership import courses_of, enroll, members_of, unenroll
from grader.course.policies import course_run_limit
from grader.course.roster_entries import entry_of, shown_name
from grader.models import Course, CourseRole, Role, Submission, User
from grader.pages.common import (
    CourseInstructor,
    CourseInstructorForm,
    CourseOf,
    CourseStaff,
    Db,
    Sender,
    Viewer,
    forbidden,
    get_context,
    page,
    see_other,
)
from grader.pages.members_view import members_page
from grader.roles import TA_GRANTABLE, TA_POWER_WORDS
from grader.service import find_user
from grader.staff_settings import set_course_run_quota, set_ta_powers

router = APIRouter(include_in_schema=False)

MAY_CREATE = ("Only an account that may make courses (site role instructor: `grader user add NAME --role "
              "instructor`) makes one; ask the service's operator.")


def _list_page(request: Request, session: Session, user: User, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("form", {"slug": "", "title": ""})
    staffed = [(course, role) for course, role in courses_of(session, user.id) if role.is_staff]
    return page(request, "courses.html", user, status_code, courses=staffed,
                may_create=user.role is Role.instructor, **values)


@router.get("/courses", response_class=HTMLResponse)
def course_list(request: Request, session: Db, user: Viewer) -> Response:
    return _list_page(request, session, user)


@router.post("/courses", response_class=HTMLResponse)
async def course_create(request: Request, session: Db, user: Sender) -> Response:
    """Make a course; its maker is its first instructor."""
    if user.role is not Role.instructor:
        raise forbidden(MAY_CREATE)
    form = await request.form()
    typed = {"slug": str(form.get("slug", "")), "title": str(form.get("title", ""))}
    try:
        course = create_course(session, typed["slug"], typed["title"], user)
    except CourseError as exc:
        session.rollback()
        return _list_page(request, session, user, status.HTTP_400_BAD_REQUEST, error=str(exc), form=typed)
    return see_other(f"/courses/{course.slug}")


def _course_page(request: Request, session: Session, staff: CourseOf, status_code: int = 200,
                 **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("runs_error", None)
    values.setdefault("runs_typed", "" if staff.course.quota_runs is None else str(staff.course.quota_runs))
    settings = get_context(request).settings
    members = members_of(session, staff.course)
    runs, whose = course_run_limit(settings, staff.course)
    return page(request, "course.html", staff.user, status_code, course=staff.course, role=staff.role,
                grantable=[(p.value, TA_POWER_WORDS[p], p in staff.course.ta_granted) for p in TA_GRANTABLE],
                runs_now=f"{runs if runs else 'no quota'} ({whose})", service_runs=settings.quota_runs or "no quota",
                saved=request.query_params.get("saved"),
                staff_members=[(u, part) for u, part in members if part.is_staff],
                students=sum(1 for _, part in members if part is CourseRole.student),
                free=free_assignments(session) if staff.role is CourseRole.instructor else [],
                zone=get_context(request).settings.course_zone, added=request.query_params.get("added"), **values)


@router.get("/courses/{course}", response_class=HTMLResponse)
def course_page(request: Request, session: Db, staff: CourseStaff) -> Response:
    return _course_page(request, session, staff)


@router.post("/courses/{course}/assignments", response_class=HTMLResponse)
async def assignment_add(request: Request, session: Db, staff: CourseInstructorForm) -> Response:
    """Add an assignment that no course holds yet to the course."""
    slug = str((await request.form()).get("assignment", "")).strip()
    try:
        add_assignment(session, staff.course, slug)
    except CourseError as exc:
        session.rollback()
        return _course_page(request, session, staff, status.HTTP_400_BAD_REQUEST, error=str(exc))
    return see_other(f"/courses/{staff.course.slug}?added={quote(slug)}")


@router.post("/courses/{course}/ta-powers", response_class=HTMLResponse)
async def ta_powers_save(request: Request, session: Db, staff: CourseInstructorForm) -> Response:
    """What the course's TAs may do besides viewing and grading: each checked power of
    grader.roles.TA_GRANTABLE (none checked: nothing more)."""
    form = await request.form()
    set_ta_powers(session, staff.course, frozenset(p for p in TA_GRANTABLE if form.get(p.value) == "on"), Via.web,
                  staff.user, request_address(request))
    return see_other(f"/courses/{staff.course.slug}?saved=ta-powers#ta-powers")


@router.post("/courses/{course}/quota", response_class=HTMLResponse)
async def quota_save(request: Request, session: Db, staff: CourseInstructorForm) -> Response:
    """The graded runs each student may start per assignment of the course that sets none of its
    own: a number, 0 for no quota, empty for the service's KG_QUOTA_RUNS."""
    typed = str((await request.form()).get("quota_runs", "")).strip()
    try:
        set_course_run_quota(session, staff.course, typed, Via.web, staff.user, request_address(request))
    except ValueError as exc:
        return _course_page(request, session, staff, status.HTTP_400_BAD_REQUEST, runs_error=str(exc),
                            runs_typed=typed)
    return see_other(f"/courses/{staff.course.slug}?saved=quota#quota")


# ---- members -------------------------------------------------------------------------------


@router.get("/courses/{course}/members", response_class=HTMLResponse)
def members_list(request: Request, session: Db, staff: CourseInstructor) -> Response:
    return members_page(request, session, staff)


def _own_part_refused(request: Request, session: Session, staff: CourseOf) -> HTMLResponse:
    """Nobody changes or ends their own part here, so a course always keeps the instructor
    who could undo a change."""
    return members_page(request, session, staff, status.HTTP_400_BAD_REQUEST,
                         error="You cannot change your own part; ask another instructor of this course.")


@router.post("/courses/{course}/members", response_class=HTMLResponse)
async def member_save(request: Request, session: Db, staff: CourseInstructorForm) -> Response:
    """Enroll an existing account as an instructor, TA or student (changing their part if enrolled)."""
    form = await request.form()
    username = str(form.get("username", "")).strip()
    kept = {"username": username, "part": str(form.get("part", ""))}
    try:
        part = CourseRole(str(form.get("part", "")))
    except ValueError:
        return members_page(request, session, staff, status.HTTP_400_BAD_REQUEST, kept=kept,
                             error="Choose whether they join as an instructor, a TA or a student.")
    target = find_user(session, username)
    if target is None:
        return members_page(request, session, staff, status.HTTP_400_BAD_REQUEST, kept=kept,
                             error=f"No account “{username}”: create accounts with the roster import "
                                   "(Roster page) or with the command grader user add.")
    if target.id == staff.user.id:
        return _own_part_refused(request, session, staff)
    if enroll(session, target, staff.course, part):  # the enrollment alone: nothing of the account changes
        record_enrollment(session, staff.user, target, staff.course, part, Via.web, request_address(request))
    return see_other(f"/courses/{staff.course.slug}/members?saved={quote(username)}")


def _member_of(session: Session, course: Course, username: str) -> tuple[User, CourseRole] | None:
    return next(((u, part) for u, part in members_of(session, course) if u.username == username), None)


@router.get("/courses/{course}/members/{username}/remove", response_class=HTMLResponse)
def member_remove_confirm(request: Request, username: str, session: Db, staff: CourseInstructor) -> Response:
    """The confirmation of a removal: who, as what, and what stays."""
    course = staff.course
    if username == staff.user.username:
        return _own_part_refused(request, session, staff)
    member = _member_of(session, course, username)
    back = f"/courses/{course.slug}/members"
    if member is None:
        return page(request, "confirm.html", staff.user, title="Remove a member", details=[], fields=None,
                    question=f"“{username}” is not a member of {course.slug}: there is nothing to remove.",
                    cancel=back, cancel_label="Back to the members")
    target, part = member
    uploads = session.scalar(select(func.count(Submission.id)).where(
        Submission.user_id == target.id, Submission.assignment_id.in_([a.id for a in course.assignments]))) or 0
    entry = entry_of(session, target.id, course.id)
    section = entry.section if entry else None
    who = ", ".join(x for x in (shown_name(entry, target), f"section {section}" if section else "") if x)
    return page(request, "confirm.html", staff.user, title="Remove a member",
                question=f"Remove {target.username} ({part.label}{', ' + who if who else ''}) from {course.slug}?",
                details=[f"They will no longer see {course.slug}'s assignments or upload to them"
                         + (" and lose its staff pages." if part.is_staff else "."),
                         f"Their {uploads} submission{'' if uploads == 1 else 's'} and grades stay on record; "
                         "adding them again on the members page gives their access back."],
                action=f"{back}/{quote(username)}/remove", fields=[("confirm", "remove")],
                confirm_label=f"Remove {target.username}", cancel=back, cancel_label="Keep them, back to the members")


@router.post("/courses/{course}/members/{username}/remove", response_class=HTMLResponse)
async def member_remove(request: Request, username: str, session: Db, staff: CourseInstructorForm) -> Response:
    """Take someone out of the course once confirmed: they no longer see it; their submissions stay."""
    if username == staff.user.username:
        return _own_part_refused(request, session, staff)
    if (await request.form()).get("confirm") != "remove":
        return see_other(f"/courses/{staff.course.slug}/members/{quote(username)}/remove")
    target = find_user(session, username)
    if target is not None:  # an unknown or already removed member: nothing to do
        unenroll(session, target, staff.course)
    return see_other(f"/courses/{staff.course.slug}/members")
