"""The run page's view (a presentation helper of grader/pages/, no routes): its live state,
per-problem results, every correctness case, why a run was not graded, the stage logs with
the compiler's first error, and the staff workflow's forms. `render_run` draws it for the run
page (grader.pages.runs) and again, with the words of the refusal beside the form and what was
typed kept in it, for a workflow form the run page posts (grader.pages.requests)."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from sqlalchemy.orm import Session

from grader.api.deps import get_context
from grader.course.counted_choice import student_refusal
from grader.course.grade_reads import counted_of, run_grades
from grader.course.membership import role_in
from grader.models import REDUCED_ISOLATION, ErrorClass, ProblemResult, Run, RunState, User
from grader.pages import charts
from grader.pages.common import page
from grader.reads.bandwidth import run_bandwidth
from grader.reads.gpu_phases import run_gpu_time
from grader.reads.runstatus import run_status
from grader.reads.timing_conditions import run_timing_conditions
from grader.roles import Power, may
from worker.assignment import AssignmentError, Plugin, Words, assignment_of
from worker.build_isolation import first_compiler_error
from worker.measurements import CaseOutcome, stored_measurement
from worker.rubric import Problem, RubricError, load_rubric
from worker.sanitizer import shown


@dataclass(frozen=True)
class Refused:
    """A form of the run page that was refused: which (`regrade-request`, `adjustment`,
    `comment`), why, and the values it was sent with, shown in it again."""

    form: str
    error: str
    kept: Mapping[str, str] = field(default_factory=dict)


def render_run(request: Request, session: Session, user: User, run: Run, status_code: int = 200,
               refused: Refused | None = None) -> HTMLResponse:
    """The run page: its grade is the student's grade (with the staff's entries) where it is the
    run that counts, else the run's own; the student's entries are listed whichever run it is."""
    settings, sub = get_context(request).settings, run.submission
    rubric = _RubricView.of(sub.assignment.slug, settings.rubric_dirs)
    own = run_grades(session, [run], settings.course_zone).get(run.id)
    counted = counted_of(session, sub.assignment, sub.user_id, settings.course_zone)
    may_choose = (own is not None and user.id == sub.user_id and counted.run_id != run.id
                  and student_refusal(session, sub.assignment, user, run) is None)
    role = role_in(session, user.id, run.submission.assignment_id)
    return page(request, "run.html", user, status_code, run=run, sub=sub, counted=counted,
                may_choose=may_choose, status=run_status(session, run, settings.eta_recent_runs, settings.rubric_dirs, settings.split_slots),
                may_grade=may(role, Power.grade), gpu_time=run_gpu_time(run, rubric.plugin) if may(role, Power.view) else None,
                reduced_isolation=(run.toolchain or {}).get(REDUCED_ISOLATION) if may(role, Power.view) else None,
                bandwidth=run_bandwidth(session, run), may_see_flags=may(role, Power.view),
                conditions=run_timing_conditions(run) if may(role, Power.view) else [],
                grade=counted.grade if counted.run_id == run.id else own, own_grade=own,
                zone=settings.course_zone, refused=refused,
                problems=[problem_view(r.details or {}, r, rubric.problems.get(r.problem_id), rubric.words)
                          for r in run.results],
                not_graded=not_graded(run), logs=stage_logs(run.stages or {}))


def stage_logs(stages: dict[str, Any]) -> list[dict[str, Any]]:
    """Each stage's log as numbered lines, with its first error: the source file and line the
    compiler names there (linked into the code view), and the log's own line."""
    out = []
    for name, stage in stages.items():
        log = str(stage.get("log") or "")
        out.append({"name": name, "status": stage.get("status"), "seconds": stage.get("seconds"),
                    "lines": log.splitlines(), "first_error": first_compiler_error(log)})
    return out


# Why a final run graded nothing, in words (the run's message, shown above, has the details).
BUILT_TEXT = ("This run was built but not graded: the worker that took it has no GPU stage "
              "(no GPU, or GPU grading is off), so no score was given.")
FAILED_TEXT = {
    ErrorClass.bad_archive: "This upload could not be graded: the grader could not use it as a submission "
                            "(a bad archive). Fix the zip as the message says and upload it again.",
    ErrorClass.build_error: "No problem could be graded because the kernels did not build (a build error); "
                            "the build log below shows the compiler's messages.",
    ErrorClass.timeout: "Grading took longer than its time limit and was stopped (timed out), "
                        "so no problem was scored.",
    ErrorClass.crashed: "The grading process stopped unexpectedly (it crashed) before any problem was scored.",
    ErrorClass.infra_error: "A fault on the grading side (infrastructure), not in your submission, stopped "
                            "this run; staff can re-grade it.",
}


def not_graded(run: Run) -> str | None:
    """One sentence for a final run that scored nothing (built, or failed), else None."""
    if run.state == RunState.built:
        return BUILT_TEXT
    if run.state == RunState.failed:
        return FAILED_TEXT.get(run.error_class) if run.error_class else "This run failed before any problem was graded."
    return None


def status_word(result: ProblemResult) -> str:
    """The status shown: from the points, so 14 of 20 reads "partial", never "passed"."""
    if result.status == "not_run":
        return "not graded"
    if result.points >= result.max_points:
        return "passed"
    return "partial" if result.points > 0 else "failed"


@dataclass(frozen=True)
class _RubricView:
    """What the run page needs of an assignment's rubric and plug-in (defaults without one)."""

    problems: dict[str, Problem]
    words: Words
    plugin: Plugin | None

    @classmethod
    def of(cls, slug: str, search: Sequence[Path]) -> _RubricView:
        try:
            rubric = load_rubric(slug, search=search)
            plugin = assignment_of(rubric)
            return cls({p.id: p for p in rubric.problems}, plugin.words, plugin)
        except (RubricError, AssignmentError):
            return cls({}, Words(), None)


