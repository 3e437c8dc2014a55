"""What every page module shares: the templates (with the navigation the user's roles give),
the request's database session, and the dependencies for who may see a page (the logged-in
user; a POSTed form's user, CSRF token checked; the staff of the assignment or course in the
path, by what they may do there: grader.roles's powers).

A dependency that refuses raises `PageDenied`; grader.app registers `page_denied` as its one
handler, which answers the login page (303), a 403 page saying why (a refused form, or a role
that may not do this) or the 404 page (an assignment of a course one is not in reads as
absent). Browser sessions and CSRF tokens are grader.auth.sessions's.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlencode, urlsplit

from fastapi import Depends, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import select
from sqlalchemy.orm import Session, object_session
from starlette.routing import BaseRoute, Match

from grader.api.deps import get_context
from grader.auth.sessions import CSRF_FIELD, CsrfError, check_csrf, csrf_token, current_user
from grader.course.adjustments import waiting
from grader.course.membership import assignments_of, course_roles_of, role_in, role_in_course
from grader.db import session_scope
from grader.models import Assignment, Course, CourseRole, Role, Submission, User
from grader.roles import STAFF, Power, granted_powers, held_powers, may, refused

templates = Jinja2Templates(directory=str(Path(__file__).parent.parent / "templates"))

CSRF_MESSAGE = "This form was not sent from a current kernelgrade page. Reload the page and try again."


# Why the login page is shown instead of the page asked for (its `ended` query field): fixed
# sentences, so that a link cannot put words of its own on the page.
LOGIN_NOTICES = {
    "session": "Your session has ended. Log in again to go on where you were.",
    "form": "Your session ended before the form arrived, so nothing was changed. Log in and send it again.",
    "upload": "Your session ended before the upload arrived, so the file was not kept. "
              "Log in, then choose the file again and upload it.",
}


class PageDenied(Exception):
    """The page asked for is not shown: `login` (nobody is logged in; `what`, a key of
    LOGIN_NOTICES, says that a session ended), `csrf` (the form's token is missing or is not
    this session's), `forbidden` (the user's role may not do this; `what` says so for the 403
    page) or `absent` (no such thing among what the user may see; `what` names it for the 404
    page)."""

    def __init__(self, kind: Literal["login", "csrf", "forbidden", "absent"], what: str = "") -> None:
        super().__init__(kind, what)
        self.kind = kind
        self.what = what


def absent(what: str) -> PageDenied:
    return PageDenied("absent", what)


def forbidden(why: str) -> PageDenied:
    return PageDenied("forbidden", why)


def db_session(request: Request) -> Iterator[Session]:
    """The request's session: committed when the page function returns (before the answer is
    sent, so a redirect's next page sees the change), rolled back when it raises."""
    with session_scope(get_context(request).sessions) as session:
        yield session


Db = Annotated[Session, Depends(db_session, scope="function")]


def logged_in(request: Request, session: Db) -> User:
    had_user = "uid" in request.session  # a login's cookie whose session has since ended
    user = current_user(request, session)
    if user is None:
        raise PageDenied("login", ("form" if request.method == "POST" else "session") if had_user else "")
    return user


async def form_sender(request: Request, session: Db) -> User:
    """The logged-in user behind a POSTed form whose CSRF token is this session's (the login
    page first when nobody is logged in)."""
    user = logged_in(request, session)
    await check_form(request)
    return user


async def check_form(request: Request) -> None:
    """The POSTed form carries this session's CSRF token (the form is parsed once, and cached)."""
    form = await request.form()
    try:
        check_csrf(request, form.get(CSRF_FIELD))
    except CsrfError:
        raise PageDenied("csrf") from None


Viewer = Annotated[User, Depends(logged_in)]
Sender = Annotated[User, Depends(form_sender)]
csrf_checked = Depends(check_form)  # for a form anyone may send (login, logout, reset)


