"""Migration 0021 (roster data on the enrollment) on PostgreSQL and SQLite: a database at 0020
holds a semester's rows (two courses with an assignment each, a student in both, a TA of one who
is a student of the other, a student the roster gave no name, one whose name is a formula, the
names, sections and addresses on the accounts as today's roster import left them, scored runs).
After the upgrade every export shows what it showed before (each course's Canvas CSV, the
detailed CSV and the JSON gradebook; written out by hand from today's rules), the members page
too, and each run notice goes to the same address with the same name; each account keeps its
own name and address. A downgrade puts the sections back on the accounts, and upgrading again
gives the same exports."""
from __future__ import annotations

import contextlib
import csv
import hashlib
import html
import io
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from grader.app import create_app
from grader.cli.main import _alembic_config
from grader.models import Run, User
from grader.notify import run_notice
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import REDIS_URL, auth, fresh_database
from tests.service.test_web_settings import PASSWORD, Browser

BEFORE = "0020"
AT = datetime(2026, 3, 1, tzinfo=UTC)
TOKEN = "kg_m21-prof"
FORMULA = '=HYPERLINK("http://x.example","Bo")'
# (login, site role, full_name, section, email) as today's roster import left them on the accounts
PEOPLE = (("m-prof", "instructor", "Prof Ada", None, "prof@uni.example"),
          ("m-ta", "student", "Tess Assistant", "T1", "tess@uni.example"),
          ("m-s1", "student", "Lovelace, Ada", "L1", "ada@uni.example"),
          ("m-s2", "student", FORMULA, "L2", None),
          ("m-s3", "student", None, None, None),
          ("m-s4", "student", "Hopper, Grace", "B1", "grace@uni.example"))
MEMBERS = {"c-a": {"m-prof": "instructor", "m-ta": "ta", "m-s1": "student", "m-s2": "student", "m-s3": "student"},
           "c-b": {"m-prof": "instructor", "m-ta": "student", "m-s1": "student", "m-s4": "student"}}
SCORES = (("m-s1", "hw-a", 90.0), ("m-s2", "hw-a", 70.0), ("m-s1", "hw-b", 40.0), ("m-ta", "hw-b", 30.0),
          ("m-s4", "hw-b", 45.0))

# What revision 0020's code exports for these rows (its canvas_csv: the account's name, else the
# login; no ids; the login; the account's section; a formula written as text)
CANVAS = {
    "c-a": [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW A: kernels"],
            ["    Points Possible", "", "", "", "", "100"],
            ["Lovelace, Ada", "", "", "m-s1", "L1", "90"],
            ["'" + FORMULA, "", "", "m-s2", "L2", "70"],
            ["m-s3", "", "", "m-s3", "", ""]],
    "c-b": [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW B"],
            ["    Points Possible", "", "", "", "", "50"],
            ["Lovelace, Ada", "", "", "m-s1", "L1", "40"],
            ["Hopper, Grace", "", "", "m-s4", "B1", "45"],
            ["Tess Assistant", "", "", "m-ta", "T1", "30"]],
}
GRADEBOOK = {"hw-a": {"m-s1": ("Lovelace, Ada", "L1", 90.0), "m-s2": (FORMULA, "L2", 70.0), "m-s3": (None, None, None)},
             "hw-b": {"m-s1": ("Lovelace, Ada", "L1", 40.0), "m-s4": ("Hopper, Grace", "B1", 45.0),
                      "m-ta": ("Tess Assistant", "T1", 30.0)}}
MEMBERS_PAGE = [("m-prof", "instructor", "Prof Ada", ""), ("m-ta", "TA", "Tess Assistant", "T1"),
                ("m-s1", "student", "Lovelace, Ada", "L1"), ("m-s2", "student", FORMULA, "L2"),
                ("m-s3", "student", "", "")]