def _cases(measurement: dict[str, Any], routes: dict[str, str]) -> list[tuple[str, CaseOutcome]]:
    """Every case with the route it took, in the assignment's words for its routes (its own name
    for a route they do not name)."""
    stored = stored_measurement(measurement)["cases"]
    return [(routes.get(route, route), CaseOutcome.from_dict(c)) for route, cases in stored.items() for c in cases or []]


def _case_error(case: CaseOutcome) -> str:
    """What went wrong in a failed case, as a sentence."""
    parts = []
    if case.max_err is not None:
        where = f" at index {list(case.where)}" if case.where is not None else ""
        parts.append("the output holds NaN" + where if math.isnan(case.max_err)
                     else f"largest error {case.max_err:.3g}{where}")
    if case.message:
        parts.append(case.message.rstrip("."))
    text = "; ".join(parts) or "wrong result"
    return text[0].upper() + text[1:] + "."


HIDDEN_WITHHELD = "Wrong result (this assignment does not disclose the details of hidden cases)."


def case_rows(measurement: dict[str, Any], routes: dict[str, str], disclose_hidden: bool) -> list[dict[str, Any]]:
    """One row per case: name, shape, route, verdict and the error in words. A hidden case is
    named by its number when the rubric withholds its details (its id encodes the shape)."""
    numbers: dict[str, int] = {}
    rows = []
    for route, case in _cases(measurement, routes):
        shown = case.public or disclose_hidden
        if not case.public:
            numbers.setdefault(case.case_id, len(numbers) + 1)
        name = case.case_id if shown else f"hidden case {numbers[case.case_id]}"
        rows.append({
            "id": case.case_id, "name": name, "hidden": not case.public, "withheld": not shown,
            "label": f"{'case' if case.public else 'hidden case'} {name}" if shown else name,
            "route": route, "ok": case.ok,
            "shape": " × ".join(map(str, case.shape)) if shown else "not disclosed",
            "error": "" if case.ok else _case_error(case) if shown else HIDDEN_WITHHELD,
        })
    return rows


def _withhold(text: str, rows: list[dict[str, Any]]) -> str:
    """`text` (a scoring reason) with each withheld hidden case's id, which spells its shape,
    replaced by the number the case table shows."""
    for row in rows:
        if row["withheld"]:
            text = re.sub(rf"(?<![\w-])(hidden case )?{re.escape(row['id'])}(?![\w-])", row["name"], text)
    return text


def _cases_line(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    return f"{sum(1 for r in rows if r['ok'])} of {len(rows)} passed"


def _failure_line(rows: list[dict[str, Any]]) -> str | None:
    """The first failed case, as its row in the case table says it."""
    first = next((r for r in rows if not r["ok"]), None)
    if first is None:
        return None
    shape = "" if first["withheld"] else f", shape {first['shape']}"
    return f"{first['label']}{shape}: {first['error']}"


def _speed_line(score: dict[str, Any], figures: dict[str, str]) -> str | None:
    speedup = score.get("speedup")
    if not speedup:
        return None
    text = f"{speedup['speedup']:.3g}x [{speedup['low']:.3g}, {speedup['high']:.3g}]"
    text += f" ({figures.get(score.get('figure') or '', 'measured')}, {speedup['trials']} trials)"
    target = score.get("target")
    return text + (f" vs target {target:.3g}x" if target is not None else " (no target)")


def _speed_chart(score: dict[str, Any], floor: float | None) -> Markup | None:
    speedup = score.get("speedup")
    if not speedup:
        return None
    return charts.speedup_chart(float(speedup["speedup"]), float(speedup["low"]), float(speedup["high"]),
                                score.get("target"), floor)


def sanitizer_links(measurement: dict[str, Any]) -> list[dict[str, Any]]:
    """The source lines compute-sanitizer named in a failed case (the findings the reasons
    show), each to be linked into the code view at that line: file, line and what happened."""
    record = (measurement.get("telemetry") or {}).get("sanitizer")
    return [{"file": f.file, "line": f.line, "what": f"{f.tool}: {f.kind}" + (f" in {f.kernel}" if f.kernel else "")}
            for f in shown(record) if f.file and f.line is not None]


def problem_view(details: dict[str, Any], result: ProblemResult, problem: Problem | None = None,
                 words: Words | None = None) -> dict[str, Any]:
    words = words or Words()
    score = details.get("score") or {}
    measurement = details.get("measurement") or {}
    reasons = list(score.get("reasons") or [])
    if not reasons and result.points < result.max_points:
        # Every lost point is explained: fall back to the result's own message.
        reasons = [result.message or f"{result.max_points - result.points:g} points not given (no reason recorded)"]
    disclose = problem.scoring.hidden_case_details if problem else True
    rows = case_rows(measurement, words.routes, disclose)
    if not disclose:
        reasons = [_withhold(r, rows) for r in reasons]
    word = status_word(result)
    return {
        "id": result.problem_id, "title": result.title, "status": word, "state": word.replace(" ", "-"),
        "points": result.points, "max_points": result.max_points,
        "cases": _cases_line(rows), "case_rows": rows, "failure": _failure_line(rows),
        "hidden_withheld": not disclose and any(r["hidden"] for r in rows),
        "speed": _speed_line(score, words.figures),
        "chart": _speed_chart(score, problem.scoring.speed_floor if problem else None),
        "reasons": reasons, "notes": score.get("notes") or [],
        "sanitizer": sanitizer_links(measurement),
    }
