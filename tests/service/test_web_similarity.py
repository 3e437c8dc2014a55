"""The similarity pages on PostgreSQL, in a database of their own (other tests upload identical
copies of our reference kit, which are rightly the most similar pairs there), computed by a real
Celery worker of their own (Redis broker, its own similarity queue): a seeded class of 30
generated hw4 submissions with one disguised copy, uploaded as zips. The instructor sets the
base on the settings page (a git ref of a repository holding the students' starter), starts
the computation, which answers at once and runs in the background (its state and files
fingerprinted in the database, followed through the JSON status); the report names its base,
the planted pair ranks first, and its side-by-side view highlights the shared regions on both
sides. A computation that fails ends `failed` with the reason and keeps the previous report;
one that succeeds replaces it. Students get neither page nor computation."""
from __future__ import annotations

import hashlib
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import AuditEvent, Role, SimilarityJob, Submission
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from grader.similarity.store import load_report, report_path
from grader.storage.blobstore import BlobStore
from tests.fixtures.https_git import GitServer, https_git_server, publish
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.similarity_class import generate_class
from tests.fixtures.zips import student_zip
from tests.service.conftest import PG_ADMIN_URL, WorkerProcess, init_with_course
from tests.service.test_web_settings import PASSWORD, Browser
from worker.rubric import load_rubric
from worker.starter_kit import render_starter

PLANTED = ("s07", "s23")


