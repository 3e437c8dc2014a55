"""`grader course ta-powers`, `grader course quota` and `grader quota` (issue 51; real PostgreSQL):
each prints what is in force, changes it through grader.staff_settings (audited via cli), and
refuses what the pages refuse with exit 2 and why, changing nothing."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.cli.main import app
from grader.db import session_scope
from grader.models import Assignment, AuditEvent, Course
from grader.settings import get_settings


@pytest.fixture
def cli(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    for key, value in {**settings_env, "KG_QUOTA_RUNS": "0", "KG_QUOTA_WINDOW_S": "7200"}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield CliRunner()
    get_settings.cache_clear()


@pytest.fixture
def slug(sessions: sessionmaker[Session]) -> str:
    """A course and its one assignment, both named by the returned slug."""
    name = f"ssc-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=name, title=name, course=Course(slug=name, title=name), total_points=10))
    return name


def _audited(sessions: sessionmaker[Session], slug: str) -> list[tuple[str, str]]:
    with session_scope(sessions) as session:
        return [(row.via, row.detail) for row in session.scalars(
            select(AuditEvent).where(AuditEvent.event == "settings_changed", AuditEvent.detail.contains(slug))
            .order_by(AuditEvent.id))]


def test_ta_powers_granted_and_revoked(cli: CliRunner, slug: str, sessions: sessionmaker[Session]) -> None:
    shown = cli.invoke(app, ["course", "ta-powers", slug])
    assert shown.exit_code == 0 and shown.output.strip() == f"course {slug}: its TAs view and grade only"
    granted = cli.invoke(app, ["course", "ta-powers", slug, "--grant", "queue", "--grant", "extend"])
    assert granted.exit_code == 0, granted.output
    assert granted.output.strip() == (f"course {slug}: its TAs view and grade, and may extend (grant and remove "
                                      "extensions); queue (see the grading queue and pause or resume grading)")
    revoked = cli.invoke(app, ["course", "ta-powers", slug, "--revoke", "extend"])
    assert "may queue (" in revoked.output and "extend" not in revoked.output
    wrong = cli.invoke(app, ["course", "ta-powers", slug, "--grant", "manage"])
    assert wrong.exit_code == 2 and "“manage” is not a power a course gives its TAs" in wrong.output
    assert cli.invoke(app, ["course", "ta-powers", "no-such-course"]).exit_code == 2
    assert _audited(sessions, slug) == [("cli", f"course {slug}: TA powers none -> extend, queue"),
                                        ("cli", f"course {slug}: TA powers extend, queue -> queue")]


def test_quotas_set_cleared_and_refused(cli: CliRunner, slug: str, sessions: sessionmaker[Session]) -> None:
    shown = cli.invoke(app, ["quota", slug])
    assert shown.output.strip() == f"assignment {slug}: default set; in force: no quota (the service's default)"
    course = cli.invoke(app, ["course", "quota", slug, "--runs", "4"])
    assert course.output.strip() == (f"course {slug}: 4 set; in force: 4 graded runs per student in any 2 h "
                                     f"(course {slug}'s)")
    assert cli.invoke(app, ["quota", slug]).output.strip() == (
        f"assignment {slug}: default set; in force: 4 graded runs per student in any 2 h (course {slug}'s)")
    own = cli.invoke(app, ["quota", slug, "--runs", "0"])
    assert own.output.strip() == f"assignment {slug}: 0 set; in force: no quota (this assignment's own)"
    refused = cli.invoke(app, ["quota", slug, "--runs", "lots"])
    assert refused.exit_code == 2 and "“lots” is not a number of runs" in refused.output
    cleared = cli.invoke(app, ["quota", slug, "--runs", ""])
    assert cleared.output.strip().endswith(f"in force: 4 graded runs per student in any 2 h (course {slug}'s)")
    assert cli.invoke(app, ["quota", "no-such-hw"]).exit_code == 2
    assert _audited(sessions, slug) == [("cli", f"course {slug}: run quota default -> 4"),
                                        ("cli", f"assignment {slug}: run quota default -> 0"),
                                        ("cli", f"assignment {slug}: run quota 0 -> default")]
