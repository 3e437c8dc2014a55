"""The instructor's gradebook page on PostgreSQL: search, filters, sort, pages, the score
histogram and speedup distributions (over every page), re-grading selected / newest / all from the page, and the rule
that an infrastructure failure never replaces a grade (real executor, an unreachable blob)."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Assignment, Course, ErrorClass, ProblemResult, Role, Run, RunState, Submission, User, utcnow
from grader.passwords import set_password
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.service import record_regrade
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_confirmations import confirm_form
from tests.service.test_web_settings import PASSWORD, Browser

ROW_HEADER = re.compile(r'<th scope="row">([^<]+)</th>')


@dataclass
class Class:
    tag: str
    slug: str
    subs: dict[str, int]  # login -> its (first) submission id

    def login(self, short: str) -> str:
        return f"{self.tag}-{short}"


def _scored(session: Session, user: User, assignment: Assignment, score: float, speedup: float) -> Submission:
    sub = Submission(user=user, assignment=assignment, original_filename="hw.zip", size_bytes=10,
                     sha256=uuid.uuid4().hex * 2)
    run = Run(submission=sub, state=RunState.scored, score=score, started_at=utcnow(), finished_at=utcnow())
    run.results = [ProblemResult(problem_id="1.1", title="Softmax forward", status="passed", points=score / 5,
                                 max_points=20, details={"score": {"speedup": {"speedup": speedup, "low": speedup,
                                                                               "high": speedup, "trials": 9}}})]
    session.add_all([sub, run])
    session.flush()
    return sub


@pytest.fixture(scope="module")
def klass(sessions: sessionmaker[Session]) -> Class:
    tag = f"gb{uuid.uuid4().hex[:6]}"
    subs: dict[str, int] = {}
    with session_scope(sessions) as session:
        assignment = Assignment(slug=f"gb-{tag}", title="Gradebook test", course=Course(slug=f"gb-{tag}", title="Gradebook test"), total_points=100)
        session.add(assignment)
        people = {"ann": ("Ann Lee", "A"), "bob": ("Bob Stone", "B"), "cyd": ("Cyd Park", "A"), "dan": (None, None)}
        users = {}
        for short, (name, section) in people.items():
            user = get_or_create_user(session, f"{tag}-{short}", Role.student)
            session.flush()
            entry = entry_of(session, user.id, assignment.course_id)
            assert entry is not None
            entry.full_name, entry.section = name, section
            users[short] = user
        set_password(get_or_create_user(session, f"{tag}-prof", Role.instructor), PASSWORD, SUITE_ARGON2)
        set_password(users["ann"], PASSWORD, SUITE_ARGON2)
        subs["ann"] = _scored(session, users["ann"], assignment, 80, 7.0).id
        subs["bob"] = _scored(session, users["bob"], assignment, 35, 2.0).id
        failed = Submission(user=users["cyd"], assignment=assignment, original_filename="x.zip", size_bytes=1,
                            sha256="0" * 64)
        session.add_all([failed, Run(submission=failed, state=RunState.failed, error_class=ErrorClass.build_error,
                                     finished_at=utcnow())])
        session.flush()
        subs["cyd"] = failed.id
        return Class(tag, assignment.slug, subs)


@pytest.fixture(scope="module")
def prof(settings: Settings, klass: Class) -> Browser:
    return Browser(settings, klass.login("prof"))


def _view(prof: Browser, klass: Class, **params: Any) -> tuple[list[str], str]:
    response = prof.client.get("/gradebook", params={"assignment": klass.slug, "q": klass.tag, **params})
    assert response.status_code == 200, response.text
    return [name.removeprefix(f"{klass.tag}-") for name in ROW_HEADER.findall(response.text)], response.text


def test_search_and_filters(prof: Browser, klass: Class) -> None:
    assert _view(prof, klass)[0] == ["ann", "bob", "cyd", "dan"]
    assert _view(prof, klass, q="STONE")[0] == ["bob"]  # by name, any case
    assert _view(prof, klass, state="failed")[0] == ["cyd"]
    assert _view(prof, klass, state="none")[0] == ["dan"]
    assert _view(prof, klass, state="scored")[0] == ["ann", "bob"]
    assert _view(prof, klass, min_score="50")[0] == ["ann"]
    assert _view(prof, klass, max_score="50")[0] == ["bob"]  # no score: not "at most 50"
    assert _view(prof, klass, section="A")[0] == ["ann", "cyd"]
    rows, html = _view(prof, klass, min_score="lots")
    assert rows == ["ann", "bob", "cyd", "dan"] and "Minimum score “lots” is not a number" in html
    # "matching the filters" only when other tests' students are in the database as well
    assert re.search(r"Students 1–4 of 4(\s+matching the filters\s+\(\d+ in all\))?\.", html)
    _rows, section_a = _view(prof, klass, section="A")
    assert re.search(r"Students 1–2 of 2\s+matching the filters\s+\(\d+ in all\)\.", section_a)
    assert 'class="pages"' not in html  # one page: no page links


def test_sort_by_columns(prof: Browser, klass: Class) -> None:
    rows, html = _view(prof, klass, sort="score", dir="desc")
    assert rows == ["ann", "bob", "cyd", "dan"]  # no score: last in either direction
    assert re.search(r'<th scope="col" aria-sort="descending">\s*<a href="[^"]*sort=score&amp;dir=asc', html)
    assert _view(prof, klass, sort="score", dir="asc")[0] == ["bob", "ann", "cyd", "dan"]
    assert _view(prof, klass, sort="p:1.1", dir="asc")[0][:2] == ["bob", "ann"]
    assert _view(prof, klass, sort="name", dir="desc")[0] == ["cyd", "bob", "ann", "dan"]
    rows, html = _view(prof, klass, sort="password")
    assert rows == ["ann", "bob", "cyd", "dan"] and "Cannot sort by “password”" in html


def test_charts_describe_the_rows_shown(prof: Browser, klass: Class) -> None:
    _rows, html = _view(prof, klass)
    assert "Total scores of the students the filters select: histogram of 2 values in 10 bins." in html
    assert "30 to 40: 1" in html and "80 to 90: 1" in html
    assert "1.1: 2 runs, min 2x, median 4.5x, max 7x" in html
    _rows, html = _view(prof, klass, section="B")
    assert "histogram of 1 values" in html and "1.1: 1 runs, min 2x, median 2x, max 2x" in html


@pytest.fixture(scope="module")
def paged(settings: Settings, klass: Class) -> Browser:
    """The instructor on an app that shows two students per page."""
    return Browser(settings.model_copy(update={"gradebook_page_size": 2}), klass.login("prof"))


def test_pages_compose_with_search_and_sort(paged: Browser, klass: Class) -> None:
    rows, html = _view(paged, klass, sort="score", dir="desc")
    assert rows == ["ann", "bob"]
    assert re.search(r"Students 1–2 of 4(\s+matching the filters\s+\(\d+ in all\))?; page 1 of 2\.", html)
    hrefs = re.findall(r'<a href="([^"]+)" rel="next">Next</a>', html)
    assert len(hrefs) == 2  # above and below the table
    following = hrefs[0].replace("&amp;", "&")
    assert f"q={klass.tag}" in following and "sort=score" in following and "dir=desc" in following
    assert following.endswith("page=2")
    second = paged.client.get(following).text
    assert [n.removeprefix(f"{klass.tag}-") for n in ROW_HEADER.findall(second)] == ["cyd", "dan"]
    assert "Students 3–4 of 4" in second and 'aria-current="page">2</a>' in second
    # The charts still cover all four students (ann and bob scored, both on page 1).
    assert "histogram of 2 values" in second and "1.1: 2 runs, min 2x, median 4.5x, max 7x" in second
    # Sorting or filtering from page 2 starts again at page 1; the re-grade form comes back here.
    assert not re.search(r'href="[^"]*sort=name[^"]*page=2', second)
    form = re.search(r'<form method="get" action="/gradebook/regrade" id="regrade-form".*?</form>', second, re.S)
    assert form and dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(0))) == {
        "assignment": klass.slug, "policy": "latest", "q": klass.tag, "sort": "score", "dir": "desc", "page": "2"}


def test_page_past_the_end_or_not_a_number(paged: Browser, klass: Class) -> None:
    rows, html = _view(paged, klass, page="9")
    assert rows == ["cyd", "dan"] and "page 2 of 2" in html
    rows, html = _view(paged, klass, page="two")
    assert rows == ["ann", "bob"] and "“two” is not a page number; showing page 1." in html


def test_exports_ignore_the_page_size(paged: Browser, klass: Class) -> None:
    body = paged.client.get("/gradebook.json", params={"assignment": klass.slug, "page": "2"}).json()
    assert {klass.login(s) for s in ("ann", "bob", "cyd", "dan")} <= {r["user"] for r in body["rows"]}
    csv_text = paged.client.get("/gradebook.csv", params={"assignment": klass.slug}).text
    assert all(klass.login(s) in csv_text for s in ("ann", "bob", "cyd", "dan"))


def _runs(sessions: sessionmaker[Session], sub_ids: list[int]) -> list[Run]:
    with session_scope(sessions) as session:
        rows = list(session.scalars(select(Run).where(Run.submission_id.in_(sub_ids)).order_by(Run.id)))
        session.expunge_all()
        return rows


def _regrade(browser: Browser, klass: Class, which: str, subs: list[int] = ()) -> Any:  # type: ignore[assignment]
    """The bulk form's POST, then its confirmation's (when it lands there)."""
    data: dict[str, Any] = {"csrf_token": browser.page_csrf("/"), "assignment": klass.slug, "which": which,
                            "q": klass.tag}
    if subs:
        data["submission"] = [str(s) for s in subs]
    asked = browser.client.post("/gradebook/regrade", data=data, follow_redirects=False)
    if asked.status_code != 303:
        return asked
    action, fields = confirm_form(browser.client.get(asked.headers["location"]).text)
    return browser.client.post(action, data=fields, follow_redirects=False)


def test_regrade_selected_latest_and_all(prof: Browser, settings: Settings, sessions: sessionmaker[Session],
                                         klass: Class) -> None:
    subs = list(klass.subs.values())
    before = len(_runs(sessions, subs))
    picked = _regrade(prof, klass, "selected", [klass.subs["bob"], klass.subs["ann"]])
    assert picked.status_code == 303 and picked.headers["location"].endswith("&queued=2")
    notice = prof.client.get(picked.headers["location"]).text
    assert 'id="regrade-notice">2 re-grade runs queued.' in notice
    new = _runs(sessions, subs)[before:]
    assert [r.submission_id for r in new] == [klass.subs["ann"], klass.subs["bob"]]  # round-robin by student
    assert all(r.reason == "regrade" for r in new)  # (a running test worker may have taken them already)
    assert _regrade(prof, klass, "latest").headers["location"].endswith("&queued=3")
    assert _regrade(prof, klass, "all").headers["location"].endswith("&queued=3")
    assert len(_runs(sessions, subs)) == before + 8
    # Nothing ticked, a submission of another assignment, a student, no CSRF token: nothing made.
    assert _regrade(prof, klass, "selected").status_code == 400
    with session_scope(sessions) as session:
        elsewhere = session.scalar(select(func.min(Submission.id)).where(Submission.assignment.has(
            Assignment.slug != klass.slug)))
    if elsewhere is not None:
        assert _regrade(prof, klass, "selected", [klass.subs["ann"], elsewhere]).status_code == 404
    student = Browser(settings, klass.login("ann"))
    assert _regrade(student, klass, "all").status_code == 403
    forged = prof.client.post("/gradebook/regrade", data={"assignment": klass.slug, "which": "all"})
    assert forged.status_code == 403
    assert len(_runs(sessions, subs)) == before + 8


def _fail_as_infrastructure(settings: Settings, sessions: sessionmaker[Session], run_id: int) -> Run:
    """Grade `run_id` with a worker whose blob store does not have the upload (shared storage
    gone): the executor retries, then ends the run `infra_error` after max_attempts."""
    empty = BlobStore(settings.data_dir / f"empty-blobs-{uuid.uuid4().hex[:6]}")
    executor = RunExecutor(settings, sessions, empty)
    for _ in range(settings.max_attempts):
        if executor.execute(run_id) is Disposition.done:
            break
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
    assert run.state == RunState.failed and run.error_class == ErrorClass.infra_error, run.message
    # The student reads the kind of fault, never its text (it may name worker paths).
    assert "FileNotFoundError" in (run.message or "") and "blob store" not in (run.message or ""), run.message
    return run


def _graded(prof: Browser, login: str, policy: str = "latest") -> dict[str, Any]:
    body = prof.client.get("/gradebook.json", params={"assignment": "hw4", "policy": policy}).json()
    return next(r for r in body["rows"] if r["user"] == login)


def test_infrastructure_failure_never_replaces_a_grade(prof: Browser, settings: Settings,
                                                       sessions: sessionmaker[Session], klass: Class) -> None:
    # On hw4: the infrastructure failure lists the rubric's problems as not graded.
    eve = klass.login("eve")
    with session_scope(sessions) as session:
        user = get_or_create_user(session, eve, Role.student)
        hw4 = session.scalar(select(Assignment).where(Assignment.slug == "hw4"))
        assert hw4 is not None
        sub = _scored(session, user, hw4, 80, 7.0)
        first_run = sub.runs[0].id
        run_id = record_regrade(session, sub).id
    _fail_as_infrastructure(settings, sessions, run_id)
    after = _graded(prof, eve)
    assert (after["total"], after["run_id"]) == (80, first_run)
    assert _graded(prof, eve, "best")["run_id"] == first_run
    html = prof.client.get("/gradebook", params={"q": eve}).text
    assert f'href="/runs/{run_id}"><span class="state state-failed">failed</span>, run {run_id}</a>' in html
    assert f"Run {first_run}" in html

    # A newer upload scored lower: latest takes it, best keeps 80; its failed re-grade changes neither.
    with session_scope(sessions) as session:
        user = get_or_create_user(session, eve, Role.student)
        hw4 = session.scalar(select(Assignment).where(Assignment.slug == "hw4"))
        assert hw4 is not None
        newer = _scored(session, user, hw4, 60, 3.0)
        newer_run = newer.runs[0].id
        regrade_id = record_regrade(session, newer).id
    _fail_as_infrastructure(settings, sessions, regrade_id)
    assert (_graded(prof, eve)["total"], _graded(prof, eve)["run_id"]) == (60, newer_run)
    assert _graded(prof, eve, "best")["run_id"] == first_run
    csv_text = prof.client.get("/gradebook-detailed.csv", params={"assignment": "hw4"}).text
    assert f"{eve},{eve},60," in csv_text
