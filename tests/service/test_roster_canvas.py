"""A class-size Canvas gradebook export (300 lines) imported on PostgreSQL: each student's
account is keyed on the SIS Login ID; the course's enrollment keeps the Student name, Section,
ID, SIS User ID and SIS Login ID as Canvas wrote them; the lines Canvas adds (Points Possible,
its test student) are skipped or reported; importing it again changes nothing; and the
gradebook's Canvas CSV gives back the same ids, so the grades go back to Canvas."""
from __future__ import annotations

import contextlib
import csv
import io
import uuid
import zlib
from collections.abc import Iterator

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.api.gradebook import canvas_csv
from grader.course.roster import import_roster
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Role, User
from grader.reads.gradebook_reads import gradebook
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2


@contextlib.contextmanager
def held_login(sessions: sessionmaker[Session], login: str) -> Iterator[None]:
    """While the block runs, an uncommitted account named `login` in a transaction of its own:
    a background import's insert of that login waits on it (the unique index), so the import is
    seen part-way however fast the machine is; the rollback at the end lets it go on."""
    held = sessions()
    try:
        held.add(User(username=login, role=Role.student))
        held.flush()
        yield
    finally:
        held.rollback()
        held.close()


def first_canvas_id(tag: str) -> int:
    """The Canvas ID of the export's first student: one course holds a Canvas ID once, and
    several tests import these rosters into hw4's course in one session."""
    return 5000 + zlib.crc32(tag.encode()) % 1_000_000 * 1000


def _canvas_export(tag: str, students: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Homework 4 (88123)",
                     "Current Score", "Final Score"])
    writer.writerow(["    Points Possible", "", "", "", "", "100.00", "(read only)", "(read only)"])
    for n in range(students):
        login = f"s{n:03d}{tag}" if n % 3 else f"S{n:03d}{tag}@Andrew.example.edu"  # Canvas keeps its case
        writer.writerow([f"Student{n:03d}, Given", first_canvas_id(tag) + n, 2026000 + n, login, f"Lecture {1 + n % 2}", "", "", ""])
    writer.writerow(["Student, Test", 9999, "", "", "", "", "", ""])  # Canvas's test student: no login
    return out.getvalue()


def test_a_300_line_canvas_export_round_trips_through_the_gradebook_csv(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    tag = uuid.uuid4().hex[:6]
    text = _canvas_export(tag, 297)
    assert len(text.splitlines()) == 300
    with session_scope(sessions) as session:
        report = import_roster(session, text, get_assignment(session, "hw4").course, SUITE_ARGON2)
        assert report.summary() == "297 created, 0 updated, 0 unchanged, 1 line(s) with errors"
        assert [str(e) for e in report.errors] == ["line 300: the SIS Login ID is empty"]
    with session_scope(sessions) as session:
        course = get_assignment(session, "hw4").course_id
        users = {u.username: u for u in session.scalars(select(User).where(User.username.like(f"%{tag}%")))}
        assert len(users) == 297
        plain, address = users[f"s001{tag}"], users[f"s000{tag}@andrew.example.edu"]
        kept = {name: entry_of(session, user.id, course) for name, user in (("plain", plain), ("address", address))}
        assert [(e.full_name, e.section, e.email, e.canvas_user_id, e.sis_user_id, e.sis_login_id)
                for e in kept.values() if e is not None] == [
            ("Student001, Given", "Lecture 2", None, str(first_canvas_id(tag) + 1), "2026001", f"s001{tag}"),
            ("Student000, Given", "Lecture 1", f"s000{tag}@andrew.example.edu", str(first_canvas_id(tag)), "2026000",
             f"S000{tag}@Andrew.example.edu")]  # Canvas's login in its own case; the account's is lower-cased
        assert (address.full_name, address.email) == ("Student000, Given", f"s000{tag}@andrew.example.edu")
    with session_scope(sessions) as session:
        again = import_roster(session, text, get_assignment(session, "hw4").course, SUITE_ARGON2)
        assert again.summary() == "0 created, 0 updated, 297 unchanged, 1 line(s) with errors"
        exported = csv.DictReader(io.StringIO(canvas_csv([gradebook(session, get_assignment(session, "hw4"))])))
        ids = {row["ID"]: (row["Student"], row["SIS User ID"], row["SIS Login ID"]) for row in exported
               if tag in row["SIS Login ID"]}
    given = csv.DictReader(io.StringIO(text))
    assert ids == {row["ID"]: (row["Student"], row["SIS User ID"], row["SIS Login ID"]) for row in given
                   if row["SIS Login ID"]}