def check_power(role: CourseRole | None, power: Power, course: Course | None, what: str,
                also: tuple[Power, ...] = ()) -> CourseRole:
    """`role` (the user's in `course`) when it has `power` (or one of `also`) there, the powers
    the course gives its TAs included: absent (`what` names the thing asked for) outside the
    course, forbidden with why (`power`'s sentence) inside it."""
    denied = refused(role, power, course.slug if course else None, course.ta_granted if course else frozenset(), also)
    if denied is not None:
        raise absent(what) if denied.absent else forbidden(denied.words)
    assert role is not None
    return role


def staff_assignment(session: Session, user: User, slug: str, power: Power = Power.view,
                     also: tuple[Power, ...] = ()) -> Assignment:
    """The assignment `slug` when `user` has `power` (or one of `also`) in its course (check_power)."""
    assignment = session.scalar(select(Assignment).where(Assignment.slug == slug))
    what = f"assignment {slug!r} among those of your courses"
    if assignment is None:
        raise absent(what)
    check_power(role_in(session, user.id, assignment.id), power, assignment.course, what, also)
    return assignment


def acting_on(session: Session, user: User, submission: Submission | None, power: Power | None,
              what: str) -> Submission:
    """`submission` when the user may read it (theirs, or staff of its course) and, with `power`,
    has that power in its course: absent when they may not even read it, forbidden when they
    may read it but not do this."""
    role = role_in(session, user.id, submission.assignment_id) if submission is not None else None
    if submission is None or role is None or not (may(role, Power.view) or submission.user_id == user.id):
        raise absent(what)
    if power is not None:
        check_power(role, power, submission.assignment.course, what)
    return submission


def taught_slugs(session: Session, user: User) -> list[str]:
    """The assignments of the courses the user is staff of, by slug."""
    return [a.slug for a in assignments_of(session, user.id, STAFF)]


def default_slug(request: Request, taught: list[str]) -> str:
    """The service's default assignment when it is among `taught` (or nothing is), else the first."""
    default = get_context(request).default_assignment
    return default if default in taught or not taught else taught[0]


@dataclass(frozen=True)
class StaffOf:
    """The logged-in user and the assignment of the path, in whose course they may do what
    the dependency asked for."""

    user: User
    assignment: Assignment


class _OnPage:
    """The dependency of a page that needs `power` (or one of `also`) in the course of the
    assignment `{slug}`."""

    def __init__(self, power: Power, also: tuple[Power, ...] = ()) -> None:
        self.power, self.also = power, also

    def __call__(self, slug: str, user: Viewer, session: Db) -> StaffOf:
        return StaffOf(user, staff_assignment(session, user, slug, self.power, self.also))


class _OnForm(_OnPage):
    """The same for a POSTed form (its CSRF token checked first)."""

    def __call__(self, slug: str, user: Sender, session: Db) -> StaffOf:
        return super().__call__(slug, user, session)


Staff = Annotated[StaffOf, Depends(_OnPage(Power.view))]  # see everything of the course: TAs and instructors
GraderForm = Annotated[StaffOf, Depends(_OnForm(Power.grade))]  # grade: TAs and instructors
Instructor = Annotated[StaffOf, Depends(_OnPage(Power.manage))]  # its instructors only
InstructorForm = Annotated[StaffOf, Depends(_OnForm(Power.manage))]
# What instructors may also let TAs do (grader.roles.TA_GRANTABLE): the settings page shows those
# of its forms the user may send
SettingsPage = Annotated[StaffOf, Depends(_OnPage(Power.schedule, (Power.extend,)))]
ScheduleForm = Annotated[StaffOf, Depends(_OnForm(Power.schedule))]
ExtensionPage = Annotated[StaffOf, Depends(_OnPage(Power.extend))]
ExtensionForm = Annotated[StaffOf, Depends(_OnForm(Power.extend))]
QueuePage = Annotated[StaffOf, Depends(_OnPage(Power.queue))]
QueueForm = Annotated[StaffOf, Depends(_OnForm(Power.queue))]