NOTICES = {("m-s1", "hw-a"): ("ada@uni.example", "Lovelace, Ada"), ("m-s2", "hw-a"): None,
           ("m-s1", "hw-b"): ("ada@uni.example", "Lovelace, Ada"), ("m-ta", "hw-b"): ("tess@uni.example", "Tess Assistant"),
           ("m-s4", "hw-b"): ("grace@uni.example", "Hopper, Grace")}
MEMBER_ROW = re.compile(r'<th scope="row">([^<]+)</th>\s*<td>([^<]+)</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>')


@dataclass
class Migrated:
    settings: Settings
    runs: dict[tuple[str, str], int]  # (login, assignment) -> run id


def _add(conn: sa.Connection, table: sa.Table, **values: Any) -> int:
    return int(conn.execute(table.insert().values(**values)).inserted_primary_key[0])


def _seed(conn: sa.Connection) -> dict[tuple[str, str], int]:
    """The semester at revision 0020, written through its tables."""
    md = sa.MetaData()
    md.reflect(conn)
    t = md.tables
    hashed = User()
    set_password(hashed, PASSWORD, SUITE_ARGON2)
    users = {login: _add(conn, t["users"], username=login, login_key=login, role=role, full_name=name, section=section,
                         email=email, created_at=AT, password_hash=hashed.password_hash)
             for login, role, name, section, email in PEOPLE}
    assignments = {}
    for course, slug, title, points in (("c-a", "hw-a", "HW A: kernels", 100), ("c-b", "hw-b", "HW B", 50)):
        course_id = _add(conn, t["courses"], slug=course, title=course.upper(), created_at=AT)
        assignments[slug] = _add(conn, t["assignments"], slug=slug, title=title, total_points=points, created_at=AT,
                                 course_id=course_id, score_policy="latest")
        for login, role in MEMBERS[course].items():
            _add(conn, t["enrollments"], course_id=course_id, user_id=users[login], role=role, created_at=AT)
    runs = {}
    for login, slug, score in SCORES:
        sub = _add(conn, t["submissions"], user_id=users[login], assignment_id=assignments[slug],
                   original_filename="hw.zip", size_bytes=10, sha256=hashlib.sha256(f"{login}{slug}".encode()).hexdigest(),
                   uploaded_at=AT)
        runs[(login, slug)] = _add(conn, t["runs"], submission_id=sub, state="scored", score=score, reason="upload",
                                   created_at=AT, finished_at=AT + timedelta(minutes=1), attempts=1)
        _add(conn, t["problem_results"], run_id=runs[(login, slug)], problem_id="1.1", title="Softmax", status="passed",
             points=score, max_points=100)
    _add(conn, t["api_tokens"], user_id=users["m-prof"], name="old", scopes="submit read read:all regrade",
         created_at=AT, token_hash=hashlib.sha256(TOKEN.encode()).hexdigest())
    return runs


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def migrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Migrated]:
    data = tmp_path_factory.mktemp(f"migration-0021-{request.param}")
    with (fresh_database("kg_mig21") if request.param == "postgresql"
          else contextlib.nullcontext(f"sqlite:///{Path(data) / 'grader.db'}")) as url:
        settings = Settings.from_variables({"KG_DATABASE_URL": url, "KG_DATA_DIR": str(data),
                                            "KG_BROKER_URL": REDIS_URL,
                                            "KG_TASK_QUEUE": f"kg-mig21-{uuid.uuid4().hex[:8]}"})
        config = _alembic_config(settings)
        command.upgrade(config, BEFORE)
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            runs = _seed(conn)
        engine.dispose()
        command.upgrade(config, "head")
        yield Migrated(settings, runs)


