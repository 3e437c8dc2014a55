"""Server-rendered pages: login, upload, history, run page (live state), instructor gradebook.

Browser pages use the session cookie (grader/websession.py) and a CSRF token on every POST
form. The older API-token form (`/` when logged out, posting to `/upload`) stays: it is
authenticated by the token typed into the form, not by a cookie, so it needs no CSRF token.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grader import charts, gradebook_view, queries
from grader.api.acceptance import admission_message, admit_committed
from grader.api.deps import get_context
from grader.api.gradebook import gradebook_csv, gradebook_out
from grader.auth import DEFAULT_SCOPES, SCOPE_SUBMIT, authenticate, browser_principal, check_password, issue_token
from grader.context import AppContext
from grader.db import session_scope
from grader.course_ops import admission
from grader.membership import assignments_of, role_in, roles_of
from grader.models import ApiToken, Assignment, CourseRole, ProblemResult, Role, Run, RunState, Submission, User, utcnow
from grader.password_reset import RESET_PATH, issue_reset, live_reset, may_issue_reset, redeem_reset
from grader.roster import import_roster
from grader.runstatus import run_status
from grader.service import (CommitUncertain, NotFound, Recorded, commit_upload, find_user, get_assignment,
                            record_regrade, record_upload)
from grader.uploads import ReceivedUpload, UploadError, earlier_upload_message, maybe_stored_message, receive_upload
from grader.websession import (CSRF_FIELD, CsrfError, change_password, check_csrf, csrf_token, current_user, log_in,
                                log_out)
from worker.rubric import RubricError, load_rubric
from worker.unpack import HEAD_BYTES, not_a_zip

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or an empty archive's end record
CSRF_MESSAGE = "This form was not sent from a current kernelgrade page. Reload the page and try again."


@contextmanager
def _db(ctx: AppContext) -> Iterator[Session]:
    with session_scope(ctx.sessions) as session:
        yield session


def _page(request: Request, name: str, user: User | None, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.update(user=user, csrf=csrf_token(request), csrf_field=CSRF_FIELD)
    return templates.TemplateResponse(request, name, values, status_code=status_code)


def _see_other(path: str) -> RedirectResponse:
    """Where a form post (or a page that needs a login) sends the browser next."""
    return RedirectResponse(path, status_code=status.HTTP_303_SEE_OTHER)


def _to_login() -> RedirectResponse:
    return _see_other("/login")


def _not_found(request: Request, user: User | None, what: str) -> HTMLResponse:
    return _page(request, "error.html", user, status.HTTP_404_NOT_FOUND, title="Not found", message=f"No {what}.")


def _csrf_refused(request: Request, user: User | None) -> HTMLResponse:
    return _page(request, "error.html", user, status.HTTP_403_FORBIDDEN, title="Form refused", message=CSRF_MESSAGE)


def _form_user(request: Request, session: Session, form: Any) -> User | Response:
    """The logged-in user behind a POSTed form, or the answer to give instead: the login
    page when nobody is logged in, a refusal when the CSRF token is missing or wrong."""
    user = current_user(request, session)
    if user is None:
        return _to_login()
    try:
        check_csrf(request, form.get(CSRF_FIELD))
    except CsrfError:
        return _csrf_refused(request, user)
    return user


def _upload_page(request: Request, session: Session, user: User | None, status_code: int = 200,
                 error: str | None = None) -> HTMLResponse:
    """The upload form; a logged-in user chooses among the assignments they are enrolled in."""
    settings = get_context(request).settings
    slugs = [a.slug for a in assignments_of(session, user.id)] if user is not None else settings.rubrics
    return _page(request, "upload.html", user, status_code, error=error, assignments=slugs,
                 max_bytes=settings.max_upload_bytes, max_mib=f"{settings.max_upload_bytes / (1024 * 1024):g}")


# ---- login / logout -----------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    with _db(get_context(request)) as session:
        if current_user(request, session) is not None:
            return _see_other("/")
    return _page(request, "login.html", None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = await request.form()
    try:
        check_csrf(request, form.get(CSRF_FIELD))
    except CsrfError:
        return _csrf_refused(request, None)
    username = str(form.get("username", "")).strip()
    ctx = get_context(request)
    with _db(ctx) as session:
        user = check_password(session, username, str(form.get("password", "")))
        if user is None:
            return _page(request, "login.html", None, status.HTTP_401_UNAUTHORIZED,
                         error="Wrong username or password.", username=username)
        log_in(request, session, user, ctx.settings.session_max_age_s)
    return _see_other("/")


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Ends the session server-side: a copy of the cookie is anonymous from now on."""
    form = await request.form()
    try:
        check_csrf(request, form.get(CSRF_FIELD))
    except CsrfError:
        return _csrf_refused(request, None)
    with _db(get_context(request)) as session:
        log_out(request, session)
    return _to_login()