@dataclass(frozen=True)
class CourseOf:
    """The logged-in user, the course of the path and their role there."""

    user: User
    course: Course
    role: CourseRole


def staff_course(session: Session, user: User, slug: str, power: Power) -> CourseOf:
    """The course `slug` when `user` has `power` there (check_power)."""
    course, what = session.scalar(select(Course).where(Course.slug == slug)), f"course {slug!r} among yours"
    if course is None:
        raise absent(what)
    return CourseOf(user, course, check_power(role_in_course(session, user.id, course.id), power, course, what))


class _OnCoursePage:
    """The dependency of a course page that needs `power` in the course `{course}`."""

    def __init__(self, power: Power) -> None:
        self.power = power

    def __call__(self, course: str, user: Viewer, session: Db) -> CourseOf:
        return staff_course(session, user, course, self.power)


class _OnCourseForm(_OnCoursePage):
    """The same for a POSTed form (its CSRF token checked first)."""

    def __call__(self, course: str, user: Sender, session: Db) -> CourseOf:
        return super().__call__(course, user, session)


CourseStaff = Annotated[CourseOf, Depends(_OnCoursePage(Power.view))]
CourseInstructor = Annotated[CourseOf, Depends(_OnCoursePage(Power.manage))]
CourseInstructorForm = Annotated[CourseOf, Depends(_OnCourseForm(Power.manage))]


@dataclass(frozen=True)
class Nav:
    """What the navigation offers a logged-in user, from their roles in their courses."""

    student: bool  # the student pages (upload, own submissions): a student somewhere, or in no course at all
    staff: bool  # the staff pages (gradebook, course pages): an instructor or TA somewhere
    instructs: frozenset[int]  # the courses (ids) they are an instructor of: roster and settings there
    creates: bool  # may make courses (site role instructor)
    roles: str  # the roles they hold, in words, for the header
    requests: int = 0  # regrade requests waiting for an answer in the assignments they are staff of
    queue: str | None = None  # the queue where one has waited longest, else their first assignment's
    powers: Mapping[int, frozenset[Power]] = field(default_factory=dict)  # course id -> what they may do there

    def may(self, course_id: int | None, power: str) -> bool:
        """Whether they hold `power` (a grader.roles.Power's name) in the course, for the links offered."""
        return course_id is not None and power in self.powers.get(course_id, frozenset())

    @property
    def home(self) -> str | None:
        """Where `/` sends them instead of the upload page: staff land on the gradebook (or, in no
        course yet, on the course list where they make one)."""
        if self.student:
            return None
        return "/gradebook" if self.staff else "/courses"


def nav_for(session: Session, user: User) -> Nav:
    roles = course_roles_of(session, user.id)
    held = set(roles.values())
    staff, creates = any(role.is_staff for role in held), user.role is Role.instructor
    words = ", ".join(role.label for role in CourseRole if role in held) or user.role.value
    taught = assignments_of(session, user.id, STAFF) if staff else []
    requests, oldest = waiting(session, [a.id for a in taught])
    queue = oldest or (taught[0].slug if taught else None)
    ta_of = [cid for cid, role in roles.items() if role is CourseRole.ta]
    granted = {cid: text for cid, text in session.execute(select(Course.id, Course.ta_powers)
                                                          .where(Course.id.in_(ta_of)))} if ta_of else {}
    return Nav(student=CourseRole.student in held or not (staff or creates), staff=staff,
               instructs=frozenset(cid for cid, role in roles.items() if role is CourseRole.instructor),
               creates=creates, roles=words, requests=requests,
               queue=f"/assignments/{queue}/regrade-requests" if queue else None,
               powers={cid: held_powers(role, granted_powers(granted.get(cid, ""))) for cid, role in roles.items()})