@pytest.fixture(scope="module")
def own_settings(settings: Settings, settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
                 starter_served: tuple[GitServer, str]) -> Iterator[Settings]:
    """Settings of a database, data folder and similarity queue of this module's own, and a real
    worker process consuming that queue with them; both may fetch the starter's repository."""
    name = f"kg_test_sim_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    data_dir = tmp_path_factory.mktemp("simdata")
    queue = f"{settings.similarity_queue}-{name}"
    fetching = starter_served[0].variables()
    own = Settings.from_variables({**settings_env, **fetching}).model_copy(update={
        "database_url": f"{base}/{name}", "data_dir": data_dir, "similarity_queue": queue})
    init_with_course(own)
    worker = WorkerProcess({**settings_env, **fetching, "KG_DATABASE_URL": own.database_url,
                            "KG_DATA_DIR": str(data_dir), "KG_TASK_QUEUE": f"{queue}-runs",
                            "KG_SIMILARITY_QUEUE": queue},
                           tmp_path_factory.mktemp("simworker") / "worker.log")
    worker.start()
    yield own
    worker.stop()
    make_engine(own).dispose()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def sessions_own(own_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> sessionmaker[Session]:
    rubric = load_rubric("hw4")
    work = tmp_path_factory.mktemp("simclass")
    students = generate_class(rubric, work / "gen", size=30, seed=20260319, planted=(7, 23))
    render_starter(rubric.starter_dir, work / "starter")
    blobs = BlobStore(own_settings.blob_dir)
    sessions = make_session_factory(make_engine(own_settings))
    with session_scope(sessions) as session:
        assignment = get_assignment(session, "hw4")
        set_password(get_or_create_user(session, "sim-prof", Role.instructor), PASSWORD, SUITE_ARGON2)
        for name, student in students.items():
            user = get_or_create_user(session, name, Role.student)
            set_password(user, PASSWORD, SUITE_ARGON2)
            blob = blobs.put_bytes(student_zip(work / "starter", student.files, work / name))
            session.add(Submission(user=user, assignment=assignment, original_filename="hw4.zip",
                                   size_bytes=blob.size, sha256=blob.sha256))
    return sessions


def test_students_get_no_similarity_page_and_cannot_compute(own_settings: Settings,
                                                            sessions_own: sessionmaker[Session]) -> None:
    student = Browser(own_settings, "s07")  # a student of hw4's course: a 403 page saying who may
    assert student.client.get("/assignments/hw4/similarity").status_code == 403
    token = student.page_csrf("/")
    assert student.client.post("/assignments/hw4/similarity", data={"csrf_token": token}).status_code == 403
    assert student.client.get("/assignments/hw4/similarity/pair", params={"a": "s07", "b": "s23"}).status_code == 403
    assert student.client.get("/assignments/hw4/similarity.json").status_code == 403
    assert student.client.get("/assignments/hw4/similarity/job.json").status_code == 403
    assert student.client.post("/assignments/hw4/similarity/base", data={"csrf_token": token, "git": "git:x@y"}
                               ).status_code == 403
    anonymous = TestClient(create_app(own_settings)).get("/assignments/hw4/similarity", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login?next=%2Fassignments%2Fhw4%2Fsimilarity"
    prof = Browser(own_settings, "sim-prof")
    assert prof.client.post("/assignments/hw4/similarity", data={}).status_code == 403  # no CSRF token
    assert load_report(report_path(own_settings.data_dir, "hw4")) is None
    with session_scope(sessions_own) as session:
        assert session.query(SimilarityJob).count() == 0 and get_assignment(session, "hw4").similarity_base is None


@pytest.fixture(scope="module")
def starter_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GitServer, str]]:
    """A repository holding the student starter the class was generated from (as a course's
    starter repository would), served over HTTPS (tests/fixtures/https_git.py), and its
    `git:<url>@<commit>`."""
    work = tmp_path_factory.mktemp("starter-repo")
    repo = work / "llmsys_hw4"
    render_starter(load_rubric("hw4").starter_dir, repo)
    git = ["git", "-C", str(repo), "-c", "user.name=Staff", "-c", "user.email=staff@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "starter"], check=True)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True)
    (work / "srv").mkdir()
    publish(repo, work / "srv", "llmsys_hw4.git")
    with https_git_server(work / "srv", work) as server:
        yield server, f"git:{server.url('llmsys_hw4.git')}@{commit.stdout.strip()}"


@pytest.fixture(scope="module")
def starter_repo(starter_served: tuple[GitServer, str]) -> str:
    return starter_served[1]


def _set_git_base(prof: Browser, spec: str) -> str:
    page = prof.client.get("/assignments/hw4/settings").text
    return prof.client.post("/assignments/hw4/similarity/base", data={"csrf_token": prof.csrf(page), "git": spec}).text


def _compute(prof: Browser) -> dict[str, Any]:
    """Starts a computation: the job's status right after the request answered."""
    page = prof.client.get("/assignments/hw4/similarity").text
    response = prof.client.post("/assignments/hw4/similarity", data={"csrf_token": prof.csrf(page)},
                                follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/assignments/hw4/similarity"
    return prof.client.get("/assignments/hw4/similarity/job.json").json()


def _wait_final(prof: Browser, timeout: float = 240) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The job's final status, and every distinct status seen on the way."""
    deadline, seen = time.monotonic() + timeout, []
    while True:
        status = prof.client.get("/assignments/hw4/similarity/job.json").json()
        if not seen or seen[-1] != status:
            seen.append(status)
        if status["final"]:
            return status, seen
        assert time.monotonic() < deadline, f"the similarity job is not final after {timeout} s: {status}"
        time.sleep(0.2)


def test_planted_copy_ranks_first_and_shows_side_by_side(own_settings: Settings, sessions_own: sessionmaker[Session],
                                                         starter_repo: str) -> None:
    prof = Browser(own_settings, "sim-prof")
    before = prof.client.get("/assignments/hw4/similarity").text
    assert 'id="no-report"' in before and 'id="job"' not in before
    assert prof.client.get("/assignments/hw4/similarity.json").status_code == 404  # nothing computed yet
    assert prof.client.get("/assignments/hw4/similarity/job.json").json() == {"state": None, "final": True}
    assert f"The base is {starter_repo}" in _set_git_base(prof, starter_repo)
    assert f"Base (the starter the students received): {starter_repo}." in prof.client.get(
        "/assignments/hw4/similarity").text

    first = _compute(prof)
    assert first["state"] in ("queued", "running") and not first["final"]  # the request did not wait for it
    following = prof.client.get("/assignments/hw4/similarity").text
    assert 'id="job"' in following and 'data-final="false"' in following and "/static/similarity.js" in following
    final, seen = _wait_final(prof)
    assert final["state"] == "done" and final["error"] is None, final["error"]
    # the base named exactly: the commit its ref resolved to, its files and their digest
    assert re.fullmatch(rf"{re.escape(starter_repo)} \(commit [0-9a-f]{{40}}; \d+ files, digest [0-9a-f]{{16}}\)",
                        final["base"]), final["base"]
    assert final["files_total"] > 30 and final["files_done"] == final["files_total"]
    assert seen[-1]["state"] == "done" and len(seen) >= 2  # progress was seen on the way
    with session_scope(sessions_own) as session:
        job = session.get(SimilarityJob, final["id"])
        assert job is not None and job.started_at and job.finished_at and job.started_at <= job.finished_at

    page = prof.client.get("/assignments/hw4/similarity").text
    assert "over 30" in page and "(435 pairs)" in page and "page 1 of 5" in page
    assert f'<span id="report-base">{final["base"]}</span>' in page
    assert 'href="/assignments/hw4/similarity?page=5"' in page  # every pair is on some page
    rows = re.findall(r'<th scope="row">(\S+) and (\S+)</th>\s*<td>(\d+)%</td>', page)
    assert rows[0][:2] == PLANTED, rows[:3]
    assert int(rows[0][2]) > 90 and int(rows[0][2]) >= int(rows[1][2])
    link = f'/assignments/hw4/similarity/pair?a={PLANTED[0]}&amp;b={PLANTED[1]}'
    assert link in page
    assert 'href="/assignments/hw4/similarity.json"' in page
    download = prof.client.get("/assignments/hw4/similarity.json")
    assert download.status_code == 200 and "attachment" in download.headers["content-disposition"]
    stored = download.json()
    assert len(stored["pairs"]) == 435 and {stored["pairs"][0]["a"], stored["pairs"][0]["b"]} == set(PLANTED)
    assert len(stored["submissions"]) == 30

    pair = prof.client.get(link.replace("&amp;", "&"))
    assert pair.status_code == 200
    report = load_report(report_path(own_settings.data_dir, "hw4"))
    assert report is not None
    top = report.pairs[0]
    sections = re.findall(r'<section class="match".*?</section>', pair.text, re.S)
    assert len(sections) == len(top.matches) > 0
    for section, match in zip(sections, top.matches):
        assert f"<code>{match.label}</code>" in section
        for side, ranges in (("a", match.lines_a), ("b", match.lines_b)):
            pre = re.search(rf'<pre [^>]*data-side="{side}">(.*?)</pre>', section, re.S).group(1)
            highlighted = [int(n) for n in re.findall(r'<span class="l hit"><span class="n">(\d+)</span>', pre)]
            assert set(highlighted) <= {n for lo, hi in ranges for n in range(lo, hi + 1)}  # not blank or starter lines
            assert highlighted and len(highlighted) < pre.count('class="l')  # the starter's lines are not marked
    # The side-by-side view reads the zips compared, even after a student uploads again.
    with session_scope(sessions_own) as session:
        user = get_or_create_user(session, PLANTED[0], Role.student)
        blob = BlobStore(own_settings.blob_dir).put_bytes(b"not a zip any more")
        session.add(Submission(user=user, assignment=get_assignment(session, "hw4"), original_filename="x.zip",
                               size_bytes=blob.size, sha256=blob.sha256))
    assert prof.client.get(link.replace("&amp;", "&")).text.count('class="l hit"') == pair.text.count('class="l hit"')


def test_a_failed_computation_keeps_the_previous_report_and_a_new_one_replaces_it(
        own_settings: Settings, sessions_own: sessionmaker[Session], starter_repo: str) -> None:
    prof = Browser(own_settings, "sim-prof")
    previous = load_report(report_path(own_settings.data_dir, "hw4"))
    assert previous is not None  # the test above computed one
    missing = starter_repo.rpartition("@")[0] + "@no-such-ref"
    _set_git_base(prof, missing)
    _compute(prof)
    final, _ = _wait_final(prof)
    assert final["state"] == "failed" and "no-such-ref" in final["error"]
    page = prof.client.get("/assignments/hw4/similarity").text
    assert 'id="job-error"' in page and "The report below is the previous one." in page
    kept = load_report(report_path(own_settings.data_dir, "hw4"))
    assert kept is not None and kept.generated_at == previous.generated_at and kept.base.startswith(f"{starter_repo} (commit ")

    _set_git_base(prof, starter_repo)
    _compute(prof)
    assert _wait_final(prof)[0]["state"] == "done"
    replaced = load_report(report_path(own_settings.data_dir, "hw4"))
    assert replaced is not None and replaced.generated_at > previous.generated_at
    assert 'id="job-error"' not in prof.client.get("/assignments/hw4/similarity").text


def test_staff_set_the_base_on_the_settings_page(own_settings: Settings, sessions_own: sessionmaker[Session],
                                                 tmp_path: Path) -> None:
    prof = Browser(own_settings, "sim-prof")
    page = prof.client.get("/assignments/hw4/settings").text
    refused = prof.client.post("/assignments/hw4/similarity/base", data={"csrf_token": prof.csrf(page)},
                               files={"starter": ("starter.zip", b"not a zip", "application/zip")})
    assert "Not kept" in refused.text
    for spec, why in ((f"git:{tmp_path}@main", "is not an https:// URL"),
                      ("git:http://127.0.0.1:6379/x@main", "is not an https:// URL"),
                      ("git:https://github.com/llmsystem/llmsys_hw4@e2162e7",
                       "github.com is not a host bases may be fetched from")):
        refused_page = _set_git_base(prof, spec)
        assert "Not kept: " in refused_page and why in refused_page, spec
    refused_git = _set_git_base(prof, "git:no-ref-here")
    assert "Not kept: a git base is git:&lt;repository&gt;@&lt;ref&gt;" in refused_git
    assert 'name="git" aria-describedby="h-base-git" value="git:no-ref-here" aria-invalid="true"' in refused_git
    render_starter(load_rubric("hw4").starter_dir, tmp_path / "starter")
    given = student_zip(tmp_path / "starter", {}, tmp_path / "z")
    kept = prof.client.post("/assignments/hw4/similarity/base", data={"csrf_token": prof.csrf(page)},
                            files={"starter": ("starter.zip", given, "application/zip")})
    assert re.search(r"Kept: \d+ starter files", kept.text)
    assert f"Now: the starter zip staff gave (starter.zip, sha256 {hashlib.sha256(given).hexdigest()})." in kept.text
    back = prof.client.post("/assignments/hw4/similarity/base", data={"csrf_token": prof.csrf(page), "action": "default"})
    default = load_rubric("hw4").similarity_base
    assert default and f"Now: the rubric&#39;s default, {default}." in back.text
    with session_scope(sessions_own) as session:
        assert get_assignment(session, "hw4").similarity_base is None


def test_staff_list_and_remove_known_solutions_and_common_code(own_settings: Settings, sessions_own: sessionmaker[Session],
                                                               starter_repo: str, tmp_path: Path) -> None:
    """The settings page's listed sources (issue 51): a zip without the assignment's files, a git
    ref from a host not listed and a role that is neither are refused, saying why; a git ref that
    may be fetched is listed once in the role chosen, shown with it, audited, and removed again."""
    prof = Browser(own_settings, "sim-prof")
    page = prof.client.get("/assignments/hw4/settings").text
    assert 'id="no-public"' in page

    def add(**form: Any) -> str:
        files = {"public_zip": form.pop("zip")} if "zip" in form else None
        return prof.client.post("/assignments/hw4/similarity/sources", data={"csrf_token": prof.csrf(page), **form},
                                files=files).text

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "readme.txt").write_text("no kernels here")
    assert "Not listed: could not find the assignment folder in the zip" in add(zip=("notes.zip", student_zip(notes, {}, tmp_path / "z"),
                                                                          "application/zip"))
    assert "github.com is not a host bases may be fetched from" in add(public_git="git:https://github.com/x/y@main")
    assert "a listed source&#39;s role is solution or common, not &#39;copied&#39;" in add(public_git=starter_repo, role="copied")
    listed = add(public_git=starter_repo, role="common")
    words = f"{starter_repo} (common code, left out)"
    assert f"Listed {words}; compute the report again." in listed and "<code>" + words in listed
    assert f"{words} is listed already." in add(public_git=starter_repo)
    with session_scope(sessions_own) as session:
        assert get_assignment(session, "hw4").similarity_sources == [{"kind": "git", "spec": starter_repo, "role": "common"}]
    assert words in prof.client.get("/assignments/hw4/similarity").text  # in the report page's header
    gone = prof.client.post("/assignments/hw4/similarity/sources/remove",
                            data={"csrf_token": prof.csrf(page), "key": starter_repo}).text
    assert f"{words} is no longer listed" in gone and 'id="no-public"' in gone
    with session_scope(sessions_own) as session:
        assert get_assignment(session, "hw4").similarity_sources is None
        details = session.scalars(select(AuditEvent.detail).where(AuditEvent.detail.contains("similarity source"))
                                  .order_by(AuditEvent.id)).all()
    assert details == [f"assignment hw4: similarity source listed: {words}",
                       f"assignment hw4: similarity source removed: {words}"]
