"""Course operations pages for an assignment's staff: settings (schedule, late policy, score
policy, extensions), members (who is enrolled, as student or staff), grading controls
(pause / drain / resume, re-grade everything) and the similarity report with its
side-by-side pair view.

Each page uses grader.web's session, CSRF and staff checks (someone who is not staff of the
assignment gets the 404 page, as for the gradebook), and the same functions as the `grader`
commands: grader.course_settings, grader.membership, grader.grading_control,
grader.similarity_store.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request, status
from fastapi.responses import FileResponse, HTMLResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grader.course_ops import SCORE_POLICIES, late_policy
from grader.course_settings import ScheduleChange, ScheduleError, extend_student, extensions_of, update_schedule
from grader.grading_control import grading_state, resume, set_paused
from grader.membership import assignments_of, enroll, members_of, unenroll
from grader.models import Assignment, CourseRole, User
from grader.runs.engine_config import pipeline_config
from grader.service import NotFound, find_user
from grader.similarity_base import assignment_base, base_path, save_base
from grader.similarity_report import describe_ranges, numbered_lines, starter_lines
from grader.similarity_store import compute_report, fingerprint_dir, load_report, pair_sources, report_path, save_report
from grader.web import _db, _form_user, _page, _see_other, _taught_assignment, _to_login, get_context
from grader.websession import current_user
from worker.rubric import RubricError, load_rubric
from worker.unpack import BadArchive

router = APIRouter(include_in_schema=False)

SHOWN_PAIRS = 100  # pairs per page of the similarity ranking (every pair is on some page)
SCHEDULE_FIELDS = ("release", "due", "grace", "late_window", "penalty_per_day", "score_policy")


def _staff(request: Request, session: Session, slug: str, user: User | None = None) -> tuple[User, Assignment] | Response:
    """The logged-in user and `slug` when they are its staff, else the answer to send (login, 404)."""
    user = user or current_user(request, session)
    if user is None:
        return _to_login()
    assignment = _taught_assignment(request, session, user, slug)
    return assignment if isinstance(assignment, Response) else (user, assignment)


async def _staff_form(request: Request, session: Session, slug: str) -> tuple[User, Assignment, Any] | Response:
    """As `_staff` for a POSTed form, whose CSRF token is checked first."""
    form = await request.form()
    user = _form_user(request, session, form)
    if isinstance(user, Response):
        return user
    found = _staff(request, session, slug, user)
    return found if isinstance(found, Response) else (*found, form)


@router.get("/assignments", response_class=HTMLResponse)
def assignment_list(request: Request) -> Response:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return _to_login()
        return _page(request, "ops_assignments.html", user,
                     assignments=assignments_of(session, user.id, CourseRole.staff))


# ---- settings -----------------------------------------------------------------------------


def _duration_text(delta: timedelta) -> str:
    """A duration as `grader.course_settings.parse_duration` reads it back ("" for none)."""
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s" if seconds else ""


def _instant_text(at: datetime | None, zone: ZoneInfo) -> str:
    return at.astimezone(zone).strftime("%Y-%m-%dT%H:%M:%S") if at else ""


def _schedule_values(assignment: Assignment, zone: ZoneInfo) -> dict[str, str]:
    """The form's fields for the stored schedule."""
    policy = late_policy(assignment)
    return {"release": _instant_text(policy.release_at, zone), "due": _instant_text(policy.due_at, zone),
            "grace": _duration_text(policy.grace), "late_window": _duration_text(policy.late_window),
            "penalty_per_day": f"{policy.penalty_per_day * 100:g}%" if policy.penalty_per_day else "",
            "score_policy": assignment.score_policy}