def page(request: Request, name: str, user: User | None, status_code: int = 200, **values: Any) -> HTMLResponse:
    session = object_session(user) if user is not None else None
    values.update(user=user, csrf=csrf_token(request), csrf_field=CSRF_FIELD,
                  nav=nav_for(session, user) if user is not None and session is not None else None)
    return templates.TemplateResponse(request, name, values, status_code=status_code)


def see_other(path: str) -> RedirectResponse:
    """Where a form post (or a page that needs a login) sends the browser next."""
    return RedirectResponse(path, status_code=status.HTTP_303_SEE_OTHER)


def error_page(request: Request, status_code: int, title: str, message: str,
               headers: dict[str, str] | None = None) -> HTMLResponse:
    """templates/error.html with the visitor's navigation (logged in or not), in a session of
    its own (the page's may have been rolled back)."""
    with session_scope(get_context(request).sessions) as session:
        user = current_user(request, session)
        return templates.TemplateResponse(request, "error.html", {
            "user": user, "csrf": csrf_token(request), "csrf_field": CSRF_FIELD, "title": title, "message": message,
            "nav": nav_for(session, user) if user is not None else None,
        }, status_code=status_code, headers=headers)


def safe_next(target: object) -> str:
    """`target` when it is an address of this site (a path: /..., no scheme, no host), else the
    start page: a login never sends the browser to another site (//host, /\\host, https:...)."""
    if not isinstance(target, str) or not target.startswith("/") or len(target) > 2000:
        return "/"
    if "\\" in target or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in target):
        return "/"
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc and target[1:2] != "/" else "/"


def page_around(routes: Sequence[BaseRoute], path: str, include_self: bool = False) -> str:
    """The nearest address at (with `include_self`) or above `path` that answers a GET; the
    start page when none does."""
    parts = path.rstrip("/").split("/")
    if not include_self:
        parts.pop()
    while parts:
        candidate = "/".join(parts) or "/"
        scope = {"type": "http", "path": candidate, "root_path": "", "method": "GET"}
        if any(route.matches(scope)[0] is Match.FULL for route in routes):
            return candidate
        parts.pop()
    return "/"


LOGIN_REFUSAL = "login_refusal"  # the session's key for why a sign-in logged nobody in


def login_refused(request: Request, sentence: str, back: object) -> RedirectResponse:
    """To the login page, which shows `sentence` (why a single sign-on logged nobody in) once and
    then goes on to `back`. The sentence travels in the signed session cookie, never in the
    address, so that a link cannot put words of its own on the page."""
    request.session[LOGIN_REFUSAL] = sentence
    target = safe_next(back)
    return see_other("/login" + (f"?{urlencode({'next': target})}" if target != "/" else ""))


def login_path(request: Request, ended: str = "") -> str:
    """The login page, told where to go back to: the page asked for (a GET), or the page of the
    form that was sent (a POST: its address when that answers a GET, else the page around it)."""
    if request.method in ("GET", "HEAD"):
        asked = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    else:
        asked = page_around(request.app.router.routes, request.url.path, include_self=True)
    fields = {"next": asked} if asked != "/" else {}
    if ended in LOGIN_NOTICES:
        fields["ended"] = ended
    return "/login" + (f"?{urlencode(fields)}" if fields else "")


def page_denied(request: Request, exc: Exception) -> Response:
    """The one answer to every `PageDenied`."""
    assert isinstance(exc, PageDenied)
    if exc.kind == "login":
        return see_other(login_path(request, exc.what))
    if exc.kind == "csrf":
        return error_page(request, status.HTTP_403_FORBIDDEN, "Form refused", CSRF_MESSAGE)
    if exc.kind == "forbidden":
        return error_page(request, status.HTTP_403_FORBIDDEN, "Not allowed", exc.what)
    return error_page(request, status.HTTP_404_NOT_FOUND, "Not found", f"No {exc.what}.")
