"""Bulk paths for grading by hand (issue 51), on real PostgreSQL through the web pages and the
API: every student's counted (or latest) upload as one zip whose manifest says which upload and
why, the bytes as stored; manual grades and adjustments from a CSV, previewed line by line
(before -> after), refused whole when one line is bad, applied in one go once confirmed and
recorded as the grade form records them (who, reason)."""
from __future__ import annotations

import csv
import hashlib
import io
import re
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Enrollment, GradeAdjustment, Role, RunState, User, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues
from tests.service.test_staff_workflow import text_of
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class Course:
    slug: str
    prof: str
    scored: str  # two uploads, both scored (80 then 50)
    waiting: str  # one upload, its run never scored (the outage)
    absent: str  # no upload
    uploads: dict[str, list[tuple[int, int | None, bytes]]]  # login -> (submission, run, bytes) per upload
    token: str
    student_token: str
    settings: Settings


def _upload(session: Session, blobs: BlobStore, login: str, assignment: Assignment,
            score: float | None) -> tuple[int, int | None, bytes]:
    data = f"zip of {login} {uuid.uuid4().hex}".encode()  # any bytes: the archive holds them as stored
    sub, run = record_submission(session, get_or_create_user(session, login, Role.student), assignment,
                                 "kernels.zip", blobs.put_bytes(data))
    if score is not None:
        run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
    session.flush()
    return sub.id, run.id if score is not None else None, data


@pytest.fixture(scope="module")
def course(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Course]:
    tag = uuid.uuid4().hex[:6]
    slug = f"bulk-{tag}"
    blobs = BlobStore(settings.blob_dir)
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title=f"Bulk {tag}", course=CourseRow(slug=slug, title=f"Bulk {tag}"),
                                total_points=100, score_policy="latest")
        session.add(assignment)
        session.flush()  # created first: new accounts join every assignment there is
        logins = [f"bulk-{who}-{tag}" for who in ("prof", "scored", "waiting", "absent")]
        for login, role in zip(logins, (Role.instructor, Role.student, Role.student, Role.student), strict=True):
            set_password(get_or_create_user(session, login, role), PASSWORD, SUITE_ARGON2)
        uploads = {logins[1]: [_upload(session, blobs, logins[1], assignment, 80.0),
                               _upload(session, blobs, logins[1], assignment, 50.0)],
                   logins[2]: [_upload(session, blobs, logins[2], assignment, None)]}
        waiting = get_or_create_user(session, logins[2], Role.student)
        session.execute(update(Enrollment).where(Enrollment.user_id == waiting.id,
                                                 Enrollment.course_id == assignment.course_id)
                        .values(full_name="=HYPERLINK(1)"))  # a roster's name a spreadsheet would run
        token = issue_token(session, get_or_create_user(session, logins[0], Role.instructor), "bulk")
        student_token = issue_token(session, get_or_create_user(session, logins[1], Role.student), "bulk")
    own = settings.model_copy(update={"task_queue": f"kg-bulk-{tag}"})
    yield Course(slug, *logins, uploads, token, student_token, own)
    drop_queues(own.task_queue)


def _archive(content: bytes) -> tuple[dict[str, dict[str, str]], zipfile.ZipFile]:
    archive = zipfile.ZipFile(io.BytesIO(content))
    manifest = csv.DictReader(io.StringIO(archive.read("manifest.csv").decode()))
    return {row["login"]: row for row in manifest}, archive


