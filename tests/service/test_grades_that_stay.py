"""Grades that stay (issue 30) on real PostgreSQL, through the web forms, the API and the CLI:
the staff's entries (adjustments, manual grades) belong to the student's grade in the
assignment, so a later run that comes to count keeps them, under either score policy; they are
shown with who, when and why on the gradebook, the history pages and the run page; extra credit
takes a grade above the total only as far as the assignment's setting allows; a manual grade
needs no run (a student who never uploaded, an exemption) and replaces the run's grade until
it is taken back; the API reads and makes the same entries; a refused entry keeps the form."""
from __future__ import annotations

import csv
import io
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.auth.credentials import issue_token
from grader.cli.main import app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Role, Run, RunState, utcnow
from grader.models import Course as CourseRow
from grader.notify import body, run_notice
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues
from tests.service.test_staff_workflow import post_form, text_of
from tests.service.test_web_confirmations import confirm_form
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class Klass:
    slug: str
    title: str
    prof: str
    settings: Settings
    tag: str

    def student(self, sessions: sessionmaker[Session], name: str) -> str:
        """A new student of the assignment (and every other: the one-course default)."""
        with session_scope(sessions) as session:
            user = get_or_create_user(session, f"{name}-{self.tag}-{uuid.uuid4().hex[:4]}", Role.student)
            set_password(user, PASSWORD, SUITE_ARGON2)
            return user.username


@pytest.fixture(scope="module")
def klass(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Klass]:
    tag = uuid.uuid4().hex[:6]
    slug, title = f"stay-{tag}", f"Stay {tag}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=slug, title=title, total_points=100, course=CourseRow(slug=slug, title=title)))
        session.flush()
        prof = get_or_create_user(session, f"stayprof-{tag}", Role.instructor)
        set_password(prof, PASSWORD, SUITE_ARGON2)
    own = settings.model_copy(update={"task_queue": f"kg-stay-{tag}"})
    yield Klass(slug, title, prof.username, own, tag)
    drop_queues(own.task_queue)


