"""The similarity pages on PostgreSQL, in a database of their own (other tests upload identical
copies of our reference kit, which are rightly the most similar pairs there): a seeded class of
30 generated hw4 submissions with one disguised copy, uploaded as zips; the instructor computes
the report (stored, with the zips compared), the planted pair ranks first, and its side-by-side
view highlights the shared regions on both sides. Students get neither page nor computation."""
from __future__ import annotations

import re
import shutil
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth import set_password
from grader.blobstore import BlobStore
from grader.cli import init_database
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Role, Submission
from grader.service import get_assignment, get_or_create_user
from grader.settings import Settings
from grader.similarity_store import load_report, report_path
from tests.service.conftest import PG_ADMIN_URL
from tests.service.test_web_settings import PASSWORD, Browser
from tests.unit.similarity_class import generate_class
from worker.rubric import load_rubric
from worker.starter_kit import render_starter

PLANTED = ("s07", "s23")


@pytest.fixture(scope="module")
def own_settings(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    name = f"kg_test_sim_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    own = settings.model_copy(update={"database_url": f"{base}/{name}", "data_dir": tmp_path_factory.mktemp("simdata")})
    init_database(own)
    yield own
    make_engine(own).dispose()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _zip(starter: Path, files: dict[str, str], dest: Path) -> bytes:
    """The student starter with the student's files laid over it, zipped as a student would."""
    tree = dest / "llmsys_hw4"
    shutil.copytree(starter, tree)
    for rel, text in files.items():
        (tree / rel).write_text(text)
    archive = dest / "hw4.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(dest).as_posix())
    return archive.read_bytes()


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
        set_password(get_or_create_user(session, "sim-prof", Role.instructor), PASSWORD)
        for name, student in students.items():
            user = get_or_create_user(session, name, Role.student)
            set_password(user, PASSWORD)
            blob = blobs.put_bytes(_zip(work / "starter", student.files, work / name))
            session.add(Submission(user=user, assignment=assignment, original_filename="hw4.zip",
                                   size_bytes=blob.size, sha256=blob.sha256))
    return sessions


def test_students_get_no_similarity_page_and_cannot_compute(own_settings: Settings,
                                                            sessions_own: sessionmaker[Session]) -> None:
    student = Browser(own_settings, "s07")
    assert student.client.get("/assignments/hw4/similarity").status_code == 404
    token = student.page_csrf("/")
    assert student.client.post("/assignments/hw4/similarity", data={"csrf_token": token}).status_code == 404
    assert student.client.get("/assignments/hw4/similarity/pair", params={"a": "s07", "b": "s23"}).status_code == 404
    assert student.client.get("/assignments/hw4/similarity.json").status_code == 404
    anonymous = TestClient(create_app(own_settings)).get("/assignments/hw4/similarity", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login"
    prof = Browser(own_settings, "sim-prof")
    assert prof.client.post("/assignments/hw4/similarity", data={}).status_code == 403  # no CSRF token
    assert load_report(report_path(own_settings.data_dir, "hw4")) is None


def test_planted_copy_ranks_first_and_shows_side_by_side(own_settings: Settings,
                                                         sessions_own: sessionmaker[Session]) -> None:
    prof = Browser(own_settings, "sim-prof")
    before = prof.client.get("/assignments/hw4/similarity").text
    assert 'id="no-report"' in before
    assert prof.client.get("/assignments/hw4/similarity.json").status_code == 404  # nothing computed yet
    response = prof.client.post("/assignments/hw4/similarity", data={"csrf_token": prof.csrf(before)},
                                follow_redirects=False)
    assert response.status_code == 303
    page = prof.client.get(response.headers["location"]).text
    assert "over 30" in page and "(435 pairs)" in page and "page 1 of 5" in page
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


def test_staff_keep_the_starter_students_received_as_the_base(own_settings: Settings, tmp_path: Path) -> None:
    prof = Browser(own_settings, "sim-prof")
    page = prof.client.get("/assignments/hw4/similarity").text
    assert "None kept: our kit's stripped starter is the base." in page
    refused = prof.client.post("/assignments/hw4/similarity/base", data={"csrf_token": prof.csrf(page)},
                               files={"starter": ("starter.zip", b"not a zip", "application/zip")})
    assert "Not kept" in refused.text
    render_starter(load_rubric("hw4").starter_dir, tmp_path / "starter")
    kept = prof.client.post("/assignments/hw4/similarity/base", data={"csrf_token": prof.csrf(page)},
                            files={"starter": ("starter.zip", _zip(tmp_path / "starter", {}, tmp_path / "z"),
                                               "application/zip")})
    assert re.search(r"Kept: \d+ starter files", kept.text) and "The kept starter is the base." in kept.text
