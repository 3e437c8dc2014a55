"""`grader course ta-powers`, `grader course quota` and `grader quota`: a course's TA powers and
its graded-run quotas, read or changed through grader.staff_settings (the pages' and the API's
functions; each change audited, via cli). Each prints what is in force afterwards."""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, TypeVar

import typer

from grader.auth.audit import Via
from grader.cli.accounts import course_app, course_or_exit
from grader.cli.ops import assignment_or_exit
from grader.course.policies import course_run_limit, run_limit
from grader.course.quotas import hours
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Course
from grader.roles import TA_GRANTABLE, TA_POWER_WORDS
from grader.settings import Settings, get_settings
from grader.staff_settings import parse_powers, set_assignment_run_quota, set_course_run_quota, set_ta_powers

T = TypeVar("T")
RunsOption = Annotated[str | None, typer.Option(
    help="graded runs per student and quota window: a number, 0 for no quota, '' for the default")]


def _parsed_or_exit(parse: Callable[[], T]) -> T:
    """What `parse` gives, or the command ends with exit 2 saying why it refused the value."""
    try:
        return parse()
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc


def _powers_line(course: Course) -> str:
    held = [f"{p.value} ({TA_POWER_WORDS[p]})" for p in TA_GRANTABLE if p in course.ta_granted]
    return f"course {course.slug}: its TAs view and grade" + (f", and may {'; '.join(held)}" if held else " only")


@course_app.command("ta-powers")
def ta_powers(
    course: str,
    grant: Annotated[list[str] | None, typer.Option(help=f"a power to give its TAs (repeatable): "
                                                         f"{', '.join(p.value for p in TA_GRANTABLE)}")] = None,
    revoke: Annotated[list[str] | None, typer.Option(help="a power to take back (repeatable)")] = None,
) -> None:
    """What the course COURSE's TAs may do besides viewing and grading; --grant and --revoke change it."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        row = course_or_exit(session, course)
        granted = _parsed_or_exit(lambda: parse_powers(grant or []))
        revoked = _parsed_or_exit(lambda: parse_powers(revoke or []))
        if granted & revoked:
            typer.echo("a power is both granted and revoked; name it once", err=True)
            raise typer.Exit(2)
        if granted or revoked:
            set_ta_powers(session, row, (row.ta_granted | granted) - revoked, Via.cli)
        typer.echo(_powers_line(row))


def _quota_line(settings: Settings, what: str, own: int | None, in_force: tuple[int, str]) -> str:
    runs, whose = in_force
    window = hours(timedelta(seconds=settings.quota_window_s))
    now = f"{runs} graded runs per student in any {window}" if runs else "no quota"
    return f"{what}: {'default' if own is None else own} set; in force: {now} ({whose})"


@course_app.command("quota")
def course_quota(course: str, runs: RunsOption = None) -> None:
    """The graded-run quota of the course COURSE's assignments that set none; --runs sets it."""
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        row = course_or_exit(session, course)
        if runs is not None:
            _parsed_or_exit(lambda: set_course_run_quota(session, row, runs.strip(), Via.cli))
        typer.echo(_quota_line(settings, f"course {row.slug}", row.quota_runs, course_run_limit(settings, row)))


def quota(assignment: str, runs: RunsOption = None) -> None:
    """The assignment's own graded-run quota and the one in force; --runs sets it ('' : its course's)."""
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        row = assignment_or_exit(session, assignment)
        if runs is not None:
            _parsed_or_exit(lambda: set_assignment_run_quota(session, row, runs.strip(), Via.cli))
        typer.echo(_quota_line(settings, f"assignment {row.slug}", row.quota_runs, run_limit(settings, row)))


def register(app: typer.Typer) -> None:
    """`grader quota` (the course commands join `grader course` on import)."""
    app.command()(quota)