# ---- upload -------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> HTMLResponse:
    ctx = get_context(request)
    with _db(ctx) as session:
        user = current_user(request, session)
        return _upload_page(request, session, user)


@router.post("/submit", response_class=HTMLResponse)
async def submit_from_session(request: Request) -> Response:
    """The logged-in upload: session and CSRF token are checked before the file is read."""
    ctx = get_context(request)
    holder: dict[str, Any] = {}

    def check_fields(fields: dict[str, str]) -> None:
        with _db(ctx) as session:
            user = current_user(request, session)
            if user is None:
                raise UploadError(401, "Your session has ended; log in again.")
            holder["user_id"] = user.id
        try:
            check_csrf(request, fields.get(CSRF_FIELD))
        except CsrfError:
            raise UploadError(403, CSRF_MESSAGE) from None

    error: tuple[int, str] | None = None
    try:
        async with receive_upload(request, ctx, before_file=check_fields) as upload:
            with ctx.blobs.path(upload.blob.sha256).open("rb") as fh:
                head = fh.read(HEAD_BYTES)
                if head[:4] not in ZIP_MAGIC:
                    raise UploadError(415, f"“{upload.filename}” {not_a_zip(head)}. Zip your assignment folder "
                                           "(for example with `zip -r llmsys_hw4.zip llmsys_hw4`) and upload the .zip.")
            recorded = _record_form_upload(ctx, upload, holder["user_id"])
    except UploadError as exc:
        error = (exc.status_code, exc.message)
    except NotFound as exc:
        error = (status.HTTP_404_NOT_FOUND, str(exc))
    if error is not None and error[0] == status.HTTP_503_SERVICE_UNAVAILABLE:
        # The commit failed, the database may still be down: a page that needs no query
        return _page(request, "upload_result.html", None, error[0], error=error[1])
    if error is not None:
        with _db(ctx) as session:
            user = current_user(request, session)
            if user is None:
                return _to_login()
            return _upload_page(request, session, user, error[0], error[1])
    message = _admit_form_upload(ctx, recorded)
    if not recorded.earlier:
        return _see_other(f"/runs/{recorded.run.id}")
    # Say that it is the earlier upload, with a link to its run (stored: no query may fail this answer)
    return _page(request, "upload_result.html", None, status.HTTP_200_OK, error=None,
                 submission_id=recorded.submission.id, run_id=recorded.run.id,
                 sha256=recorded.submission.sha256, message=message)


def _refuse_if_not_admitted(ctx: AppContext, session: Session, user: User, assignment: Assignment) -> None:
    """The course schedule and the run quota, as for API uploads (grader.course_ops.admission)."""
    refusal = admission(session, ctx.settings, user, assignment, utcnow())
    if refusal is not None:
        raise UploadError(refusal.status_code, refusal.message)


def _record_form_upload(ctx: AppContext, upload: ReceivedUpload, user_id: int) -> Recorded:
    """Record a form upload, or find the earlier one it repeats (the same file within the
    re-send window: browsers send no Idempotency-Key). A failed commit may have stored it."""
    with _db(ctx) as session:
        assignment = get_assignment(session, upload.fields.get("assignment", ctx.default_assignment))
        user = session.get(User, user_id)
        assert user is not None
        recorded = record_upload(session, user, assignment, upload.filename, upload.blob, None,
                                 ctx.settings.upload_dedup_window_s,
                                 lambda: _refuse_if_not_admitted(ctx, session, user, assignment))
        try:
            commit_upload(session)
        except CommitUncertain as exc:
            raise UploadError(status.HTTP_503_SERVICE_UNAVAILABLE,
                              maybe_stored_message(ctx.settings.upload_dedup_window_s, keyed=False)) from exc
        return recorded  # its rows stay loaded after the session closes (expire_on_commit=False)


