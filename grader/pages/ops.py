"""Course operations pages of an assignment, for its course's instructors: settings (schedule,
late policy, score policy, its Canvas id, extensions, the storage and run quotas, the similarity check's base
and its listed sources, known solutions and common code: their forms' POSTs are here) and grading controls (pause / drain / resume, re-grade everything). The similarity report's pages
are grader.pages.similarity, the course's members grader.pages.courses. Removing an extension
and pausing grading go through a confirmation page (confirm.html) that says what will happen; a
POST without its `confirm` field lands there and changes nothing.

Someone outside the course gets the 404 page, its TAs and students a 403 page saying who may
(grader.pages.common's InstructorForm); its instructors may let its TAs change the schedule, grant
extensions or use the grading controls (grader.roles.TA_GRANTABLE): the settings page then shows
a TA the forms they may send. Each page uses the same functions as the
`grader` commands: grader.course.assignment_settings, grader.runs.grading_control.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grader.api.deps import Context, get_context
from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.course.assignment_settings import (
    ScheduleError,
    change_of,
    duration_field,
    extend_student,
    extensions_of,
    settings_texts,
)
from grader.course.membership import role_in
from grader.course.policies import SCORE_POLICIES, course_run_limit, late_policy, run_limit
from grader.course.quotas import hours
from grader.course.storage import MiB, mib, parse_quota_mib
from grader.ids import parse_row_id
from grader.models import Assignment, User, utcnow
from grader.pages.common import (
    Db,
    ExtensionForm,
    ExtensionPage,
    InstructorForm,
    QueueForm,
    QueuePage,
    ScheduleForm,
    SettingsPage,
    StaffOf,
    page,
    see_other,
)
from grader.reads.service_metrics import health
from grader.roles import held_powers
from grader.runs.engine_config import pipeline_config
from grader.runs.grading_control import grading_state, resume, set_paused
from grader.schedule_changes import (
    LoggedChange,
    SchedulePreview,
    apply_schedule,
    logged_change,
    preview_schedule,
    settings_text,
)
from grader.service import NotFound
from grader.similarity.base import UPLOAD, describe_assignment_base, fetch_refusal, parse_git_spec, save_base
from grader.similarity.fetch import FetchRules, check_repository
from grader.similarity.public import entry_key, entry_role_words, git_entry, save_zip, with_role
from grader.staff_settings import add_similarity_source, remove_similarity_source, set_assignment_run_quota
from worker.rubric import RubricError, load_rubric
from worker.unpack import BadArchive

router = APIRouter(include_in_schema=False)

SCHEDULE_FIELDS = ("release", "due", "grace", "late_window", "penalty_per_day", "score_policy", "extra_credit",
                   "canvas_id")


# ---- settings -----------------------------------------------------------------------------


def _zone_now(zone: ZoneInfo) -> str:
    """The zone's abbreviation and offset now, e.g. `EST, UTC-05:00 now`."""
    now = utcnow().astimezone(zone)
    minutes = int((now.utcoffset() or timedelta(0)).total_seconds() // 60)
    sign, minutes = ("-" if minutes < 0 else "+"), abs(minutes)
    return f"{now.tzname()}, UTC{sign}{minutes // 60:02d}:{minutes % 60:02d} now"


def _instant_text(at: datetime | None, zone: ZoneInfo) -> str:
    return at.astimezone(zone).strftime("%Y-%m-%dT%H:%M:%S") if at else ""


def _schedule_values(assignment: Assignment, zone: ZoneInfo) -> dict[str, str]:
    """The form's fields for the stored schedule (a date-time field takes no offset: the zone's)."""
    texts = settings_texts(assignment, zone)
    return texts | {"release": texts["release"][:19], "due": texts["due"][:19]}


def _settings_page(request: Request, session: Session, user: User, assignment: Assignment, status_code: int = 200,
                   **values: Any) -> HTMLResponse:
    zone = ZoneInfo(get_context(request).settings.course_timezone)
    values.setdefault("form", _schedule_values(assignment, zone))
    values.setdefault("errors", {})
    values.setdefault("extension_error", None)
    values.setdefault("extension", {})  # the extension form's fields as sent, when refused
    values.setdefault("base_error", None)
    values.setdefault("base_git", "")
    values.setdefault("public_error", None)
    values.setdefault("public_git", "")
    values.setdefault("public_role", "solution")
    values = _quota_values(request, assignment) | values
    role = role_in(session, user.id, assignment.id)
    values.setdefault("powers", held_powers(role, assignment.course.ta_granted) if role and assignment.course
                      else frozenset())
    due = late_policy(assignment).due_at
    extensions = [{"user": ext_user, "extra": duration_field(timedelta(seconds=row.extra_s)), "reason": row.reason,
                   "due": _instant_text(due + timedelta(seconds=row.extra_s), zone) if due else None}
                  for ext_user, row in extensions_of(session, assignment)]
    return page(request, "ops_settings.html", user, status_code, assignment=assignment, zone=zone.key,
                zone_now=_zone_now(zone),
                policies=SCORE_POLICIES, extensions=extensions, saved=request.query_params.get("saved"),
                rescored_runs=parse_row_id(request.query_params.get("runs", "")),
                saved_change=_saved_change(request, session, assignment),
                similarity_base=describe_assignment_base(assignment.similarity_base, assignment.slug,
                                                         get_context(request).settings.rubric_dirs,
                                                         get_context(request).settings.data_dir),
                base_refused=_base_refusal(request, assignment),
                base_hosts=", ".join(get_context(request).settings.similarity_base_hosts),
                base_message=request.query_params.get("base"), public_message=request.query_params.get("public"),
                public_sources=[{"key": entry_key(e), "words": entry_role_words(e)} for e in assignment.similarity_sources or []],
                **values)


def _quota_values(request: Request, assignment: Assignment) -> dict[str, Any]:
    """The storage and run quota forms' fields and what applies now."""
    settings = get_context(request).settings
    stored, default = assignment.storage_quota_bytes, settings.storage_quota_bytes
    quota = default if stored is None else stored
    runs, whose = run_limit(settings, assignment)
    return {"storage_error": None, "storage_mib": "" if stored is None else f"{stored / MiB:g}",
            "storage_default": mib(default) if default else "no quota",
            "storage_now": (f"{mib(quota)} per student" if quota else "no quota")
            + (" (the service's default)" if stored is None else ""),
            "runs_error": None, "runs_typed": "" if assignment.quota_runs is None else str(assignment.quota_runs),
            "runs_now": (f"{runs} graded run{'' if runs == 1 else 's'} per student in any "
                         f"{hours(timedelta(seconds=settings.quota_window_s))}" if runs else "no run quota")
            + f" ({whose})",
            "runs_default": _runs_words(*course_run_limit(settings, assignment.course))}


def _runs_words(runs: int, whose: str) -> str:
    """`course cs500's: 10` or `the service's default: no quota`, for the form's hint."""
    return f"{whose}: {runs if runs else 'no quota'}"


def _saved_change(request: Request, session: Session, assignment: Assignment) -> LoggedChange | None:
    """The change just saved (`change`: its audit event), for the notice and its undo button."""
    change = parse_row_id(request.query_params.get("change", ""))
    return logged_change(session, change, assignment.slug) if change is not None else None


def _base_refusal(request: Request, assignment: Assignment) -> str | None:
    """Why the git base the assignment names (its own, else its rubric's) cannot be fetched here."""
    settings = get_context(request).settings
    try:
        default = load_rubric(assignment.slug, search=settings.rubric_dirs).similarity_base
    except RubricError:
        default = None
    return fetch_refusal(assignment.similarity_base, default, FetchRules.of(settings))


@router.get("/assignments/{slug}/settings", response_class=HTMLResponse)
def settings_form(request: Request, session: Db, staff: SettingsPage) -> Response:
    return _settings_page(request, session, staff.user, staff.assignment)


@router.post("/assignments/{slug}/settings", response_class=HTMLResponse)
async def settings_save(request: Request, session: Db, staff: ScheduleForm) -> Response:
    """Save the schedule form: at once when it changes no grade, else through its preview (the
    confirmation posts the same fields back with the preview's `confirm`)."""
    form = await request.form()
    typed = {name: str(form.get(name, "")) for name in SCHEDULE_FIELDS}
    typed["students_choose"] = "on" if form.get("students_choose") == "on" else ""  # a checkbox: absent when off
    confirmed = form.get("confirm")
    return _schedule_step(request, session, staff, typed, str(confirmed) if confirmed is not None else None)


@router.post("/assignments/{slug}/settings/undo", response_class=HTMLResponse)
async def settings_undo(request: Request, session: Db, staff: ScheduleForm) -> Response:
    """Put back what a saved change (its audit event, `change`) altered, the other settings as
    they are now: previewed and confirmed like any change."""
    change, slug = parse_row_id(str((await request.form()).get("change", ""))), staff.assignment.slug
    logged = logged_change(session, change, slug) if change is not None else None
    if logged is None:
        return page(request, "confirm.html", staff.user, status.HTTP_404_NOT_FOUND, title="Undo a schedule change",
                    question=f"There is no saved change of {slug}'s schedule to undo here.", details=[],
                    fields=None, cancel=f"/assignments/{slug}/settings", cancel_label="Back to the settings")
    zone = ZoneInfo(get_context(request).settings.course_timezone)
    return _schedule_step(request, session, staff, settings_texts(staff.assignment, zone) | logged.restores, None)


def _schedule_step(request: Request, session: Session, staff: StaffOf, typed: dict[str, str],
                   confirmed: str | None) -> Response:
    """Save `typed` (the schedule's settings as typed) when it changes no grade, or when
    `confirmed` is the digest of the grade changes it makes now (what its preview showed);
    else its preview. A refused value: the settings page with the errors, as typed."""
    settings, slug = get_context(request).settings, staff.assignment.slug
    try:
        shown = preview_schedule(session, slug, change_of(typed), settings)
    except ScheduleError as exc:
        session.rollback()
        return _settings_page(request, session, staff.user, staff.assignment, status.HTTP_400_BAD_REQUEST,
                              form=typed | {"release": typed["release"][:19], "due": typed["due"][:19]},
                              errors=exc.errors)
    if shown.changes and confirmed != shown.digest:
        return _preview_page(request, staff.user, shown, stale=confirmed is not None)
    event = apply_schedule(session, shown, settings, Via.web, staff.user)
    return see_other(f"/assignments/{slug}/settings?saved=schedule" + (f"&change={event.id}" if event else ""))


def _preview_page(request: Request, user: User, shown: SchedulePreview, stale: bool) -> HTMLResponse:
    """The confirmation of a change that alters grades: the settings it changes and, a row
    each, every student whose grade changes (before, after, why)."""
    slug, count, back = shown.slug, len(shown.changes), f"/assignments/{shown.slug}/settings"
    grades = f"{count} student's grade" if count == 1 else f"{count} students' grades"
    rows = [(c.login, c.name or "", c.before_text, c.after_text, c.why) for c in shown.changes]
    return page(request, "confirm.html", user, title=f"Confirm the schedule change of {slug}",
                notice="The grades this change alters are not those the preview showed (a grade came or moved "
                       "meanwhile): check them again." if stale else None,
                question=f"Save this change to {slug}'s schedule and policies? It changes {grades}.",
                details=[f"{line}." for line in settings_text(shown.changed)]
                + ["The grades change on every page and export once it is saved; the saved notice offers to "
                   "undo it."],
                tables=[("grade-changes", f"Grades it changes: {count}", ("Student", "Name", "Before", "After", "Why"),
                         rows)],
                action=back, fields=[*shown.after.items(), ("confirm", shown.digest)],
                confirm_label=f"Save and change {grades}", cancel=back, cancel_label="Keep the schedule as it is")


@router.post("/assignments/{slug}/extensions", response_class=HTMLResponse)
async def extension_save(request: Request, slug: str, session: Db, staff: ExtensionForm) -> Response:
    """Grant or replace one student's extension (an extra time of 0 asks to confirm its removal)."""
    form = await request.form()
    student, extra = str(form.get("student", "")).strip(), str(form.get("extra", ""))
    if extra.strip() == "0" and student:  # a removal: through its confirmation
        return see_other(_removal_path(slug, student))
    try:
        extend_student(session, slug, str(form.get("student", "")), str(form.get("extra", "")),
                       str(form.get("reason", "")))
    except (NotFound, ValueError) as exc:
        session.rollback()
        message = str(exc).removeprefix("no user ") + " is not a user." if isinstance(exc, NotFound) else str(exc)
        return _settings_page(request, session, staff.user, staff.assignment, status.HTTP_400_BAD_REQUEST,
                              extension_error=message,
                              extension={name: str(form.get(name, "")) for name in ("student", "extra", "reason")})
    return see_other(f"/assignments/{slug}/settings?saved=extension#extensions")


def _removal_path(slug: str, username: str) -> str:
    return f"/assignments/{slug}/extensions/{quote(username)}/remove"


@router.get("/assignments/{slug}/extensions/{username}/remove", response_class=HTMLResponse)
def extension_remove_confirm(request: Request, username: str, session: Db, staff: ExtensionPage) -> Response:
    """The confirmation of an extension's removal: whose, the due time it gives back, and that
    the uploads already made are judged against that due time from then on."""
    assignment, zone = staff.assignment, ZoneInfo(get_context(request).settings.course_timezone)
    back = f"/assignments/{assignment.slug}/settings#extensions"
    found = next((row for user, row in extensions_of(session, assignment) if user.username == username), None)
    if found is None:
        return page(request, "confirm.html", staff.user, title="Remove an extension", details=[], fields=None,
                    question=f"“{username}” has no extension on {assignment.slug}: there is nothing to remove.",
                    cancel=back, cancel_label="Back to the settings")
    extra, due = timedelta(seconds=found.extra_s), late_policy(assignment).due_at
    reason = f" (“{found.reason}”)" if found.reason else ""
    moved = (f"Their due time goes back from {_instant_text(due + extra, zone).replace('T', ' ')} to the "
             f"assignment's {_instant_text(due, zone).replace('T', ' ')} ({zone.key}), their grace and late "
             "window with it." if due else "The assignment has no due time yet: once it has one, it is theirs too.")
    return page(request, "confirm.html", staff.user, title="Remove an extension",
                question=f"Remove {username}'s extension of {duration_field(extra)}{reason} on {assignment.slug}?",
                details=[moved, "Every upload of theirs, those already made included, is then judged against that "
                         "due time on every page and export: a late one may lose points it did not lose before.",
                         "Granting it again below the extensions table gives it back."],
                action=_removal_path(assignment.slug, username), fields=[("confirm", "remove")],
                confirm_label=f"Remove {username}'s extension", cancel=back,
                cancel_label="Keep it, back to the settings")


@router.post("/assignments/{slug}/extensions/{username}/remove")
async def extension_remove(request: Request, slug: str, username: str, session: Db, staff: ExtensionForm) -> Response:
    """Remove the student's extension once confirmed; without the confirmation's field, its page."""
    if (await request.form()).get("confirm") != "remove":
        return see_other(_removal_path(slug, username))
    try:
        extend_student(session, slug, username, "0")
    except NotFound:
        pass  # already gone with its user: nothing to remove
    return see_other(f"/assignments/{slug}/settings?saved=extension#extensions")


@router.post("/assignments/{slug}/storage", response_class=HTMLResponse)
async def storage_save(request: Request, slug: str, session: Db, staff: InstructorForm) -> Response:
    """The bytes each student may keep in the assignment (grader.course.storage): MiB, 0 for no
    quota, empty for the service's default."""
    typed = str((await request.form()).get("quota_mib", "")).strip()
    try:
        staff.assignment.storage_quota_bytes = parse_quota_mib(typed)
    except ValueError as exc:
        return _settings_page(request, session, staff.user, staff.assignment, status.HTTP_400_BAD_REQUEST,
                              storage_error=str(exc), storage_mib=typed)
    return see_other(f"/assignments/{slug}/settings?saved=storage#storage")


@router.post("/assignments/{slug}/quota", response_class=HTMLResponse)
async def quota_save(request: Request, slug: str, session: Db, staff: InstructorForm) -> Response:
    """The graded runs each student may start in the assignment per quota window: a number, 0
    for no quota, empty for the course's (else the service's)."""
    typed = str((await request.form()).get("quota_runs", "")).strip()
    try:
        set_assignment_run_quota(session, staff.assignment, typed, Via.web, staff.user, request_address(request))
    except ValueError as exc:
        return _settings_page(request, session, staff.user, staff.assignment, status.HTTP_400_BAD_REQUEST,
                              runs_error=str(exc), runs_typed=typed)
    return see_other(f"/assignments/{slug}/settings?saved=runs#runs")


@router.post("/assignments/{slug}/similarity/base", response_class=HTMLResponse)
async def similarity_base(request: Request, slug: str, ctx: Context, session: Db, staff: InstructorForm) -> Response:
    """Set the starter the assignment's students received (the similarity check's base): a zip,
    kept; a git ref; or back to the rubric's default. A refusal is the settings page again, the
    git ref as typed."""
    done = f"/assignments/{slug}/settings?base="
    assignment, form = staff.assignment, await request.form()
    upload, git = form.get("starter"), str(form.get("git", "")).strip()

    def refused(why: str) -> HTMLResponse:
        return _settings_page(request, session, staff.user, assignment, status.HTTP_400_BAD_REQUEST,
                              base_error=why, base_git=git)

    if form.get("action") == "default":
        assignment.similarity_base = None
        return see_other(done + quote("The base is the rubric's default again; compute the report again."))
    if git:
        try:
            await run_in_threadpool(check_repository, parse_git_spec(git)[0], FetchRules.of(ctx.settings))
        except BadArchive as exc:  # BaseRefused too: says why it may not be fetched
            return refused(str(exc))
        assignment.similarity_base = git
        return see_other(done + quote(f"The base is {git}; compute the report again."))
    if upload is None or isinstance(upload, str) or not upload.filename:
        return refused("choose the starter zip or give a git ref first.")
    rubric = load_rubric(slug, search=ctx.settings.rubric_dirs)
    try:
        count = await run_in_threadpool(save_base, ctx.settings.data_dir, slug, await upload.read(), rubric,
                                        pipeline_config(ctx.settings, rubric).limits, upload.filename)
    except BadArchive as exc:
        return refused(f"{exc} (choose the zip again)")
    assignment.similarity_base = UPLOAD
    return see_other(done + quote(f"Kept: {count} starter files; compute the report again."))


@router.post("/assignments/{slug}/similarity/sources", response_class=HTMLResponse)
async def similarity_source_add(request: Request, slug: str, ctx: Context, session: Db, staff: InstructorForm) -> Response:
    """List a source for the similarity check (grader.similarity.public) in the role chosen: a
    known solution every student is matched against, or common code left out; a zip, kept, or a
    git ref, fetched as a git base is; audited. A refusal is the settings page again, the git ref
    and role as given."""
    done = f"/assignments/{slug}/settings?public="
    assignment, form = staff.assignment, await request.form()
    upload, git = form.get("public_zip"), str(form.get("public_git", "")).strip()
    role = str(form.get("role", "solution"))

    def refused(why: str) -> HTMLResponse:
        return _settings_page(request, session, staff.user, assignment, status.HTTP_400_BAD_REQUEST,
                              public_error=why, public_git=git, public_role=role)

    try:
        if git:
            entry = git_entry(git)
            await run_in_threadpool(check_repository, parse_git_spec(git)[0], FetchRules.of(ctx.settings))
        elif upload is None or isinstance(upload, str) or not upload.filename:
            return refused("choose the solution's zip or give a git ref first.")
        else:
            rubric = load_rubric(slug, search=ctx.settings.rubric_dirs)
            entry = await run_in_threadpool(save_zip, ctx.settings.data_dir, slug, await upload.read(), rubric,
                                            pipeline_config(ctx.settings, rubric).limits, upload.filename)
        entry = with_role(entry, role)
    except BadArchive as exc:  # BaseRefused too: says why it may not be fetched
        return refused(f"{exc}{'' if git else ' (choose the zip again)'}")
    if add_similarity_source(session, assignment, entry, Via.web, staff.user, request_address(request)):
        said = f"Listed {entry_role_words(entry)}; compute the report again."
    else:  # as it was listed, its role too
        listed = next(e for e in assignment.similarity_sources or [] if entry_key(e) == entry_key(entry))
        said = f"{entry_role_words(listed)} is listed already."
    return see_other(done + quote(said) + "#similarity-public")


@router.post("/assignments/{slug}/similarity/sources/remove", response_class=HTMLResponse)
async def similarity_source_remove(request: Request, slug: str, session: Db, staff: InstructorForm) -> Response:
    """Take a listed source off the assignment's list (its kept zip stays: a stored report names
    it); audited."""
    key = str((await request.form()).get("key", ""))
    gone = remove_similarity_source(session, staff.assignment, key, Via.web, staff.user, request_address(request))
    said = f"{gone} is no longer listed; compute the report again." if gone else "That source was not listed."
    return see_other(f"/assignments/{slug}/settings?public=" + quote(said) + "#similarity-public")


# ---- grading controls ---------------------------------------------------------------------


@router.get("/assignments/{slug}/grading", response_class=HTMLResponse)
def grading_controls(request: Request, session: Db, staff: QueuePage) -> Response:
    """Pause and resume, what is in flight, and how grading is going: the oldest queued run,
    runs whose worker stopped reporting, the last hour's outcomes and times (the metrics' figures)."""
    sent = request.query_params.get("sent", "")
    settings = get_context(request).settings
    now = utcnow()
    figures = health(session, [staff.assignment.id], now, timedelta(seconds=settings.heartbeat_timeout_s))
    return page(request, "ops_grading.html", staff.user, assignment=staff.assignment,
                state=grading_state(session, staff.assignment), sent=int(sent) if sent.isascii() and sent.isdigit() else None,
                zone=settings.course_zone, health=figures[staff.assignment.id], heartbeat_s=settings.heartbeat_timeout_s)


@router.get("/assignments/{slug}/grading/pause", response_class=HTMLResponse)
def pause_confirm(request: Request, session: Db, staff: QueuePage) -> Response:
    """The confirmation of a pause: what it holds and what still finishes."""
    slug, state = staff.assignment.slug, grading_state(session, staff.assignment)
    back = f"/assignments/{slug}/grading"
    if state.paused:
        return page(request, "confirm.html", staff.user, title="Pause grading", details=[], fields=None,
                    question=f"Grading of {slug} is already paused.", cancel=back,
                    cancel_label="Back to the grading controls")
    flying = len(state.in_flight)
    return page(request, "confirm.html", staff.user, title="Pause grading",
                question=f"Pause grading of {slug}? Nothing more of it is sent to the workers.",
                details=[f"{state.waiting} waiting run{'' if state.waiting == 1 else 's'}, and every upload or "
                         "re-grade from now on, stay queued until grading is resumed; students see their run "
                         "waiting.",
                         f"{flying} run{'' if flying == 1 else 's'} already sent finish{'es' if flying == 1 else ''} "
                         "(draining)."],
                action=back, fields=[("action", "pause"), ("confirm", "pause")],
                confirm_label=f"Pause grading of {slug}", cancel=back, cancel_label="Keep grading running")


@router.post("/assignments/{slug}/grading")
async def grading_change(request: Request, slug: str, ctx: Context, session: Db, staff: QueueForm) -> Response:
    """`action` pause (once confirmed): nothing more of the assignment is sent (what is in
    flight drains); resume: send each waiting student's next run now."""
    form = await request.form()
    action = str(form.get("action", ""))
    if action == "pause":
        if form.get("confirm") != "pause":
            return see_other(f"/assignments/{slug}/grading/pause")
        set_paused(session, slug, True)
    if action == "resume":
        session.commit()
        sent = await run_in_threadpool(resume, ctx.celery, ctx.sessions, slug, ctx.settings.task_queue)
        return see_other(f"/assignments/{slug}/grading?sent={len(sent)}")
    return see_other(f"/assignments/{slug}/grading")
