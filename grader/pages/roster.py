"""The roster page of a course's instructor: import students into a course they instruct (a CSV
imported in the background by a worker, followed here, its new accounts' first passwords
downloaded once as CSV; grader.course.roster_jobs), after a confirmation page that says what the file
will do, and issue a first-login link to an account they still set up (grader.auth.ownership).
Anyone else gets a 403 page saying who may."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grader.api.deps import Context
from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.auth.first_logins import issue_first_login
from grader.auth.ownership import not_in_your_courses, refusal, refused
from grader.auth.sessions import current_user
from grader.course.courses import course_holding
from grader.course.membership import courses_of
from grader.course.roster import parse_roster
from grader.course.roster_jobs import (
    KEY_COOKIE,
    KEY_MAX_AGE_S,
    KEY_PATH,
    RosterJobError,
    latest_job,
    start_job,
    take_passwords,
    view,
)
from grader.models import Course, CourseRole, Enrollment, Role, RosterJob, User
from grader.pages.common import (
    Db,
    Sender,
    Viewer,
    absent,
    forbidden,
    get_context,
    page,
    see_other,
    staff_course,
)
from grader.roles import STAFF, WHO_MAY, Power
from grader.service import find_user

router = APIRouter(include_in_schema=False)
FORMS = "email,name[,section] per line, or a header row naming Canvas's or generic columns"
SHOWN_ERRORS = 10  # lines that cannot be imported, named on the confirmation page


def _instructed(session: Session, user: User) -> list[str]:
    """The courses (slugs) the user is an instructor of: the roster page imports into one of
    them; refused with a 403 page when there is none."""
    instructed = [course.slug for course, role in courses_of(session, user.id) if role is CourseRole.instructor]
    if not instructed:
        raise forbidden(WHO_MAY[Power.manage] + "; you are an instructor of no course.")
    return instructed


def _chosen(request: Request, session: Session, asked: str, instructed: list[str]) -> str:
    """The course a roster goes to: the one asked for, else the course of the service's default
    assignment where the user instructs it, else their first."""
    default = course_holding(session, get_context(request).default_assignment)
    return asked or (default.slug if default is not None and default.slug in instructed else instructed[0])


def _roster_page(request: Request, session: Session, user: User, status_code: int = 200,
                 **values: Any) -> HTMLResponse:
    """The roster page of a course's instructor. It shows the user's latest import."""
    instructed = _instructed(session, user)
    settings = get_context(request).settings
    job = latest_job(session, user, settings)
    values.setdefault("error", None)
    values.setdefault("pasted", "")  # the forms' fields as sent, when refused
    values.setdefault("reset_username", "")
    values.setdefault("reset", None)
    values.setdefault("chosen", _chosen(request, session, request.query_params.get("course", ""), instructed))
    held = job is not None and KEY_COOKIE.format(job.id) in request.cookies
    return page(request, "roster.html", user, status_code, max_kib=f"{settings.roster_max_bytes / 1024:g}",
                courses=instructed, job=view(job) if job else None, key_held=held, zone=settings.course_zone,
                **values)


@router.get("/roster", response_class=HTMLResponse)
def roster_form(request: Request, session: Db, user: Viewer) -> Response:
    return _roster_page(request, session, user)


@router.get("/roster/job.json")
def roster_job_status(request: Request, ctx: Context, session: Db) -> Response:
    """The user's newest import: state, students imported of those to import, error. JSON, so a
    logged-out poller gets 401 (the page says so), not a redirect to the login page."""
    user = current_user(request, session)
    if user is None:
        return JSONResponse({"detail": "log in"}, status.HTTP_401_UNAUTHORIZED)
    _instructed(session, user)
    job = latest_job(session, user, ctx.settings)
    return JSONResponse(view(job).as_json() if job else {"state": None, "final": True},
                        headers={"Cache-Control": "no-store"})


async def _roster_text(form: Any, limit: int) -> str:
    """The CSV from the file field, else (no file, or an empty one) from the text area;
    ValueError says what is wrong."""
    upload = form.get("file")
    data = await upload.read(limit + 1) if upload is not None and not isinstance(upload, str) else b""
    if not data:
        data = str(form.get("text") or "").encode()
        upload = None
    name = f"“{upload.filename}”" if upload is not None else "The pasted roster"
    if len(data) > limit:
        raise ValueError(f"{name} is larger than {limit / 1024:g} KiB.")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name} is not UTF-8 text; save the roster as CSV (UTF-8).") from None


def _held_keys(request: Request) -> set[int]:
    """The jobs whose key this browser holds (its key cookies)."""
    prefix = KEY_COOKIE.format("")
    ids = (name.removeprefix(prefix) for name in request.cookies if name.startswith(prefix))
    return {int(i) for i in ids if i.isdigit()}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _confirm_page(request: Request, session: Session, user: User, course: Course, text: str) -> HTMLResponse:
    """The confirmation of an import: how many students, how many new accounts, what happens to
    the existing ones and which lines are skipped; its button sends the same roster again."""
    lines, errors = parse_roster(text)
    logins = [ln.login for ln in lines]
    accounts = {login: (role, part) for login, role, part in session.execute(
        select(User.username, User.role, Enrollment.role).outerjoin(
            Enrollment, (Enrollment.user_id == User.id) & (Enrollment.course_id == course.id))
        .where(User.username.in_(logins)))}
    new = sum(1 for ln in lines if ln.login not in accounts)
    staff = sum(1 for ln in lines if ln.login in accounts and (accounts[ln.login][0] is not Role.student
                                                                or accounts[ln.login][1] in STAFF))
    students, skipped = len(lines) - staff, [str(e) for e in errors[:SHOWN_ERRORS]]
    if len(errors) > SHOWN_ERRORS:
        skipped.append(f"and {len(errors) - SHOWN_ERRORS} more")
    title, back = "Import students", "/roster"
    if not students:
        return page(request, "confirm.html", user, title=title, fields=None, cancel=back,
                    cancel_label="Back to the roster, to fix the file",
                    question=f"No line of this roster can be imported into {course.slug}.",
                    details=([f"{_plural(staff, 'line')} name{'s' if staff == 1 else ''} staff accounts, "
                              "which an import leaves unchanged."] if staff else [])
                    + ([f"Lines that cannot be imported: {'; '.join(skipped)}."] if errors else []))
    details = [f"{_plural(new, 'new account')}: each gets a first password, which you download once as a CSV "
               "when the import is done (from this browser only)." if new else "No new account is created.",
               f"{_plural(students - new, 'student')} already ha{'s' if students - new == 1 else 've'} an account: "
               "they keep their password and get the file's name and section (and e-mail, while nobody has used "
               "the account); one that another course holds too is only enrolled." if students > new else "",
               f"{_plural(staff, 'line')} name{'s' if staff == 1 else ''} staff accounts: left unchanged." if staff else "",
               f"{_plural(len(errors), 'line')} cannot be imported and {'is' if len(errors) == 1 else 'are'} "
               f"skipped: {'; '.join(skipped)}." if errors else "",
               "A worker imports them in the background; the roster page follows it."]
    return page(request, "confirm.html", user, title=title,
                question=f"Import {_plural(students, 'student')} into {course.slug}, each enrolled there as a "
                         "student?",
                details=[d for d in details if d], action=back, confirm_label=f"Import {_plural(students, 'student')}",
                fields=[("course", course.slug), ("text", text), ("confirm", "import")],
                cancel=back, cancel_label="Change nothing, back to the roster")


@router.post("/roster", response_class=HTMLResponse)
async def roster_import(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """Start importing the roster in the background once confirmed (without the confirmation's
    field: the confirmation page, which sends the same roster again); the page then follows the
    job. The job's key goes to this browser only (grader.course.roster_jobs)."""
    form = await request.form()
    slug = _chosen(request, session, str(form.get("course") or ""), _instructed(session, user))
    course = staff_course(session, user, slug, Power.manage).course
    try:
        text = await _roster_text(form, ctx.settings.roster_max_bytes)
        if not text.strip():
            raise ValueError(f"Choose a CSV file or paste the roster ({FORMS}).")
        if form.get("confirm") != "import":
            return _confirm_page(request, session, user, course, text)
        job, key = await run_in_threadpool(start_job, session, ctx.celery, ctx.settings, course, user, text,
                                           _held_keys(request))
    except (ValueError, RosterJobError) as exc:
        code = status.HTTP_409_CONFLICT if isinstance(exc, RosterJobError) else status.HTTP_400_BAD_REQUEST
        return _roster_page(request, session, user, code, error=str(exc), chosen=course.slug,
                            pasted=str(form.get("text") or ""))
    response = see_other("/roster")
    response.set_cookie(KEY_COOKIE.format(job.id), key, max_age=KEY_MAX_AGE_S, path=KEY_PATH, httponly=True,
                        samesite="strict", secure=ctx.settings.session_https_only)
    return response


