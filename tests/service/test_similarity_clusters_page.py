"""Clusters through the similarity job on PostgreSQL (a database of its own): eight generated
hw4 students, four of whom hand in the same files, one of them since an earlier upload and one
only in its latest. The job's stored report names the cluster with each one's first upload of
it, and the similarity page shows it above the ranking."""
from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Role, SimilarityJob, Submission
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from grader.similarity.jobs import DONE, run_job
from grader.similarity.store import load_report, report_path
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.similarity_class import generate_class
from tests.fixtures.zips import student_zip
from tests.service.conftest import own_database
from tests.service.test_web_settings import PASSWORD, Browser
from worker.rubric import load_rubric
from worker.starter_kit import render_starter

COPIERS = ("s00", "s02", "s03", "s06")
EARLY, LATE = datetime(2026, 3, 2, 9, 0, tzinfo=UTC), datetime(2026, 3, 9, 17, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def own(settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with own_database(settings_env, tmp_path_factory.mktemp("clusterdata"), "kg_test_clu") as env:
        yield Settings.from_variables(env)


@pytest.fixture(scope="module")
def computed(own: Settings, tmp_path_factory: pytest.TempPathFactory) -> sessionmaker[Session]:
    """s02 uploaded the copy early and again late; s03 its own work early, the copy late."""
    rubric = load_rubric("hw4")
    work = tmp_path_factory.mktemp("cluclass")
    students = {n: s.files for n, s in generate_class(rubric, work / "gen", 8, 20260406, (1, 5)).items()}
    render_starter(rubric.starter_dir, work / "starter")
    uploads = [(n, files, LATE) for n, files in students.items() if n not in COPIERS[1:]]
    uploads += [(n, students["s00"], LATE) for n in COPIERS[1:]]
    uploads += [("s02", students["s00"], EARLY), ("s03", students["s03"], EARLY)]
    blobs, sessions = BlobStore(own.blob_dir), make_session_factory(make_engine(own))
    with session_scope(sessions) as session:
        assignment = get_assignment(session, "hw4")
        set_password(get_or_create_user(session, "clu-prof", Role.instructor), PASSWORD, SUITE_ARGON2)
        for number, (name, files, at) in enumerate(sorted(uploads, key=lambda u: u[2])):
            blob = blobs.put_bytes(student_zip(work / "starter", files, work / f"{name}-{number}"))
            session.add(Submission(user=get_or_create_user(session, name, Role.student), assignment=assignment,
                                   original_filename="hw4.zip", size_bytes=blob.size, sha256=blob.sha256,
                                   uploaded_at=at))
        session.flush()
        job = SimilarityJob(assignment_id=assignment.id, state="queued")
        session.add(job)
    with session_scope(sessions) as session:
        job_id = session.query(SimilarityJob.id).scalar()
    assert run_job(own, sessions, blobs, job_id) == DONE
    return sessions


def test_the_stored_report_names_the_cluster_and_since_when(own: Settings, computed: sessionmaker[Session]) -> None:
    report = load_report(report_path(own.data_dir, "hw4"))
    assert report is not None
    [four] = [c for c in report.clusters if c.students == COPIERS]
    assert four.identical
    since: dict[str, set[datetime | None]] = {}
    for holder in four.holders:
        since.setdefault(holder.student, set()).add(holder.since)
    assert since["s00"] == since["s06"] == {LATE} and since["s02"] == {EARLY}
    assert LATE in since["s03"]  # the files its own early work did not already hold
    assert dict(four.uploads)["s02"] == ((EARLY, four.files),)  # every file at once: one time
    assert all(set(COPIERS) <= set(c.students) for c in report.clusters if "s00" in c.students)


def test_the_similarity_page_shows_the_cluster_above_the_ranking(own: Settings, computed: sessionmaker[Session]) -> None:
    page = Browser(own, "clu-prof").client.get("/assignments/hw4/similarity").text
    section = page[page.index('id="clusters"'):page.index('id="pairs"')]
    assert "s00, s02, s03, s06" in section and "identical" in section
    assert re.search(r"s02: 2026-03-02 \d\d:\d\d", section)  # s02's first upload of it, in the course's zone