def _admit_form_upload(ctx: AppContext, recorded: Recorded) -> str:
    """Send the upload's run (a repeat's only if it never was sent); the answer's message."""
    run = recorded.run
    if recorded.earlier and not (run.state is RunState.queued and run.enqueued_at is None):
        return earlier_upload_message(recorded.submission.id, run.id)
    message = admission_message(admit_committed(ctx, run.id))
    return f"{earlier_upload_message(recorded.submission.id, run.id)} {message}" if recorded.earlier else message


@router.post("/upload", response_class=HTMLResponse)
async def upload_from_form(request: Request) -> HTMLResponse:
    """The API-token form (no login): the token field is sent before the file."""
    ctx = get_context(request)
    principal_holder: dict[str, Any] = {}

    def authenticate_from_fields(fields: dict[str, str]) -> None:
        # The form sends the token field before the file, so nothing is stored for a stranger.
        with session_scope(ctx.sessions) as session:
            principal = authenticate(session, fields.get("token", "").strip())
            if principal is None or not principal.can(SCOPE_SUBMIT):
                raise UploadError(401, "That API token is not valid for submitting.")
            principal_holder["user_id"] = principal.user.id

    try:
        async with receive_upload(request, ctx, before_file=authenticate_from_fields) as upload:
            recorded = _record_form_upload(ctx, upload, principal_holder["user_id"])
    except (UploadError, NotFound) as exc:
        code = exc.status_code if isinstance(exc, UploadError) else status.HTTP_404_NOT_FOUND
        message = exc.message if isinstance(exc, UploadError) else str(exc)
        return _page(request, "upload_result.html", None, code, error=message)
    return _page(
        request, "upload_result.html", None, status.HTTP_200_OK if recorded.earlier else status.HTTP_201_CREATED,
        error=None, submission_id=recorded.submission.id, run_id=recorded.run.id,
        sha256=recorded.submission.sha256, message=_admit_form_upload(ctx, recorded),
    )


# ---- history and run page -----------------------------------------------------------------


@router.get("/submissions", response_class=HTMLResponse)
def history(request: Request) -> Response:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return _to_login()
        enrolled = list(roles_of(session, user.id))
        subs = session.scalars(
            select(Submission).where(Submission.user_id == user.id, Submission.assignment_id.in_(enrolled))
            .options(selectinload(Submission.runs), selectinload(Submission.assignment))
            .order_by(Submission.id.desc())
        ).all()
        return _page(request, "submissions.html", user, submissions=subs)


def _readable_run(session: Session, user: User, run_id: int) -> Run | None:
    run = session.get(Run, run_id)
    # Another student's run, or one of an assignment not taught, reads as absent.
    if run is None or not browser_principal(session, user).can_read_submission(run.submission):
        return None
    return run


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: int) -> Response:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return _to_login()
        run = _readable_run(session, user, run_id)
        if run is None:
            return _not_found(request, user, f"run {run_id}")
        floors = _speed_floors(run.submission.assignment.slug)
        return _page(request, "run.html", user, run=run, sub=run.submission,
                     status=run_status(session, run, get_context(request).settings.eta_recent_runs),
                     problems=[problem_view(r.details or {}, r, floors.get(r.problem_id)) for r in run.results],
                     logs=_stage_logs(run.stages or {}))


@router.get("/runs/{run_id}/status")
def run_status_json(request: Request, run_id: int) -> JSONResponse:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return JSONResponse({"detail": "log in"}, status.HTTP_401_UNAUTHORIZED)
        run = _readable_run(session, user, run_id)
        if run is None:
            return JSONResponse({"detail": f"no run {run_id}"}, status.HTTP_404_NOT_FOUND)
        return JSONResponse(run_status(session, run, get_context(request).settings.eta_recent_runs),
                            headers={"Cache-Control": "no-store"})


