"""The roster page of a course's instructor: import students into a course they instruct (a CSV
imported in the background by a worker, followed here, its new accounts' first passwords
downloaded once as CSV; grader.course.roster_jobs), after a confirmation page that says what the file
will do, and issue a first-login link to an account they still set up (grader.auth.ownership).
Anyone else gets a 403 page saying who may."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
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
from grader.course.roster import RosterPreview, preview_roster
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
from grader.ids import RowId, parse_row_id
from grader.models import Course, CourseRole, RosterJob, User
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
from grader.roles import WHO_MAY, Power
from grader.service import find_user

router = APIRouter(include_in_schema=False)
FORMS = "email,name[,section] per line, or a header row naming Canvas's or generic columns"
SHOWN_LINES = 10  # per list of lines on the confirmation page (skipped, flagged, changed)
# The roster fields whose changes the confirmation page counts, and what it calls each
CHANGE_WORDS = (("full_name", "name"), ("section", "section"), ("email", "e-mail address"),
                ("canvas_user_id", "Canvas ID"), ("sis_user_id", "SIS User ID"), ("sis_login_id", "SIS Login ID"))


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
    return {named for named in map(parse_row_id, ids) if named is not None}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _capped(items: list[str]) -> list[str]:
    return items[:SHOWN_LINES] + ([f"and {len(items) - SHOWN_LINES} more"] if len(items) > SHOWN_LINES else [])


def _changes_sentence(preview: RosterPreview, slug: str) -> str:
    """What the file changes of what `slug` shows of its enrolled students, field by field."""
    counted = [_plural(len(preview.changes[name]), word) for name, word in CHANGE_WORDS if name in preview.changes]
    if not counted:
        return f"It changes no name, section, e-mail address or Canvas or SIS id that {slug} shows."
    listed = ", ".join(counted[:-1]) + (" and " if len(counted) > 1 else "") + counted[-1]
    return f"In {slug}, it changes {listed} of students already enrolled."


def _flagged_lists(preview: RosterPreview, slug: str) -> list[tuple[str, str, list[str], bool]]:
    """The confirmation's lists: the cells a spreadsheet would run, the notice addresses that change."""
    lists = []
    if preview.warnings:
        lists.append(("roster-formulas", f"{_plural(len(preview.warnings), 'line')} ha{'s' if len(preview.warnings) == 1 else 've'} "
                      "a cell that a spreadsheet would run as a formula. The import keeps it as written and every "
                      "export writes it as text; you may want to fix the file first:", _capped(preview.warnings), True))
    emails = preview.changes.get("email", [])
    if emails:
        lists.append(("roster-email-changes", f"The e-mail address that {slug}'s notices go to changes for "
                      f"{_plural(len(emails), 'student')} (their account's own address, where password reset links "
                      "go, stays as it is):",
                      _capped([f"{login}: {now or 'none'} → {after or 'none'}" for login, now, after in emails]), True))
    return lists


def _confirm_page(request: Request, session: Session, user: User, course: Course, text: str) -> HTMLResponse:
    """The confirmation of an import: how many students, how many new accounts, what it changes
    of what the course shows of the existing ones (the e-mail addresses named), which lines are
    skipped and which cells look like formulas; its button sends the same roster again."""
    preview = preview_roster(session, text, course)
    students, new, skipped = preview.importing, preview.new, [str(e) for e in preview.skipped]
    title, back = "Import students", "/roster"
    skipped_line = (f"{_plural(len(skipped), 'line')} cannot be imported and {'is' if len(skipped) == 1 else 'are'} "
                    f"skipped: {'; '.join(_capped(skipped))}.") if skipped else ""
    if not students:
        return page(request, "confirm.html", user, title=title, fields=None, cancel=back,
                    cancel_label="Back to the roster, to fix the file",
                    question=f"No line of this roster can be imported into {course.slug}.",
                    details=[skipped_line] if skipped else [])
    existing = students - new
    details = [f"{_plural(new, 'new account')}: each gets a first password, which you download once as a CSV "
               "when the import is done (from this browser only)." if new else "No new account is created.",
               f"{_plural(existing, 'student')} already ha{'s' if existing == 1 else 've'} an account: it stays as "
               f"it is (login, password, own e-mail address, other courses); what {course.slug} shows of them "
               "becomes the file's (name, section, e-mail for its notices, Canvas and SIS ids)." if existing else "",
               _changes_sentence(preview, course.slug) if existing else "",
               skipped_line,
               "A worker imports them in the background; the roster page follows it."]
    return page(request, "confirm.html", user, title=title,
                question=f"Import {_plural(students, 'student')} into {course.slug}, each enrolled there as a "
                         "student?",
                details=[d for d in details if d], lists=_flagged_lists(preview, course.slug), action=back,
                confirm_label=f"Import {_plural(students, 'student')}",
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
async def roster_passwords(request: Request, job_id: RowId, session: Db, user: Sender) -> Response:
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