def _settings_page(request: Request, session: Session, user: User, assignment: Assignment, status_code: int = 200,
                   **values: Any) -> HTMLResponse:
    zone = ZoneInfo(get_context(request).settings.course_timezone)
    values.setdefault("form", _schedule_values(assignment, zone))
    values.setdefault("errors", {})
    values.setdefault("extension_error", None)
    due = late_policy(assignment).due_at
    extensions = [{"user": ext_user, "extra": _duration_text(timedelta(seconds=row.extra_s)), "reason": row.reason,
                   "due": _instant_text(due + timedelta(seconds=row.extra_s), zone) if due else None}
                  for ext_user, row in extensions_of(session, assignment)]
    return _page(request, "ops_settings.html", user, status_code, assignment=assignment, zone=zone.key,
                 policies=SCORE_POLICIES, extensions=extensions, saved=request.query_params.get("saved"), **values)


@router.get("/assignments/{slug}/settings", response_class=HTMLResponse)
def settings_form(request: Request, slug: str) -> Response:
    with _db(get_context(request)) as session:
        found = _staff(request, session, slug)
        if isinstance(found, Response):
            return found
        return _settings_page(request, session, *found)


@router.post("/assignments/{slug}/settings", response_class=HTMLResponse)
async def settings_save(request: Request, slug: str) -> Response:
    ctx = get_context(request)
    with _db(ctx) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment, form = found
        typed = {name: str(form.get(name, "")) for name in SCHEDULE_FIELDS}
        try:
            update_schedule(session, slug, ScheduleChange(**typed), ctx.settings.course_timezone)
        except ScheduleError as exc:
            session.rollback()
            return _settings_page(request, session, user, assignment, status.HTTP_400_BAD_REQUEST,
                                  form=typed, errors=exc.errors)
    return _see_other(f"/assignments/{slug}/settings?saved=schedule")


@router.post("/assignments/{slug}/extensions", response_class=HTMLResponse)
async def extension_save(request: Request, slug: str) -> Response:
    """Grant or replace one student's extension (an extra time of 0 removes it)."""
    with _db(get_context(request)) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment, form = found
        try:
            extend_student(session, slug, str(form.get("student", "")), str(form.get("extra", "")),
                           str(form.get("reason", "")))
        except (NotFound, ValueError) as exc:
            session.rollback()
            message = str(exc).removeprefix("no user ") + " is not a user." if isinstance(exc, NotFound) else str(exc)
            return _settings_page(request, session, user, assignment, status.HTTP_400_BAD_REQUEST,
                                  extension_error=message)
    return _see_other(f"/assignments/{slug}/settings?saved=extension#extensions")


@router.post("/assignments/{slug}/extensions/{username}/remove")
async def extension_remove(request: Request, slug: str, username: str) -> Response:
    with _db(get_context(request)) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        try:
            extend_student(session, slug, username, "0")
        except NotFound:
            pass  # already gone with its user: nothing to remove
    return _see_other(f"/assignments/{slug}/settings?saved=extension#extensions")


# ---- members -------------------------------------------------------------------------------