def _stage_logs(stages: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, stage in stages.items():
        lines = str(stage.get("log") or "").splitlines()
        first_error = next((i for i, line in enumerate(lines, 1) if "error" in line.lower()), None)
        out.append({"name": name, "status": stage.get("status"), "seconds": stage.get("seconds"),
                    "lines": lines, "first_error": first_error})
    return out


def _cases_line(measurement: dict[str, Any]) -> str | None:
    cases = [*measurement.get("abi_cases", []), *measurement.get("binding_cases", [])]
    if not cases:
        return None
    passed = sum(1 for c in cases if c.get("ok"))
    return f"{passed} of {len(cases)} passed"


def _speed_line(score: dict[str, Any]) -> str | None:
    speedup = score.get("speedup")
    if not speedup:
        return None
    figure = {"reference_ops": "vs your composition on the reference basic ops",
              "student": "vs your composition on your own basic ops"}
    text = f"{speedup['speedup']:.3g}x [{speedup['low']:.3g}, {speedup['high']:.3g}]"
    text += f" ({figure.get(score.get('figure') or '', 'measured')}, {speedup['trials']} trials)"
    target = score.get("target")
    return text + (f" vs target {target:.3g}x" if target is not None else " (no target)")


def _failure_line(measurement: dict[str, Any]) -> str | None:
    first = measurement.get("first_failure")
    if not first:
        return None
    if not first.get("public", True):
        return f"hidden case {first.get('case_id')}" + (f": {first['message']}" if first.get("message") else "")
    parts = [f"case {first.get('case_id')}", f"shape {tuple(first.get('shape') or ())}"]
    if first.get("max_err") is not None:
        parts.append(f"max error {first['max_err']}")
    if first.get("where") is not None:
        parts.append(f"at index {tuple(first['where'])}")
    if first.get("message"):
        parts.append(str(first["message"]))
    return ", ".join(parts)


def _speed_chart(score: dict[str, Any], floor: float | None) -> Markup | None:
    speedup = score.get("speedup")
    if not speedup:
        return None
    return charts.speedup_chart(float(speedup["speedup"]), float(speedup["low"]), float(speedup["high"]),
                                score.get("target"), floor)


def _speed_floors(slug: str) -> dict[str, float]:
    try:
        return {p.id: p.scoring.speed_floor for p in load_rubric(slug).problems}
    except RubricError:
        return {}


def problem_view(details: dict[str, Any], result: ProblemResult, floor: float | None = None) -> dict[str, Any]:
    score = details.get("score") or {}
    measurement = details.get("measurement") or {}
    reasons = list(score.get("reasons") or [])
    if not reasons and result.points < result.max_points:
        # Every lost point is explained: fall back to the result's own message.
        reasons = [result.message or f"{result.max_points - result.points:g} points not given (no reason recorded)"]
    return {
        "id": result.problem_id, "title": result.title, "status": result.status,
        "points": result.points, "max_points": result.max_points,
        "cases": _cases_line(measurement), "speed": _speed_line(score), "failure": _failure_line(measurement),
        "chart": _speed_chart(score, floor), "reasons": reasons, "notes": score.get("notes") or [],
    }


# ---- instructor ---------------------------------------------------------------------------


def _taught_assignment(request: Request, session: Session, user: User, slug: str) -> Assignment | Response:
    """The assignment `slug` when `user` is its staff, else the 404 page (as if absent)."""
    assignment = session.scalar(select(Assignment).where(Assignment.slug == slug))
    if assignment is None or role_in(session, user.id, assignment.id) is not CourseRole.staff:
        return _not_found(request, user, f"assignment {slug!r} among those you teach")
    return assignment


def _taught_slugs(session: Session, user: User) -> list[str]:
    return [a.slug for a in assignments_of(session, user.id, CourseRole.staff)]


def _default_slug(request: Request, taught: list[str]) -> str:
    """The service's default assignment when it is among `taught` (or nothing is), else the first."""
    default = get_context(request).default_assignment
    return default if default in taught or not taught else taught[0]


def _instructor_gradebook(request: Request, session: Session) -> tuple[User, queries.Gradebook] | Response:
    """The gradebook the query string asks for (an assignment the user teaches), or the
    answer to send instead (login, 404)."""
    user = current_user(request, session)
    if user is None:
        return _to_login()
    slug = request.query_params.get("assignment") or _default_slug(request, _taught_slugs(session, user))
    policy = request.query_params.get("policy") or None  # None: the assignment's policy
    assignment = _taught_assignment(request, session, user, slug)
    if isinstance(assignment, Response):
        return assignment
    try:
        return user, queries.gradebook(session, assignment, policy)
    except ValueError:
        return _not_found(request, user, f"gradebook for {slug!r} ({policy})")


@router.get("/gradebook", response_class=HTMLResponse)
def gradebook(request: Request) -> Response:
    with _db(get_context(request)) as session:
        found = _instructor_gradebook(request, session)
        if isinstance(found, Response):
            return found
        user, book = found
        view = gradebook_view.parse_view(request.query_params, book.assignment, book.policy,
                                         [p.problem_id for p in book.problems])
        rows = gradebook_view.select_rows(book, view)  # the charts cover them all, the table one page
        shown = gradebook_view.paginate(rows, view.page, get_context(request).settings.gradebook_page_size)
        queued = request.query_params.get("queued", "")
        return _page(request, "gradebook.html", user, book=book, policy=book.policy, policies=queries.POLICIES,
                     view=replace(view, page=shown.page), shown=shown, states=gradebook_view.STATE_CHOICES,
                     sections=sorted({r.section for r in book.rows if r.section}),
                     histogram=gradebook_view.score_histogram(book, rows),
                     distributions=gradebook_view.speedup_distributions(book, rows),
                     uncalibrated=gradebook_view.uncalibrated_models(book.rows),
                     queued=int(queued) if queued.isdigit() else None,
                     submission_count=sum(r.submissions for r in book.rows))


@router.post("/gradebook/regrade")
async def regrade_many(request: Request) -> Response:
    """Re-grade the ticked rows' submissions, every student's newest, or every submission;
    queued round-robin over students (queries.regrade_targets)."""
    ctx = get_context(request)
    form = await request.form()
    with _db(ctx) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        slug = str(form.get("assignment", ctx.default_assignment))
        which = str(form.get("which", "selected"))
        assignment = _taught_assignment(request, session, user, slug)
        if isinstance(assignment, Response):
            return assignment
        try:
            if which == "selected":
                ids = [int(v) for v in form.getlist("submission") if str(v).isdigit()]
                if not ids:
                    return _page(request, "error.html", user, status.HTTP_400_BAD_REQUEST, title="Nothing selected",
                                 message="Tick at least one student's row to re-grade the selected submissions.")
                targets = queries.regrade_targets(session, assignment, ids)
            elif which in ("latest", "all"):
                targets = queries.regrade_targets(session, assignment, which)
            else:
                raise NotFound(f"re-grade choice {which!r}")
        except (NotFound, LookupError) as exc:
            return _not_found(request, user, str(exc).removeprefix("no "))
        run_ids = [record_regrade(session, sub).id for sub in targets]
    for run_id in run_ids:  # committed: a database fault now delays the sending, never the answer
        admit_committed(ctx, run_id)
    back = str(form.get("back", "")) or f"/gradebook?assignment={slug}"
    if not back.startswith("/gradebook?"):  # only ever back to a gradebook view
        back = f"/gradebook?assignment={slug}"
    return _see_other(f"{back}&queued={len(run_ids)}")


def _download_headers(book: queries.Gradebook, extension: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{book.assignment}-gradebook-{book.policy}.{extension}"',
            "Cache-Control": "no-store"}


@router.get("/gradebook.csv")
def gradebook_csv_export(request: Request) -> Response:
    """The same CSV as the API's export, for the logged-in instructor."""
    with _db(get_context(request)) as session:
        found = _instructor_gradebook(request, session)
        if isinstance(found, Response):
            return found
        book = found[1]
        return Response(gradebook_csv(book), media_type="text/csv; charset=utf-8",
                        headers=_download_headers(book, "csv"))


@router.get("/gradebook.json")
def gradebook_json_export(request: Request) -> Response:
    """The same JSON as the API's export, for the logged-in instructor."""
    with _db(get_context(request)) as session:
        found = _instructor_gradebook(request, session)
        if isinstance(found, Response):
            return found
        book = found[1]
        body = gradebook_out(book).model_dump(mode="json")
        return JSONResponse(body, headers=_download_headers(book, "json"))


@router.post("/submissions/{submission_id}/regrade")
async def regrade(request: Request, submission_id: int) -> Response:
    ctx = get_context(request)
    form = await request.form()
    with _db(ctx) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        sub = session.get(Submission, submission_id)
        if sub is None or role_in(session, user.id, sub.assignment_id) is not CourseRole.staff:
            return _not_found(request, user, f"submission {submission_id}")
        run_id = record_regrade(session, sub).id
    admit_committed(ctx, run_id)  # committed: the run page says if it waits to be sent
    return _see_other(f"/runs/{run_id}")


# ---- roster -------------------------------------------------------------------------------


def _roster_page(request: Request, session: Session, user: User, status_code: int = 200,
                 **values: Any) -> HTMLResponse:
    """The roster page of a user who teaches at least one assignment (it imports into one of
    those), else the 404 page."""
    taught = _taught_slugs(session, user)
    if not taught:
        return _not_found(request, user, "such page")
    values.setdefault("report", None)
    values.setdefault("error", None)
    values.setdefault("reset", None)
    values.setdefault("chosen", _default_slug(request, taught))
    max_kib = f"{get_context(request).settings.roster_max_bytes / 1024:g}"
    return _page(request, "roster.html", user, status_code, max_kib=max_kib, assignments=taught, **values)


@router.get("/roster", response_class=HTMLResponse)
def roster_form(request: Request) -> Response:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return _to_login()
        return _roster_page(request, session, user)


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


@router.post("/roster", response_class=HTMLResponse)
async def roster_import(request: Request) -> Response:
    ctx = get_context(request)
    form = await request.form()
    with _db(ctx) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        slug = str(form.get("assignment") or _default_slug(request, _taught_slugs(session, user)))
        assignment = _taught_assignment(request, session, user, slug)
        if isinstance(assignment, Response):
            return assignment
        try:
            text = await _roster_text(form, ctx.settings.roster_max_bytes)
        except ValueError as exc:
            return _roster_page(request, session, user, status.HTTP_400_BAD_REQUEST, error=str(exc),
                                chosen=assignment.slug)
        if not text.strip():
            return _roster_page(request, session, user, status.HTTP_400_BAD_REQUEST, chosen=assignment.slug,
                                error="Choose a CSV file or paste the roster (email,name[,section] per line).")
        report = import_roster(session, text, assignment)
        response = _roster_page(request, session, user, status.HTTP_200_OK, report=report, chosen=assignment.slug)
        response.headers["Cache-Control"] = "no-store"  # first passwords are shown once
        return response


@router.post("/roster/reset-link", response_class=HTMLResponse)
async def roster_reset_link(request: Request) -> Response:
    """Issues a one-time password reset link for a student of an assignment the user teaches
    and shows it once on the roster page (grader.password_reset)."""
    ctx = get_context(request)
    form = await request.form()
    with _db(ctx) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        username = str(form.get("username", "")).strip()
        target = find_user(session, username)
        if target is None or not may_issue_reset(session, user, target):
            return _roster_page(request, session, user, status.HTTP_404_NOT_FOUND,
                                error=f"No student “{username}” in an assignment you teach.")
        token = issue_reset(session, target, ctx.settings.password_reset_max_age_s, issued_by=user)
        link = str(request.base_url).rstrip("/") + RESET_PATH + token
        response = _roster_page(request, session, user, reset={"username": target.username, "link": link,
                                                               "hours": ctx.settings.password_reset_max_age_s / 3600})
        response.headers["Cache-Control"] = "no-store"  # the link is shown once
        return response


# ---- password -----------------------------------------------------------------------------


def _password_page(request: Request, user: User, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("changed", False)
    return _page(request, "password.html", user, status_code,
                 min_length=get_context(request).settings.password_min_length, **values)


@router.get("/settings/password", response_class=HTMLResponse)
def password_form(request: Request) -> Response:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return _to_login()
        return _password_page(request, user, changed=request.query_params.get("changed") == "1")


def _apply_password_form(session: Session, user: User, form: Any, min_length: int) -> str | None:
    """Sets the form's new password (ending every session of the user) and answers None, or
    answers why it refused and changed nothing."""
    current, new, again = (str(form.get(name, "")) for name in ("current", "new", "again"))
    if check_password(session, user.username, current) is None:
        return "Your current password is not right."
    if new != again:
        return "The two new passwords differ."
    if new == current:
        return "The new password is your current one."
    try:
        change_password(session, user, new, min_length)
    except ValueError as exc:
        return f"{str(exc).capitalize()}."
    return None


@router.post("/settings/password", response_class=HTMLResponse)
async def password_change(request: Request) -> Response:
    """Sets the new password, ends every session of the user (other browsers are logged out)
    and gives this browser a new one."""
    ctx = get_context(request)
    form = await request.form()
    with _db(ctx) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        error = _apply_password_form(session, user, form, ctx.settings.password_min_length)
        if error is not None:
            return _password_page(request, user, status.HTTP_400_BAD_REQUEST, error=error)
        log_in(request, session, user, ctx.settings.session_max_age_s)
    return _see_other("/settings/password?changed=1")


def _reset_page(request: Request, token: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("done", False)
    values.setdefault("valid", True)
    response = _page(request, "reset.html", None, status_code, token=token,
                     min_length=get_context(request).settings.password_min_length, **values)
    response.headers["Cache-Control"] = "no-store"
    return response


INVALID_RESET = "This reset link is not valid: it was used already, it has expired, or it was never issued."


@router.get(RESET_PATH + "{token}", response_class=HTMLResponse)
def reset_form(request: Request, token: str) -> HTMLResponse:
    with _db(get_context(request)) as session:
        reset = live_reset(session, token)
        if reset is None:
            return _reset_page(request, token, status.HTTP_404_NOT_FOUND, valid=False, error=INVALID_RESET)
        return _reset_page(request, token, username=reset.user.username)


@router.post(RESET_PATH + "{token}", response_class=HTMLResponse)
async def reset_password(request: Request, token: str) -> HTMLResponse:
    """Sets the new password once per link; every session of the user ends, and this browser
    is logged out (the user logs in with the new password)."""
    ctx = get_context(request)
    form = await request.form()
    try:
        check_csrf(request, form.get(CSRF_FIELD))
    except CsrfError:
        return _csrf_refused(request, None)
    new, again = str(form.get("new", "")), str(form.get("again", ""))
    with _db(ctx) as session:
        if new != again:
            return _reset_page(request, token, status.HTTP_400_BAD_REQUEST, error="The two new passwords differ.")
        try:
            user = redeem_reset(session, token, new, ctx.settings.password_min_length)
        except ValueError as exc:
            return _reset_page(request, token, status.HTTP_400_BAD_REQUEST, error=f"{str(exc).capitalize()}.")
        if user is None:
            return _reset_page(request, token, status.HTTP_404_NOT_FOUND, valid=False, error=INVALID_RESET)
        log_out(request, session)
        return _reset_page(request, token, done=True, username=user.username)


# ---- API token settings -------------------------------------------------------------------

MAX_TOKEN_NAME = 128


def _token_page(request: Request, session: Session, user: User, status_code: int = 200,
                **values: Any) -> HTMLResponse:
    tokens = session.scalars(
        select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc())
    ).all()
    # Students always get their role's scopes; instructors choose among theirs.
    choosable = DEFAULT_SCOPES[user.role] if user.role == Role.instructor else ()
    values.setdefault("created", None)
    values.setdefault("error", None)
    return _page(request, "tokens.html", user, status_code, tokens=tokens, choosable=choosable,
                 default_scopes=DEFAULT_SCOPES[user.role], max_name=MAX_TOKEN_NAME, **values)


@router.get("/settings/tokens", response_class=HTMLResponse)
def token_settings(request: Request) -> Response:
    with _db(get_context(request)) as session:
        user = current_user(request, session)
        if user is None:
            return _to_login()
        return _token_page(request, session, user)


@router.post("/settings/tokens", response_class=HTMLResponse)
async def create_token(request: Request) -> Response:
    """Creates a token and answers with the page showing it: the only time it is shown."""
    form = await request.form()
    with _db(get_context(request)) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        name = str(form.get("name", "")).strip()
        allowed = DEFAULT_SCOPES[user.role]
        if user.role == Role.instructor:
            asked = [str(v) for v in form.getlist("scope")]
            scopes = tuple(s for s in allowed if s in asked)
            unknown = sorted(set(asked) - set(allowed))
        else:
            scopes, unknown = allowed, []
        error = None
        if not name or len(name) > MAX_TOKEN_NAME:
            error = f"Give the token a name of 1 to {MAX_TOKEN_NAME} characters."
        elif unknown:
            error = f"Scopes you cannot grant: {', '.join(unknown)}."
        elif not scopes:
            error = "Choose at least one scope."
        if error is not None:
            return _token_page(request, session, user, status.HTTP_400_BAD_REQUEST, error=error)
        token = issue_token(session, user, name, scopes)
        response = _token_page(request, session, user, status.HTTP_201_CREATED,
                               created={"name": name, "token": token})
        response.headers["Cache-Control"] = "no-store"
        return response


@router.post("/settings/tokens/{token_id}/revoke")
async def revoke_token(request: Request, token_id: int) -> Response:
    form = await request.form()
    with _db(get_context(request)) as session:
        user = _form_user(request, session, form)
        if isinstance(user, Response):
            return user
        token = session.get(ApiToken, token_id)
        # Someone else's token reads as absent, whatever the caller's role.
        if token is None or token.user_id != user.id:
            return _not_found(request, user, f"token {token_id}")
        if token.revoked_at is None:
            token.revoked_at = utcnow()
    return _see_other("/settings/tokens")
