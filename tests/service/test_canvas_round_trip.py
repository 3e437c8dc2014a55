"""The Canvas round trip (issue 49), on PostgreSQL: a Canvas gradebook export (a file written by
hand in the format Canvas documents and writes: its five student columns, assignment columns
titled `<title> (<id>)`, read-only score columns, the Points Possible line, the Manual Posting
line, a test student without a login) is our roster import's input; the staff set the Canvas
id on the assignment's settings page; the students get grades; and the course's Canvas CSV is
what Canvas's import reads back: the same student columns, the assignment's column titled
exactly as in Canvas's file, every student row with Canvas's own ID, SIS User ID, SIS Login ID
(in its own case) and Section, so that Canvas's rules (ID first, then SIS User ID, then SIS
Login ID as written, then the name; an assignment by the id in its title) find each student
and the assignment, and no new assignment is made."""
from __future__ import annotations

import csv
import io
import re
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.course.roster import import_roster
from grader.db import session_scope
from grader.models import Assignment, Course, Role, RunState, User, utcnow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser

CANVAS_EXPORT = Path(__file__).resolve().parents[1] / "fixtures" / "canvas" / "gradebook_export.csv"
TITLE = "HW4: Transformer CUDA acceleration"
STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
SCORES = {"adal@andrew.cmu.edu": 92.5, "aturing": 80.0, "ghopper": 100.0}  # Nora has no scored run
CANVAS_TITLE_AND_ID = re.compile(r"^(.*) \((\d+)\)$")  # how Canvas reads an assignment column's title


def canvas_student(row: dict[str, str], course: list[dict[str, str]]) -> dict[str, str] | None:
    """The Canvas course's student a row of an imported file names, by Canvas's rules: its ID,
    else its SIS User ID, else its SIS Login ID as written (case included), else its name."""
    for column in ("ID", "SIS User ID", "SIS Login ID", "Student"):
        found = [student for student in course if row[column] and student[column] == row[column]]
        if found:
            return found[0]
    return None


def canvas_assignment(title: str, columns: list[str]) -> str | None:
    """The Canvas assignment (its id) a column title names: the id it ends with, else the
    assignment whose title it is; None: Canvas would make a new assignment."""
    by_title = {match.group(1): match.group(2) for c in columns if (match := CANVAS_TITLE_AND_ID.match(c))}
    match = CANVAS_TITLE_AND_ID.match(title)
    return match.group(2) if match else by_title.get(title)


def test_a_canvas_export_in_our_canvas_csv_out_every_row_and_column_matched(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    canvas_text = CANVAS_EXPORT.read_text()
    canvas = list(csv.DictReader(io.StringIO(canvas_text)))
    canvas_columns = list(csv.reader(io.StringIO(canvas_text)))[0]
    tag = uuid.uuid4().hex[:6]
    slug = f"rt-{tag}"
    with session_scope(sessions) as session:
        course = Course(slug=slug, title="LLM Systems")
        session.add(Assignment(slug=f"{slug}-hw4", title=TITLE, total_points=100, course=course))
        session.flush()
        set_password(get_or_create_user(session, f"rtprof-{tag}", Role.instructor, [course]), PASSWORD, SUITE_ARGON2)
        report = import_roster(session, canvas_text, course, SUITE_ARGON2)
        assert report.summary() == "4 created, 0 updated, 0 unchanged, 1 line(s) with errors"
        assert [str(e) for e in report.errors] == ["line 8: the SIS Login ID is empty"]  # Canvas's test student
        for login, score in SCORES.items():
            user = session.scalars(select(User).where(User.username == login)).one()
            _, run = record_submission(session, user, course.assignments[0], "hw4.zip", StoredBlob(uuid.uuid4().hex * 2, 9))
            run.state, run.score, run.finished_at = RunState.scored, score, utcnow()

    prof = Browser(settings, f"rtprof-{tag}")
    settings_page = f"/assignments/{slug}-hw4/settings"
    saved = prof.client.post(settings_page, data={
        "csrf_token": prof.page_csrf(settings_page), "release": "", "due": "", "grace": "", "late_window": "",
        "penalty_per_day": "", "score_policy": "latest", "extra_credit": "0",
        "canvas_id": "https://canvas.example.edu/courses/42/assignments/88123"}, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    exported = prof.client.get(f"/courses/{slug}/gradebook.csv")
    assert exported.status_code == 200
    ours = list(csv.reader(io.StringIO(exported.text)))
    header, points, rows = ours[0], ours[1], [dict(zip(ours[0], row, strict=True)) for row in ours[2:]]

    # Columns: Canvas's five student columns, then the assignment's, titled exactly as in Canvas's file
    assert header[:5] == canvas_columns[:5] == STUDENT_COLUMNS
    assert header[5:] == [f"{TITLE} (88123)"] and header[5] in canvas_columns
    assert canvas_assignment(header[5], canvas_columns) == "88123"
    assert points[0].strip() == "Points Possible" and float(points[5]) == float(canvas[0][header[5]])
    # Rows: one per student of Canvas's file that has a login, each found by Canvas's rules by its ID
    students = [s for s in canvas if s["SIS Login ID"]]
    assert len(rows) == len(students) == 4
    for row in rows:
        found = canvas_student(row, canvas)
        assert found is not None and found["ID"] == row["ID"]
        assert {c: row[c] for c in STUDENT_COLUMNS} == {c: found[c] for c in STUDENT_COLUMNS}
    assert {row["ID"]: row[header[5]] for row in rows} == {"5001": "92.5", "5002": "80", "5003": "", "5004": "100"}
    # Even without the ID column, the login in Canvas's own case still finds each student
    assert all(canvas_student({**row, "ID": "", "SIS User ID": "", "Student": ""}, canvas) == canvas_student(row, canvas)
               for row in rows)