def _members_page(request: Request, session: Session, user: User, assignment: Assignment, status_code: int = 200,
                  **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    return _page(request, "ops_members.html", user, status_code, assignment=assignment,
                 members=members_of(session, assignment), parts=[r.value for r in CourseRole],
                 saved=request.query_params.get("saved"), **values)


@router.get("/assignments/{slug}/members", response_class=HTMLResponse)
def members_list(request: Request, slug: str) -> Response:
    with _db(get_context(request)) as session:
        found = _staff(request, session, slug)
        if isinstance(found, Response):
            return found
        return _members_page(request, session, *found)


def _own_part_refused(request: Request, session: Session, user: User, assignment: Assignment) -> HTMLResponse:
    """Nobody changes or ends their own part here, so an assignment always keeps the staff
    member who could undo a change."""
    return _members_page(request, session, user, assignment, status.HTTP_400_BAD_REQUEST,
                         error="You cannot change your own part; ask another staff member of this assignment.")


@router.post("/assignments/{slug}/members", response_class=HTMLResponse)
async def member_save(request: Request, slug: str) -> Response:
    """Enroll an existing account as a student or as staff (changing their part if enrolled)."""
    with _db(get_context(request)) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment, form = found
        username = str(form.get("username", "")).strip()
        try:
            part = CourseRole(str(form.get("part", "")))
        except ValueError:
            return _members_page(request, session, user, assignment, status.HTTP_400_BAD_REQUEST,
                                 error="Choose whether they join as a student or as staff.")
        target = find_user(session, username)
        if target is None:
            return _members_page(request, session, user, assignment, status.HTTP_400_BAD_REQUEST,
                                 error=f"No account “{username}”: create accounts with the roster import "
                                       "(Roster page) or `grader user add`.")
        if target.id == user.id:
            return _own_part_refused(request, session, user, assignment)
        enroll(session, target, assignment, part)
    return _see_other(f"/assignments/{slug}/members?saved={quote(username)}")


@router.post("/assignments/{slug}/members/{username}/remove", response_class=HTMLResponse)
async def member_remove(request: Request, slug: str, username: str) -> Response:
    """Take someone out of the assignment: they no longer see it; their submissions stay."""
    with _db(get_context(request)) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment, _form = found
        if username == user.username:
            return _own_part_refused(request, session, user, assignment)
        target = find_user(session, username)
        if target is not None:  # an unknown or already removed member: nothing to do
            unenroll(session, target, assignment)
    return _see_other(f"/assignments/{slug}/members")


# ---- grading controls ---------------------------------------------------------------------


@router.get("/assignments/{slug}/grading", response_class=HTMLResponse)
def grading_controls(request: Request, slug: str) -> Response:
    with _db(get_context(request)) as session:
        found = _staff(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment = found
        sent = request.query_params.get("sent", "")
        return _page(request, "ops_grading.html", user, assignment=assignment,
                     state=grading_state(session, assignment), sent=int(sent) if sent.isdigit() else None)


@router.post("/assignments/{slug}/grading")
async def grading_change(request: Request, slug: str) -> Response:
    """`action` pause: nothing more of the assignment is sent (what is in flight drains);
    resume: send each waiting student's next run now."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        action = str(found[2].get("action", ""))
        if action == "pause":
            set_paused(session, slug, True)
    if action == "resume":
        sent = await run_in_threadpool(resume, ctx.celery, ctx.sessions, slug, ctx.settings.task_queue)
        return _see_other(f"/assignments/{slug}/grading?sent={len(sent)}")
    return _see_other(f"/assignments/{slug}/grading")


# ---- similarity ---------------------------------------------------------------------------


@router.get("/assignments/{slug}/similarity", response_class=HTMLResponse)
def similarity_page(request: Request, slug: str, page: int = 1, base: str = "") -> Response:
    ctx = get_context(request)
    with _db(ctx) as session:
        found = _staff(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment = found
        report = load_report(report_path(ctx.settings.data_dir, slug))
        pages = max(1, -(-len(report.pairs) // SHOWN_PAIRS)) if report else 1
        page = min(max(page, 1), pages)
        return _page(request, "ops_similarity.html", user, assignment=assignment, report=report, page=page,
                     pages=pages, first=(page - 1) * SHOWN_PAIRS,
                     pairs=report.pairs[(page - 1) * SHOWN_PAIRS: page * SHOWN_PAIRS] if report else [],
                     has_base=base_path(ctx.settings.data_dir, slug).is_file(), base_message=base)


@router.get("/assignments/{slug}/similarity.json")
def similarity_download(request: Request, slug: str) -> Response:
    """The stored report as computed (every pair, the zips compared, who was left out and why)."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = _staff(request, session, slug)
        if isinstance(found, Response):
            return found
    path = report_path(ctx.settings.data_dir, slug)
    if not path.is_file():
        return _page(request, "error.html", found[0], status.HTTP_404_NOT_FOUND, title="No report",
                     message=f"No similarity report of {slug} was computed yet.")
    return FileResponse(path, media_type="application/json", filename=f"similarity-{slug}.json")


def _compute_and_store(ctx: Any, slug: str) -> None:
    """The class's report, written for the page (runs in a worker thread: CPU-bound)."""
    rubric = load_rubric(slug)
    limits = pipeline_config(ctx.settings, rubric).limits
    base, _what = assignment_base(ctx.settings.data_dir, rubric, limits)
    with _db(ctx) as session:
        report, _sources = compute_report(session, ctx.blobs, rubric, limits, base, fingerprint_dir(ctx.settings.data_dir))
    save_report(report, report_path(ctx.settings.data_dir, slug))


@router.post("/assignments/{slug}/similarity", response_class=HTMLResponse)
async def similarity_compute(request: Request, slug: str) -> Response:
    """Compare every student's latest submission now (off the event loop) and keep the report."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        user = found[0]
    try:
        await run_in_threadpool(_compute_and_store, ctx, slug)
    except RubricError as exc:
        return _page(request, "error.html", user, status.HTTP_404_NOT_FOUND, title="No rubric",
                     message=f"Assignment {slug} has no rubric to compare submissions by: {exc}")
    return _see_other(f"/assignments/{slug}/similarity")


@router.post("/assignments/{slug}/similarity/base", response_class=HTMLResponse)
async def similarity_base(request: Request, slug: str) -> Response:
    """Keep the uploaded zip as the starter the assignment's students received (the base)."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        upload = found[2].get("starter")
    if upload is None or isinstance(upload, str):
        return _see_other(f"/assignments/{slug}/similarity?base=" + quote("Choose the starter zip first."))
    rubric = load_rubric(slug)
    try:
        count = await run_in_threadpool(save_base, ctx.settings.data_dir, slug, await upload.read(), rubric,
                                        pipeline_config(ctx.settings, rubric).limits)
    except BadArchive as exc:
        return _see_other(f"/assignments/{slug}/similarity?base=" + quote(f"Not kept: {exc}"))
    return _see_other(f"/assignments/{slug}/similarity?base=" + quote(f"Kept: {count} starter files; compute again."))


@router.get("/assignments/{slug}/similarity/pair", response_class=HTMLResponse)
def similarity_pair(request: Request, slug: str, a: str = "", b: str = "") -> Response:
    """The two students' files side by side, shared regions highlighted (from the stored report)."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = _staff(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment = found
    report = load_report(report_path(ctx.settings.data_dir, slug))
    pair = report.pair(a, b) if report else None
    if report is None or pair is None:
        return _page(request, "error.html", user, status.HTTP_404_NOT_FOUND, title="Not found",
                     message=f"No pair {a} and {b} in the stored similarity report of {slug}.")
    rubric = load_rubric(slug)
    try:
        sources = pair_sources(ctx.blobs, report, pair, rubric, pipeline_config(ctx.settings, rubric).limits)
    except (BadArchive, FileNotFoundError) as exc:
        return _page(request, "error.html", user, status.HTTP_404_NOT_FOUND, title="Submission unavailable",
                     message=f"A compared zip can no longer be read ({exc}); compute the report again.")
    base, _what = assignment_base(ctx.settings.data_dir, rubric, pipeline_config(ctx.settings, rubric).limits)
    files = [{"match": match,
              "a": numbered_lines(sources[pair.a].get(match.path_a, ""), match.lines_a, starter_lines(base, match.path_a)),
              "b": numbered_lines(sources[pair.b].get(match.path_b, ""), match.lines_b, starter_lines(base, match.path_b)),
              "ranges_a": describe_ranges(match.lines_a), "ranges_b": describe_ranges(match.lines_b)}
             for match in pair.matches]
    return _page(request, "ops_pair.html", user, assignment=assignment, report=report, pair=pair, files=files,
                 rank=report.pairs.index(pair) + 1)