@router.post("/roster/imports/{job_id}/passwords.csv")
async def roster_passwords(request: Request, job_id: int, session: Db, user: Sender) -> Response:
    """The import's first passwords as login,password CSV, once; the key's cookie is deleted with
    it. A refusal (taken already, another browser, not done) is the roster page with the reason."""
    job = session.get(RosterJob, job_id)
    if job is None or job.requested_by != user.id:
        raise absent(f"import {job_id} of yours")
    cookie = KEY_COOKIE.format(job.id)
    try:
        csv_text = take_passwords(session, job, request.cookies.get(cookie))
    except RosterJobError as exc:
        return _roster_page(request, session, user, status.HTTP_410_GONE if job.passwords_taken_at else
                            status.HTTP_409_CONFLICT, error=str(exc))
    response = Response(csv_text, media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="first-passwords-{job.id}.csv"', "Cache-Control": "no-store"})
    response.delete_cookie(cookie, path=KEY_PATH, httponly=True, samesite="strict",
                           secure=get_context(request).settings.session_https_only)
    return response


@router.post("/roster/reset-link", response_class=HTMLResponse)
async def roster_reset_link(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """Issues a first-login link for an account of a course the user instructs that they still
    set up (grader.auth.ownership: never used, in no course of another's) and shows it once on
    the roster page; refused otherwise in a sentence naming who can, recorded."""
    form = await request.form()
    username = str(form.get("username", "")).strip()
    target = find_user(session, username)
    why = not_in_your_courses(username) if target is None else refusal(session, user, target)
    if why is not None:
        refused(session, user, target, "issue a first-login link", why.words, Via.web, request_address(request),
                login=username)
        return _roster_page(request, session, user, status.HTTP_404_NOT_FOUND if why.absent else
                            status.HTTP_403_FORBIDDEN, reset_username=username, error=why.words)
    assert target is not None  # an unknown login was refused above
    # Built on KG_PUBLIC_URL, never on the request's Host header (which the sender controls);
    # without it, the path, and the page says how to set it
    link = issue_first_login(session, user, target, ctx.settings, "shown on the roster page", request_address(request))
    response = _roster_page(request, session, user, reset={
        "username": target.username, "link": link, "absolute": bool(ctx.settings.public_url),
        "hours": ctx.settings.password_reset_max_age_s / 3600})
    response.headers["Cache-Control"] = "no-store"  # the link is shown once
    return response
