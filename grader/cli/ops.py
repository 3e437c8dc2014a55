"""`grader` commands for course operations: schedule and extensions, pausing and resuming an
assignment's grading, similarity report, Gradescope autograder zip. Registered on the main
app by grader.cli."""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated
from zoneinfo import ZoneInfo

import typer
from sqlalchemy.orm import Session

from grader.auth.audit import Via
from grader.celery_app import make_celery
from grader.course.assignment_settings import ScheduleChange, ScheduleError, extend_student
from grader.course.deadlines import duration_text
from grader.course.policies import late_policy
from grader.db import make_engine, make_session_factory, session_scope
from grader.gradescope.pack import PackError, build_autograder_zip
from grader.models import Assignment
from grader.runs.engine_config import pipeline_config
from grader.runs.grading_control import grading_state, resume, set_paused
from grader.schedule_changes import SchedulePreview, apply_schedule, preview_schedule, settings_text
from grader.service import NotFound, get_assignment
from grader.settings import get_settings
from grader.storage.blobstore import BlobStore
from worker.rubric import RubricError, find_rubric, load_rubric
from worker.unpack import BadArchive


def schedule(
    assignment: str,
    release: Annotated[str | None, typer.Option(help="ISO date; no offset: the course time zone")] = None,
    due: Annotated[str | None, typer.Option(help="ISO date; no offset: the course time zone")] = None,
    grace: Annotated[str | None, typer.Option(help="no-penalty time after the due date, e.g. 2h")] = None,
    late_window: Annotated[str | None, typer.Option(help="from the due date, grace included, e.g. 3d")] = None,
    penalty_per_day: Annotated[str | None, typer.Option(help="share of the score per started day after the grace: 0.1 or 10%")] = None,
    policy: Annotated[str | None, typer.Option(help="gradebook score policy: latest or best")] = None,
    students_choose: Annotated[bool | None, typer.Option(
        "--students-choose/--no-students-choose",
        help="whether students may choose which of their scored runs counts")] = None,
    extra_credit: Annotated[str | None, typer.Option(
        help="points a grade may reach above the total through staff adjustments and manual grades (0: none)")] = None,
    canvas_id: Annotated[str | None, typer.Option(
        help="the assignment's id in Canvas (the number in its Canvas address), which titles its column in the "
             "Canvas CSV; \"\" for none")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", help="save a change that alters students' grades; without it such a change lists them, saves "
                      "nothing and exits with status 1")] = False,
) -> None:
    """Show an assignment's schedule and late policy, or change the parts given (a change that
    alters grades only with --yes)."""
    settings = get_settings()
    change = ScheduleChange(release, due, grace, late_window, penalty_per_day, policy, students_choose, extra_credit,
                            canvas_id)
    with session_scope(make_session_factory(make_engine(settings))) as session:
        assignment_or_exit(session, assignment)
        try:
            shown = preview_schedule(session, assignment, change, settings)
        except ScheduleError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
        _show_grade_changes(shown)
        if shown.changes and not yes:
            typer.echo(f"nothing saved: this changes {len(shown.changes)} grade(s); run it again with --yes to "
                       "save it", err=True)
            raise typer.Exit(1)
        apply_schedule(session, shown, settings, Via.cli, None)
        _show_schedule(get_assignment(session, assignment), ZoneInfo(settings.course_timezone))


def _show_grade_changes(shown: SchedulePreview) -> None:
    """The settings a change alters and every grade it changes, a line each."""
    for line in settings_text(shown.changed, arrow="->"):
        typer.echo(f"change: {line}")
    if shown.changed:
        typer.echo(f"grades it changes: {len(shown.changes) or 'none'}")
    for grade in shown.changes:
        typer.echo(f"  {grade.text}")


def _show_schedule(row: Assignment, zone: ZoneInfo) -> None:
    updated = late_policy(row)

    def show(at: datetime | None) -> str:
        return at.astimezone(zone).isoformat() if at else "none"

    def span(length: timedelta) -> str:  # in words, as the pages show durations ("3 d", "2 h 30 min")
        return duration_text(length) if length else "none"

    typer.echo(f"{row.slug}: release {show(updated.release_at)}, due {show(updated.due_at)}, "
               f"grace {span(updated.grace)}, late window {span(updated.late_window)}, "
               f"{updated.penalty_per_day:.0%} per started day after the grace, score policy {row.score_policy}, "
               f"students {'choose' if row.students_choose_counted_run else 'do not choose'} which run counts, "
               f"extra credit up to {row.extra_credit_points:g} points, "
               f"Canvas id {row.canvas_assignment_id or 'none'}")


