"""A student's history and the run page (its live state, per-problem results and stage logs);
staff of the assignment see its runs too (grader.auth's browser principal)."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grader import charts
from grader.api.deps import get_context
from grader.auth import browser_principal
from grader.membership import roles_of
from grader.models import ProblemResult, Run, Submission, User
from grader.pages.common import Db, Viewer, absent, logged_in, page
from grader.queries import counting_run, run_grades
from grader.runstatus import run_status
from grader.websession import current_user
from worker.rubric import RubricError, load_rubric

router = APIRouter(include_in_schema=False)


@router.get("/submissions", response_class=HTMLResponse)
def history(request: Request, session: Db, user: Viewer) -> Response:
    enrolled = list(roles_of(session, user.id))
    subs = session.scalars(
        select(Submission).where(Submission.user_id == user.id, Submission.assignment_id.in_(enrolled))
        .options(selectinload(Submission.runs), selectinload(Submission.assignment))
        .order_by(Submission.id.desc())
    ).all()
    zone = get_context(request).settings.course_zone
    grades = run_grades(session, [run for sub in subs for run in sub.runs], zone)
    assignments = {sub.assignment.id: sub.assignment for sub in subs}
    counting = {a.slug: counting_run([r for sub in subs if sub.assignment_id == a.id for r in sub.runs],
                                     grades, a.score_policy) for a in assignments.values()}
    return page(request, "submissions.html", user, submissions=subs, zone=zone, grades=grades,
                assignments=sorted(assignments.values(), key=lambda a: a.slug), counting=counting)


def _readable_run(session: Session, user: User, run_id: int) -> Run | None:
    run = session.get(Run, run_id)
    # Another student's run, or one of an assignment not taught, reads as absent.
    if run is None or not browser_principal(session, user).can_read_submission(run.submission):
        return None
    return run


def _shown_run(request: Request, run_id: int, session: Db) -> tuple[User, Run]:
    """The logged-in user and their readable run. It calls `logged_in` itself rather than
    depending on it, so that an id that is not one (/runs/abc) is refused as such (the 404
    page) before anyone is asked to log in: FastAPI skips a dependency whose fields fail."""
    user = logged_in(request, session)
    run = _readable_run(session, user, run_id)
    if run is None:
        raise absent(f"run {run_id}")
    return user, run


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, session: Db, shown: Annotated[tuple[User, Run], Depends(_shown_run)]) -> Response:
    user, run = shown
    floors = _speed_floors(run.submission.assignment.slug)
    settings = get_context(request).settings
    return page(request, "run.html", user, run=run, sub=run.submission,
                status=run_status(session, run, settings.eta_recent_runs),
                grade=run_grades(session, [run], settings.course_zone).get(run.id), zone=settings.course_zone,
                problems=[problem_view(r.details or {}, r, floors.get(r.problem_id)) for r in run.results],
                logs=stage_logs(run.stages or {}))


@router.get("/runs/{run_id}/status")
def run_status_json(request: Request, run_id: int, session: Db) -> JSONResponse:
    """The run page's poll: JSON, so a logged-out poller gets 401 (the page says so), not a redirect."""
    user = current_user(request, session)
    if user is None:
        return JSONResponse({"detail": "log in"}, status.HTTP_401_UNAUTHORIZED)
    run = _readable_run(session, user, run_id)
    if run is None:
        return JSONResponse({"detail": f"no run {run_id}"}, status.HTTP_404_NOT_FOUND)
    return JSONResponse(run_status(session, run, get_context(request).settings.eta_recent_runs),
                        headers={"Cache-Control": "no-store"})


def stage_logs(stages: dict[str, Any]) -> list[dict[str, Any]]:
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