def scored_run(sessions: sessionmaker[Session], klass: Klass, login: str, score: float) -> int:
    """A new scored upload of `login` (as the worker records one): its run id."""
    with session_scope(sessions) as session:
        student = get_or_create_user(session, login, Role.student)
        assignment = session.scalars(select(Assignment).where(Assignment.slug == klass.slug)).one()
        _, run = record_submission(session, student, assignment, "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
        run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
        return run.id


def total(prof: Browser, klass: Klass, login: str, policy: str = "") -> str:
    """The student's grade in the Canvas CSV (blank: none), which the gradebook's total is."""
    table = list(csv.reader(io.StringIO(prof.client.get("/gradebook.csv", params={
        "assignment": klass.slug, **({"policy": policy} if policy else {})}).text)))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", klass.title]
    return next(row[5] for row in table[2:] if row[3] == login)


def entry(prof: Browser, klass: Klass, login: str, kind: str, points: str, reason: str) -> int:
    history = f"/assignments/{klass.slug}/students/{login}"
    return post_form(prof, history, f"{history}/grade", kind=kind, points=points, reason=reason)


def book_row(prof: Browser, klass: Klass, login: str) -> str:
    page = prof.client.get("/gradebook", params={"assignment": klass.slug}).text
    found = re.search(rf'<th scope="row">{re.escape(login)}</th>(.*?)</tr>', page, re.DOTALL)
    assert found, login
    return found.group(1)


def test_an_adjustment_stays_when_a_later_run_counts(klass: Klass, sessions: sessionmaker[Session]) -> None:
    login = klass.student(sessions, "later")
    prof, student = Browser(klass.settings, klass.prof), Browser(klass.settings, login)
    first = scored_run(sessions, klass, login, 60)
    assert post_form(prof, f"/runs/{first}", f"/runs/{first}/adjustments", points="5",
                     reason="The timeout was ours") == 303
    assert total(prof, klass, login) == "65"
    later = scored_run(sessions, klass, login, 72)
    assert total(prof, klass, login) == "77"  # the newest run counts, with the student's +5

    run_page = student.client.get(f"/runs/{later}").text
    assert 'id="run-score">77</strong> / 100' in run_page
    text = text_of(run_page)
    assert f"+5 points by {klass.prof}" in text and f"(run {first} counted then): The timeout was ours" in text
    assert "Adjusted by staff: +5 (The timeout was ours), so 77 of 100 points." in text
    old_page = text_of(student.client.get(f"/runs/{first}").text)
    assert f"The gradebook counts run {later} , not this one." in old_page and "The grade in" in old_page
    assert "+5 points by" in old_page  # the entries are listed on every run page of the student
    assert f"{klass.slug}: the gradebook counts your" in text_of(student.client.get("/submissions").text)
    assert "77 / 100" in text_of(student.client.get("/submissions").text)
    row = book_row(prof, klass, login)
    assert 'class="final-grade">77</span>' in row and "The timeout was ours" in row and klass.prof in row
    history = text_of(prof.client.get(f"/assignments/{klass.slug}/students/{login}").text)
    assert "grade in" in history and "77 / 100" in history and f"+5 points by {klass.prof}" in history
    detailed = prof.client.get("/gradebook-detailed.csv", params={"assignment": klass.slug}).text
    line = next(r for r in csv.DictReader(io.StringIO(detailed)) if r["SIS Login ID"] == login)
    assert (line[f"{klass.title} final (100)"], line["Adjustment reasons"]) == ("77", "The timeout was ours (+5)")


def test_best_counts_the_best_run_with_the_students_entries(klass: Klass, sessions: sessionmaker[Session]) -> None:
    login = klass.student(sessions, "best")
    prof = Browser(klass.settings, klass.prof)
    low = scored_run(sessions, klass, login, 50)
    assert post_form(prof, f"/runs/{low}", f"/runs/{low}/adjustments", points="-3", reason="Copied a helper") == 303
    scored_run(sessions, klass, login, 80)
    scored_run(sessions, klass, login, 70)
    assert total(prof, klass, login, "best") == "77" and total(prof, klass, login, "latest") == "67"


def test_extra_credit_goes_above_the_total_as_far_as_the_setting_allows(
        klass: Klass, sessions: sessionmaker[Session], settings_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    login = klass.student(sessions, "extra")
    prof = Browser(klass.settings, klass.prof)
    run_id = scored_run(sessions, klass, login, 95)
    assert entry(prof, klass, login, "adjust", "10", "Found a bug in the starter") == 303
    assert total(prof, klass, login) == "100"  # no extra credit yet: the grade stops at the total
    settings_page = f"/assignments/{klass.slug}/settings"
    form = {"release": "", "due": "", "grace": "", "late_window": "", "penalty_per_day": "", "score_policy": "latest"}
    assert post_form(prof, settings_page, settings_page, **form, extra_credit="minus") == 400
    # It changes the student's grade: its preview lists them (100 -> 103), then its confirmation saves it.
    preview = prof.client.post(settings_page, data={"csrf_token": prof.page_csrf(settings_page), **form,
                                                    "extra_credit": "3"})
    assert preview.status_code == 200 and f"<td data-label=\"Student\">{login}</td>" in preview.text
    action, fields = confirm_form(preview.text)
    assert prof.client.post(action, data=fields, follow_redirects=False).status_code == 303
    assert 'value="3"' in prof.client.get(settings_page).text
    assert total(prof, klass, login) == "103"
    assert 'id="run-score">103</strong> / 100' in prof.client.get(f"/runs/{run_id}").text
    assert entry(prof, klass, login, "adjust", "104", "Too much") == 400  # at most the total and its extra credit
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        asked = CliRunner().invoke(app, ["schedule", klass.slug, "--extra-credit", "10"])
        assert asked.exit_code == 1 and f"{login}: 103 -> 105" in asked.output, asked.output
        done = CliRunner().invoke(app, ["schedule", klass.slug, "--extra-credit", "10", "--yes"])
        assert done.exit_code == 0 and "extra credit up to 10 points" in done.output, done.output
        bad = CliRunner().invoke(app, ["schedule", klass.slug, "--extra-credit", "-1"])
        assert bad.exit_code == 2 and "0 or more" in bad.output
    finally:
        get_settings.cache_clear()
    assert total(prof, klass, login) == "105"


def test_a_manual_grade_needs_no_run_and_replaces_one_until_taken_back(
        klass: Klass, sessions: sessionmaker[Session]) -> None:
    never, replaced = klass.student(sessions, "never"), klass.student(sessions, "manual")
    prof, student = Browser(klass.settings, klass.prof), Browser(klass.settings, never)
    assert total(prof, klass, never) == ""
    assert entry(prof, klass, never, "adjust", "5", "Nothing to adjust") == 400  # no grade to adjust
    assert entry(prof, klass, never, "manual", "80", "Exempt: the zip could not be graded") == 303
    assert total(prof, klass, never) == "80"
    row = book_row(prof, klass, never)
    assert "no scored run" in row and 'class="final-grade">80</span>' in row and "manual grade by" in row
    mine = text_of(student.client.get("/submissions").text)
    assert "No submissions yet" in mine and "None of your runs is scored; your grade is 80 / 100" in mine
    assert "manual grade 80 by" in mine and "Exempt: the zip could not be graded" in mine

    run_id = scored_run(sessions, klass, replaced, 60)
    assert entry(prof, klass, replaced, "manual", "90", "Graded by hand") == 303
    assert total(prof, klass, replaced) == "90"
    scored_run(sessions, klass, replaced, 70)
    assert total(prof, klass, replaced) == "90"  # the manual grade stays over a later run
    assert f"manual grade 90 by {klass.prof}" in text_of(prof.client.get(f"/runs/{run_id}").text)
    assert entry(prof, klass, replaced, "take_back", "", "A run graded after all") == 303
    assert total(prof, klass, replaced) == "70"
    assert entry(prof, klass, replaced, "take_back", "", "Again") == 400  # none left to take back


def test_the_api_reads_and_makes_entries(klass: Klass, sessions: sessionmaker[Session]) -> None:
    login, other = klass.student(sessions, "api"), klass.student(sessions, "apiother")
    prof = Browser(klass.settings, klass.prof)
    run_id = scored_run(sessions, klass, login, 40)
    with session_scope(sessions) as session:
        staff_token = issue_token(session, get_or_create_user(session, klass.prof, Role.instructor), "stay")
        own_token = issue_token(session, get_or_create_user(session, login, Role.student), "stay")
        other_token = issue_token(session, get_or_create_user(session, other, Role.student), "stay")
    path = f"/api/v1/assignments/{klass.slug}/students/{login}/grade"
    made = prof.client.post(path, headers=auth(staff_token), json={"kind": "adjust", "points": 2.5, "reason": "Bonus"})
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["run_id"], body["grade"]["final_score"], body["grade"]["adjustment"]) == (run_id, 42.5, 2.5)
    assert [(a["kind"], a["points"], a["by"], a["run_id"]) for a in body["grade"]["adjustments"]] == [
        ("adjust", 2.5, klass.prof, run_id)]
    assert prof.client.post(path, headers=auth(staff_token),
                            json={"kind": "manual", "points": 500, "reason": "Too much"}).status_code == 409
    assert prof.client.post(path, headers=auth(own_token),
                            json={"kind": "manual", "points": 100, "reason": "Mine"}).status_code == 403
    assert prof.client.get(path, headers=auth(own_token)).json()["grade"]["final_score"] == 42.5
    assert prof.client.get(path, headers=auth(other_token)).status_code == 404
    manual = prof.client.post(path, headers=auth(staff_token), json={"kind": "manual", "points": 88, "reason": "Oral"})
    grade = manual.json()["grade"]
    assert (grade["manual_grade"], grade["final_score"], grade["raw_score"]) == (88, 90.5, 40)
    run = prof.client.get(f"/api/v1/runs/{run_id}", headers=auth(own_token)).json()
    assert run["grade"]["final_score"] == 90.5  # the run that counts carries the student's grade
    book = prof.client.get(f"/api/v1/assignments/{klass.slug}/gradebook", headers=auth(staff_token)).json()
    assert next(r for r in book["rows"] if r["user"] == login)["total"] == 90.5


def test_a_refused_entry_comes_back_with_why_and_what_was_typed(klass: Klass, sessions: sessionmaker[Session]) -> None:
    login = klass.student(sessions, "refused")
    prof = Browser(klass.settings, klass.prof)
    scored_run(sessions, klass, login, 50)
    history = f"/assignments/{klass.slug}/students/{login}"
    sent = prof.client.post(f"{history}/grade", data={"csrf_token": prof.page_csrf(history), "kind": "adjust",
                                                      "points": "abc", "reason": "Kept words"})
    assert sent.status_code == 400
    assert "are not a number" in text_of(sent.text) and 'value="Kept words"' in sent.text
    assert 'value="abc"' in sent.text


def test_a_run_notice_gives_the_students_grade_with_the_entries(klass: Klass, sessions: sessionmaker[Session]) -> None:
    login = klass.student(sessions, "notice")
    prof = Browser(klass.settings, klass.prof)
    first = scored_run(sessions, klass, login, 60)
    assert post_form(prof, f"/runs/{first}", f"/runs/{first}/adjustments", points="5", reason="Ours") == 303
    later = scored_run(sessions, klass, login, 70)
    with session_scope(sessions) as session:
        get_or_create_user(session, login, Role.student).email = f"{login}@example.edu"
    with session_scope(sessions) as session:
        run = session.get_one(Run, later)
        text = body(run_notice(session, run, klass.settings))  # type: ignore[arg-type]
    assert "Grade: 70 / 100" in text  # the run's own
    assert f"Your grade in {klass.slug}: 75 / 100. No due date. Adjusted by staff: +5 (Ours), so 75 of 100" in text