def extend(
    assignment: str,
    username: str,
    extra: Annotated[str, typer.Argument(help="extra time, e.g. 2d (0 removes the extension)")],
    reason: Annotated[str, typer.Option(help="kept with the extension")] = "",
) -> None:
    """Give one student extra time on an assignment (moves their due date, grace and late window)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        assignment_or_exit(session, assignment)
        try:
            extend_student(session, assignment, username, extra, reason)
        except (NotFound, ValueError) as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
    typer.echo(f"{username}: {extra} extra on {assignment}")


def similarity(
    assignment: str,
    out: Annotated[Path, typer.Option(help="report.html (the ranking; beside it report-pair-N.html side by side, "
                                           "report-ranking-N.html the further pages) or report.json")],
    detailed: Annotated[int, typer.Option(help="pairs shown side by side in the HTML report, a page each")] = 50,
    base: Annotated[str | None, typer.Option(help="the starter students received: a zip, a folder or git:<repo>@<ref> "
                                             "(default: the assignment's base, else the rubric's, else our kit's)")] = None,
) -> None:
    """Compare every student's latest submission with every other's, file by file and function
    by function (the starter's code ignored), and write the ranked pairs with their matching regions."""
    # imported here: copydetect loads matplotlib, which no other command needs
    from grader.similarity.base import assignment_base, clone_dir, given_base
    from grader.similarity.fetch import FetchRules
    from grader.similarity.public import read_sources
    from grader.similarity.report import report_json, report_pages
    from grader.similarity.store import compute_report, fingerprint_dir

    if out.suffix not in (".html", ".json"):
        raise typer.BadParameter("--out must end in .html or .json")
    settings = get_settings()
    rubric = load_rubric(assignment, search=settings.rubric_dirs)
    limits = pipeline_config(settings, rubric).limits
    with session_scope(make_session_factory(make_engine(settings))) as session:
        row = assignment_or_exit(session, assignment)
        try:
            rules = FetchRules.of(settings)
            starter = (given_base(base, rubric, limits, rules, clone_dir(settings.data_dir)) if base
                       else assignment_base(settings.data_dir, rubric, limits, row.similarity_base, rules))
            public = read_sources(settings.data_dir, rubric, limits, row.similarity_sources or [], rules)
        except BadArchive as exc:
            typer.echo(f"the base or a public source cannot be read: {exc}", err=True)
            raise typer.Exit(1) from exc
        typer.echo(f"base: {starter.label}", err=True)
        report, found = compute_report(session, BlobStore(settings.blob_dir), rubric, limits, starter,
                                       fingerprint_dir(settings.data_dir), public=public)
    for username, why in sorted(report.skipped.items()):
        typer.echo(f"left out {username}: {why}", err=True)
    pairs = report.pairs
    if out.suffix == ".json":
        out.write_text(json.dumps({**report_json(assignment, pairs, report.clusters, report.public, report.public_matches,
                                               report.common), "base": starter.label}, indent=1))
    else:
        for name, page in report_pages(assignment, pairs, found.students, starter, detailed, stem=out.stem,
                                       clusters=report.clusters, public=report.public,
                                       public_matches=report.public_matches, common=report.common).items():
            (out.parent / name).write_text(page)
    best = f"; most similar: {pairs[0].a} and {pairs[0].b} ({pairs[0].score:.0%})" if pairs else ""
    typer.echo(f"{len(found.students)} students, {len(pairs)} pairs{best}; report in {out}")


def gradescope_pack(
    assignment: str,
    out: Annotated[Path, typer.Option(help="zip to write")] = Path("autograder.zip"),
    cuda_arch: Annotated[str | None, typer.Option(help="nvcc -arch on the grading machine (default KG_CUDA_ARCH)")] = None,
) -> None:
    """Write a Gradescope autograder zip that grades with this pipeline (a course's own
    assignment, found through KG_RUBRIC_DIRS, is packed with its whole folder)."""
    settings = get_settings()
    try:
        packed = build_autograder_zip(find_rubric(assignment, search=settings.rubric_dirs), out,
                                      cuda_arch or settings.cuda_arch)
    except (RubricError, PackError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(packed)


def pause(assignment: Annotated[str, typer.Argument(help="assignment slug (its rubric's name)")]) -> None:
    """Stop sending the assignment's runs to the workers (uploads are still stored and
    queued); what is in flight finishes. `grader resume` sends the waiting runs."""
    sessions = make_session_factory(make_engine(get_settings()))
    with session_scope(sessions) as session:
        assignment_or_exit(session, assignment)
        state = grading_state(session, set_paused(session, assignment, True))
    typer.echo(f"{assignment}: paused; {len(state.in_flight)} run(s) in flight, {state.waiting} waiting")


def resume_grading(assignment: Annotated[str, typer.Argument(help="assignment slug (its rubric's name)")]) -> None:
    """Resume a paused assignment: each waiting student's next run is sent now (fair share)."""
    settings = get_settings()
    sessions = make_session_factory(make_engine(settings))
    with session_scope(sessions) as session:
        assignment_or_exit(session, assignment)
    sent = resume(make_celery(settings), sessions, assignment, settings.task_queue)
    typer.echo(f"{assignment}: resumed; sent {len(sent)} run(s)")


def assignment_or_exit(session: Session, slug: str) -> Assignment:
    try:
        return get_assignment(session, slug)
    except NotFound as exc:
        typer.echo(f"{exc}; `grader migrate` loads the assignments from rubrics/", err=True)
        raise typer.Exit(2) from exc


def register(app: typer.Typer) -> None:
    app.command()(schedule)
    app.command()(extend)
    app.command()(pause)
    app.command("resume")(resume_grading)
    app.command()(similarity)
    app.command("gradescope-pack")(gradescope_pack)

