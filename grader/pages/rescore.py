"""Scoring an assignment's stored measurements again under its current rubric, for its course's
instructors (grader.rescoring; `grader rescore` from a terminal): the settings page's button
opens the preview (a row per student whose counted run or grade changes, the runs that cannot be
scored again and why), and only its confirmation, carrying the preview's digest, writes it. A
confirmation whose changes moved meanwhile shows the preview again, saying so."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from grader.api.deps import get_context
from grader.auth.audit import Via
from grader.course.grades import points_text
from grader.models import User
from grader.pages.common import Db, Instructor, InstructorForm, page, see_other
from grader.rescoring import RescoreError, RescorePreview, apply_rescore, preview_rescore

router = APIRouter(include_in_schema=False)

STUDENT_COLUMNS = ("Student", "Name", "Counted run", "Run score", "Problems changed", "Grade", "Why")


@router.get("/assignments/{slug}/rescore", response_class=HTMLResponse)
def rescore_preview(request: Request, session: Db, staff: Instructor) -> Response:
    """What scoring the stored measurements again would change; writes nothing."""
    return _step(request, staff.user, session, staff.assignment.slug, None)


@router.post("/assignments/{slug}/rescore", response_class=HTMLResponse)
async def rescore_confirm(request: Request, session: Db, staff: InstructorForm) -> Response:
    """Write the new scores when `confirm` is the digest of what they change now; else the preview."""
    confirmed = (await request.form()).get("confirm")
    return _step(request, staff.user, session, staff.assignment.slug, str(confirmed) if confirmed is not None else None)


def _step(request: Request, user: User, session: Db, slug: str, confirmed: str | None) -> Response:
    settings, back = get_context(request).settings, f"/assignments/{slug}/settings"
    try:
        shown = preview_rescore(session, slug, settings)
        if shown.changes and confirmed == shown.digest:
            events = apply_rescore(session, shown, settings, Via.web, user)
            return see_other(f"{back}?saved=rescore&runs={len(events)}#rescore")
    except RescoreError as exc:
        session.rollback()
        return page(request, "confirm.html", user, title=f"Score {slug} again", details=[], fields=None,
                    question=f"{slug} cannot be scored again: {exc}.", cancel=back, cancel_label="Back to the settings")
    return _preview_page(request, user, shown, stale=confirmed is not None)


def _preview_page(request: Request, user: User, shown: RescorePreview, stale: bool) -> HTMLResponse:
    slug, back = shown.slug, f"/assignments/{shown.slug}/settings"
    count = len(shown.changes)
    runs = f"{count} run's score" if count == 1 else f"{count} runs' scores"
    refused: list[tuple[str, ...]] = [(f"run {r.run_id}", r.login, r.why) for r in shown.refused]
    tables: list[tuple[str, str, tuple[str, ...], list[tuple[str, ...]]]] = [("rescore-students", f"Students concerned: {len(shown.students)}", STUDENT_COLUMNS,
               [line.cells() for line in shown.students])]
    if refused:
        tables.append(("rescore-refused", f"Not re-scorable (their scores stay): {len(refused)}",
                       ("Run", "Student", "Why"), refused))
    details = [f"Every scored run of {slug} is scored again from the measurements it stored, with the rubric as it "
               "is now and the speedup targets calibrated for the GPU it ran on; no GPU is used and nothing is "
               "measured again.",
               f"{count} run(s) change, {shown.unchanged} stay the same, {len(shown.refused)} cannot be scored again."]
    if count and shown.total_before != shown.total_after:
        details.append(f"The assignment's points change from {points_text(shown.total_before)} to "
                       f"{points_text(shown.total_after)}, as its rubric says.")
    if shown.other_runs:
        details.append(f"{shown.other_runs} of the runs that change count for no one now (their students' other "
                       "runs count); their new scores count if they come to.")
    details.append("Each run's earlier points stay in the audit log (as a “rescored” event) and beside its new ones.")
    if not count:
        return page(request, "confirm.html", user, title=f"Score {slug} again",
                    question=f"Nothing changes: every scored run of {slug} already has the score its stored "
                             "measurements earn under the current rubric.",
                    details=details, tables=tables if refused else [], fields=None, cancel=back,
                    cancel_label="Back to the settings")
    return page(request, "confirm.html", user, title=f"Confirm scoring {slug} again",
                notice="The scores have changed since the preview was shown: check them again." if stale else None,
                question=f"Write the new scores of {slug}? It changes {runs}.", details=details, tables=tables,
                action=f"/assignments/{slug}/rescore", fields=[("confirm", shown.digest)],
                confirm_label=f"Write and change {runs}", cancel=back, cancel_label="Keep the scores as they are")