def test_the_counted_uploads_zip_holds_each_students_bytes_and_says_why(course: Course) -> None:
    prof = Browser(course.settings, course.prof)
    assert 'id="bulk-zip-counted"' in prof.client.get("/gradebook", params={"assignment": course.slug}).text
    answer = prof.client.get("/gradebook/submissions.zip", params={"assignment": course.slug, "which": "counted"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    rows, archive = _archive(answer.content)
    assert set(rows) == {course.scored, course.waiting, course.absent}

    (_, _, _), (second, second_run, second_bytes) = course.uploads[course.scored]
    counted = rows[course.scored]
    assert (counted["submission_id"], counted["run_id"], counted["rule"]) == (
        str(second), str(second_run), "counted: the latest scored run")
    assert archive.read(counted["file"]) == second_bytes
    assert counted["sha256"] == hashlib.sha256(second_bytes).hexdigest() and counted["uploaded_at"]

    waiting_sub, _, waiting_bytes = course.uploads[course.waiting][0]
    waiting = rows[course.waiting]
    assert (waiting["submission_id"], waiting["run_id"]) == (str(waiting_sub), "")
    assert waiting["rule"] == "latest upload (no scored run counts)" and waiting["name"] == "'=HYPERLINK(1)"
    assert archive.read(waiting["file"]) == waiting_bytes
    assert rows[course.absent]["rule"] == "no upload" and rows[course.absent]["file"] == ""
    assert sorted(archive.namelist()) == sorted([counted["file"], waiting["file"], "manifest.csv"])


def test_the_best_policy_and_the_latest_choice_pick_other_uploads(course: Course) -> None:
    (first, first_run, first_bytes), (second, _, _) = course.uploads[course.scored]
    prof = Browser(course.settings, course.prof)
    best, archive = _archive(prof.client.get("/gradebook/submissions.zip", params={
        "assignment": course.slug, "which": "counted", "policy": "best"}).content)
    assert (best[course.scored]["submission_id"], best[course.scored]["run_id"]) == (str(first), str(first_run))
    assert archive.read(best[course.scored]["file"]) == first_bytes

    api = prof.client.get(f"/api/v1/assignments/{course.slug}/submissions.zip", params={"which": "latest"},
                          headers=auth(course.token))
    latest, _ = _archive(api.content)
    assert (latest[course.scored]["submission_id"], latest[course.scored]["rule"]) == (str(second), "latest upload")
    refused = prof.client.get(f"/api/v1/assignments/{course.slug}/submissions.zip", headers=auth(course.student_token))
    assert refused.status_code == 403 and "manifest" not in refused.text
    assert prof.client.get("/gradebook/submissions.zip", params={"assignment": course.slug,
                                                                 "which": "everything"}).status_code == 404


def _entries(sessions: sessionmaker[Session], course: Course) -> list[tuple[str, str, float | None, str, str]]:
    with session_scope(sessions) as session:
        rows = session.execute(select(User.username, GradeAdjustment).join(User, User.id == GradeAdjustment.user_id)
                               .join(Assignment).where(Assignment.slug == course.slug).order_by(GradeAdjustment.id))
        return [(login, r.kind, r.points, r.reason, r.by.username) for login, r in rows]


def _send(prof: Browser, course: Course, text: str, **more: str) -> tuple[int, str]:
    page = prof.client.get("/gradebook/import", params={"assignment": course.slug}).text
    answer = prof.client.post("/gradebook/import", data={"csrf_token": prof.csrf(page), "assignment": course.slug,
                                                         "text": text, **more}, follow_redirects=False)
    return answer.status_code, answer.text


def test_a_bad_line_refuses_the_whole_file_then_the_corrected_one_applies(
        course: Course, sessions: sessionmaker[Session]) -> None:
    prof = Browser(course.settings, course.prof)
    bad = (f"login,kind,points,reason\n{course.scored},adjust,5,Problem 2 checked by hand\n"
           f"{course.waiting},manual,70,Graded by hand in the outage\n"
           f"{course.absent},adjust,3,Bonus\nnobody-{course.slug},manual,50,x\n{course.scored},grade,1,y\n")
    code, html = _send(prof, course, bad)
    shown = text_of(html)
    assert code == 400 and "3 lines cannot be applied, so nothing is" in shown
    assert f"Line 4: {course.absent} has no grade in {course.slug} to adjust" in shown
    assert f"Line 5: no student “nobody-{course.slug}” in the course of {course.slug}" in shown
    assert "Line 6: the kind “grade” is neither manual nor adjust" in shown
    assert 'id="import-confirm"' not in html and _entries(sessions, course) == []

    good = "\n".join(bad.splitlines()[:3]) + f"\n{course.scored},adjust,-1.5,Style\n"
    code, html = _send(prof, course, good)
    effects = re.findall(r"<tr>\s*<td data-label=\"Line\">(\d+)</td>.*?Grade before\">([^<]*)</td>\s*"
                         r"<td data-label=\"Grade after\">([^<]*)</td>", html, re.DOTALL)
    assert code == 200 and effects == [("2", "50", "55"), ("3", "none", "70"), ("4", "55", "53.5")]
    assert _entries(sessions, course) == []  # the preview applied nothing
    digest = re.search(r'name="expect" value="([0-9a-f]+)"', html)
    assert digest
    assert _send(prof, course, good, expect="0" * 32)[0] == 409 and _entries(sessions, course) == []

    code, _ = _send(prof, course, good, expect=digest.group(1))
    assert code == 303
    assert _entries(sessions, course) == [
        (course.scored, "adjust", 5.0, "Problem 2 checked by hand", course.prof),
        (course.waiting, "manual", 70.0, "Graded by hand in the outage", course.prof),
        (course.scored, "adjust", -1.5, "Style", course.prof)]
    book = prof.client.get(f"/api/v1/assignments/{course.slug}/gradebook", headers=auth(course.token)).json()
    finals = {r["user"]: r["grade"]["final_score"] if r["grade"] else None for r in book["rows"]}
    assert finals == {course.scored: 53.5, course.waiting: 70, course.absent: None}
    _delete_entries(sessions, course)


def _delete_entries(sessions: sessionmaker[Session], course: Course) -> None:
    with session_scope(sessions) as session:
        for row in session.scalars(select(GradeAdjustment).join(Assignment).where(Assignment.slug == course.slug)):
            session.delete(row)


def test_the_api_previews_refuses_a_bad_line_and_applies(course: Course, sessions: sessionmaker[Session]) -> None:
    prof = Browser(course.settings, course.prof)
    url = f"/api/v1/assignments/{course.slug}/grade-entries"
    good = f"reason,login,points,kind\nChecked by hand,{course.waiting.upper()},88.5,manual\n"
    bad = good + f"Too much,{course.scored},500,adjust\n"

    preview = prof.client.post(url, headers=auth(course.token), json={"csv": bad, "dry_run": True})
    assert preview.status_code == 200
    body = preview.json()
    assert body["applied"] is False
    assert [(line["line"], line["login"], line["before"], line["after"]) for line in body["lines"]] == [
        (2, course.waiting, None, 88.5)]
    assert [e["line"] for e in body["errors"]] == [3] and "at most 100 points" in body["errors"][0]["message"]

    refused = prof.client.post(url, headers=auth(course.token), json={"csv": bad})
    assert refused.status_code == 409
    assert refused.json()["error"]["details"] == [{"line": 3, "message": body["errors"][0]["message"]}]
    assert _entries(sessions, course) == []
    student = prof.client.post(url, headers=auth(course.student_token), json={"csv": good})
    assert student.status_code == 403 and _entries(sessions, course) == []

    applied = prof.client.post(url, headers=auth(course.token), json={"csv": good})
    assert applied.status_code == 200 and applied.json()["applied"] is True
    assert _entries(sessions, course) == [(course.waiting, "manual", 88.5, "Checked by hand", course.prof)]
    _delete_entries(sessions, course)
