"""`grader rescore`: an assignment's stored measurements scored again under its current rubric,
without a GPU (grader.rescoring, the settings page's button does the same): the changes are
listed a line per student; only --apply writes them (one transaction, an audit event per run,
via cli). Registered on the main app by grader.cli."""
from __future__ import annotations

from typing import Annotated

import typer

from grader.auth.audit import Via
from grader.cli.ops import assignment_or_exit
from grader.course.grades import points_text
from grader.db import make_engine, make_session_factory, session_scope
from grader.rescoring import RescoreError, RescorePreview, apply_rescore, preview_rescore
from grader.settings import get_settings


def rescore(
    assignment: str,
    course: Annotated[str | None, typer.Option(help="the course that holds the assignment (checked)")] = None,
    apply: Annotated[bool, typer.Option(
        "--apply", help="write the new scores; without it the changes are listed and nothing is written")] = False,
) -> None:
    """Score ASSIGNMENT's scored runs again from their stored measurements under its current rubric
    (no GPU): list what changes per student, and write it with --apply."""
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        assignment_or_exit(session, assignment)
        try:
            shown = preview_rescore(session, assignment, settings, course)
        except RescoreError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
        for line in preview_lines(shown):
            typer.echo(line)
        if not shown.changes:
            return
        if not apply:
            typer.echo("nothing written: run it again with --apply to write it")
            return
        try:
            events = apply_rescore(session, shown, settings, Via.cli, None)
        except RescoreError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(1) from exc
        typer.echo(f"written: {len(events)} run(s) scored again (audit events `rescored`)")


def preview_lines(shown: RescorePreview) -> list[str]:
    """The preview in lines: the summary, a line per student, the other runs, the refusals."""
    total = (f"its points {points_text(shown.total_before)} -> {points_text(shown.total_after)}"
             if shown.total_before != shown.total_after else f"out of {points_text(shown.total_after)}")
    lines = [f"{shown.slug}: scored again under its current rubric ({total}): {len(shown.changes)} run(s) change, "
             f"{shown.unchanged} stay the same, {len(shown.refused)} not re-scorable"]
    lines += [f"  {line.text}" for line in shown.students]
    if shown.other_runs:
        lines.append(f"other runs that change (counting for no one now): {shown.other_runs}")
    if shown.refused:
        lines.append("not re-scorable (their scores stay):")
        lines += [f"  run {r.run_id} ({r.login}): {r.why}" for r in shown.refused]
    return lines


def register(app: typer.Typer) -> None:
    app.command()(rescore)