def _exports(settings: Settings) -> tuple[dict[str, list[list[str]]], dict[str, dict[str, tuple[Any, ...]]],
                                          dict[str, list[list[str]]]]:
    """Each course's Canvas CSV, each assignment's JSON gradebook (login -> name, section, total)
    and the detailed CSV's Student, SIS Login ID and final grade columns, read through the API."""
    with TestClient(create_app(settings)) as client:
        canvas = {}
        for course in CANVAS:
            response = client.get(f"/api/v1/courses/{course}/gradebook.csv", headers=auth(TOKEN))
            assert response.status_code == 200, response.text
            canvas[course] = list(csv.reader(io.StringIO(response.text)))
        books, detailed = {}, {}
        for slug in GRADEBOOK:
            rows = client.get(f"/api/v1/assignments/{slug}/gradebook", headers=auth(TOKEN)).json()["rows"]
            books[slug] = {row["user"]: (row["name"], row["section"], row["total"]) for row in rows}
            text = client.get(f"/api/v1/assignments/{slug}/gradebook-detailed.csv", headers=auth(TOKEN)).text
            detailed[slug] = [line[:3] for line in csv.reader(io.StringIO(text))][1:]
    return canvas, books, detailed


def test_every_export_shows_what_it_showed(migrated: Migrated) -> None:
    canvas, books, detailed = _exports(migrated.settings)
    assert canvas == CANVAS
    assert books == GRADEBOOK
    assert detailed["hw-a"] == [["Lovelace, Ada", "m-s1", "90"], ["'" + FORMULA, "m-s2", "70"], ["m-s3", "m-s3", ""]]


def test_the_members_page_and_the_run_notices_are_unchanged(migrated: Migrated) -> None:
    prof = Browser(migrated.settings, "m-prof")
    listing = prof.client.get("/courses/c-a/members").text
    assert [tuple(html.unescape(cell) for cell in row) for row in MEMBER_ROW.findall(listing)] == MEMBERS_PAGE
    engine = sa.create_engine(migrated.settings.database_url)
    with Session(engine) as session:
        for (login, slug), expected in NOTICES.items():
            notice = run_notice(session, session.get_one(Run, migrated.runs[(login, slug)]), migrated.settings)
            assert (None if notice is None else (notice.to, notice.student)) == expected, (login, slug)
    engine.dispose()


def test_the_accounts_keep_their_own_name_and_address_and_staff_get_no_course_address(migrated: Migrated) -> None:
    engine = sa.create_engine(migrated.settings.database_url)
    with engine.connect() as conn:
        assert "section" not in {c["name"] for c in sa.inspect(conn).get_columns("users")}
        accounts = {row[0]: tuple(row[1:]) for row in conn.execute(sa.text("SELECT username, full_name, email FROM users"))}
        entries = sorted(tuple(row) for row in conn.execute(sa.text(
            "SELECT c.slug, u.username, e.role, e.full_name, e.section, e.email, e.canvas_user_id, e.sis_user_id, "
            "e.sis_login_id FROM enrollments e JOIN users u ON u.id = e.user_id JOIN courses c ON c.id = e.course_id")))
    engine.dispose()
    assert accounts == {login: (name, email) for login, _, name, _, email in PEOPLE}
    assert entries == sorted((course, login, role, *next((name, section, email if role == "student" else None)
                                                         for who, _, name, section, email in PEOPLE if who == login),
                              None, None, None)
                             for course, members in MEMBERS.items() for login, role in members.items())


def test_a_downgrade_gives_the_accounts_their_sections_and_upgrading_again_changes_no_export(
        migrated: Migrated) -> None:
    config = _alembic_config(migrated.settings)
    command.downgrade(config, BEFORE)
    try:
        engine = sa.create_engine(migrated.settings.database_url)
        with engine.connect() as conn:
            sections = dict(tuple(row) for row in conn.execute(sa.text("SELECT username, section FROM users")))
        engine.dispose()
        assert sections == {login: section for login, _, _, section, _ in PEOPLE}
    finally:
        command.upgrade(config, "head")
    canvas, books, _ = _exports(migrated.settings)
    assert (canvas, books) == (CANVAS, GRADEBOOK)
