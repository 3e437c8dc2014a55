"""The course-operations pages in a real (headless) Chromium: the instructor computes the
similarity report (the students' shared files a cluster above the ranking), opens a pair side
by side, saves a schedule with a mistake (shown next to the field), grants an extension, makes a student a TA and takes them out; each page passes
the accessibility checks (tests/browser/a11y.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Submission
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import COURSE, WorkerProcess
from worker.rubric import load_rubric
from worker.starter_kit import zip_tree

STUDENTS = ("ops-cara", "ops-dora")


@pytest.fixture(scope="module", autouse=True)
def course(sessions: sessionmaker[Session], settings: Settings, tmp_path_factory: pytest.TempPathFactory,
           worker: WorkerProcess) -> None:
    """An instructor, and two students who uploaded the same code (our reference kit); the
    worker computes the similarity report."""
    archive = zip_tree(load_rubric("hw4").starter_dir, tmp_path_factory.mktemp("ops") / "llmsys_hw4.zip")
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, "ops-prof", Role.instructor), PASSWORD, SUITE_ARGON2)
        for name in STUDENTS:
            user = get_or_create_user(session, name, Role.student)
            session.add(Submission(user=user, assignment=get_assignment(session, "hw4"),
                                   original_filename=archive.name, size_bytes=blob.size, sha256=blob.sha256))


def test_similarity_and_settings_pages(context: BrowserContext, screenshot_dir: Path) -> None:
    page = log_in(context, "ops-prof")
    page.get_by_role("link", name="Courses", exact=True).click()
    page.get_by_role("link", name=COURSE, exact=True).click()
    page.get_by_role("link", name="Similarity report of hw4").click()
    expect(page.locator("#no-report")).to_be_visible()
    page.get_by_role("button", name="Compute the report").click()
    expect(page.locator("#report-summary")).to_contain_text("students", timeout=120_000)
    pair = page.locator("#pairs tbody tr").filter(has_text=f"{STUDENTS[0]} and {STUDENTS[1]}")
    expect(pair.locator("td").nth(1)).to_have_text("100%")
    # The same kit from both: a cluster, listed above the ranking with each one's upload of it
    cluster = page.locator("#cluster-table tbody tr").filter(has_text=STUDENTS[0]).filter(has_text=STUDENTS[1])
    expect(cluster.locator("td").nth(1)).to_have_text("identical")
    expect(cluster.locator("li").filter(has_text=STUDENTS[0])).to_contain_text(re.compile(r"^ops-cara: \d{4}-\d\d-\d\d \d\d:\d\d UTC$"))
    check_page(page)
    page.screenshot(path=str(screenshot_dir / "similarity.png"), full_page=True)
    pair.get_by_role("link", name=re.compile("Side by side")).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"{STUDENTS[0]} and {STUDENTS[1]}: 100%")
    expect(page.locator("pre[data-side=a] .hit").first).to_be_visible()
    expect(page.locator("pre[data-side=b] .hit").first).to_be_visible()
    check_page(page)

    page.get_by_role("link", name="Settings and extensions").click()
    # Date-time pickers, labelled with the course's zone.
    for label in ("Release", "Due"):
        expect(page.get_by_label(f"{label} (UTC time)")).to_have_attribute("type", "datetime-local")
    page.get_by_label("Release").fill("2026-03-20T10:00:00")
    page.get_by_label("Due").fill("2026-03-19T23:59:59")
    page.get_by_role("button", name="Save schedule").click()
    expect(page.locator("#schedule-errors")).to_contain_text("The due date is before the release date.")
    page.get_by_label("Release").fill("")
    page.get_by_label("Grace period").fill("forever")
    page.get_by_role("button", name="Save schedule").click()
    expect(page.locator("#e-grace")).to_contain_text("is not a duration")
    expect(page.get_by_label("Grace period")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("Grace period").fill("2h")
    page.get_by_label("Late window").fill("3d")
    _save_schedule(page)
    expect(page.locator("#saved")).to_have_text("Schedule saved.")
    page.get_by_label("Student login").fill(STUDENTS[0])
    page.get_by_label("Extra time").fill("2d")
    page.get_by_label("Reason (kept with it)").fill("conference")
    page.get_by_role("button", name="Grant extension").click()
    expect(page.locator("#extension-list")).to_contain_text("2026-03-21 23:59:59")
    check_page(page)
    page.screenshot(path=str(screenshot_dir / "assignment-settings.png"), full_page=True)
    page.get_by_role("button", name=f"Remove {STUDENTS[0]}'s extension (asks to confirm)").click()
    expect(page.locator("#confirm-question")).to_have_text(f"Remove {STUDENTS[0]}'s extension of 2d (“conference”) "
                                                           "on hw4?")
    check_page(page)
    page.get_by_role("button", name=f"Remove {STUDENTS[0]}'s extension").click()
    expect(page.locator("#no-extensions")).to_be_visible()
    # Leave hw4 without a schedule for the other browser tests.
    for label in ("Due", "Grace period", "Late window"):
        page.get_by_label(label).fill("")
    _save_schedule(page)
    expect(page.locator("#saved")).to_be_visible()

    page.get_by_role("link", name="Grading controls").click()
    expect(page.locator("#grading-mode")).to_have_text("running")
    check_page(page)


def test_members_page_makes_a_student_a_ta_and_takes_them_out(context: BrowserContext, screenshot_dir: Path) -> None:
    page = log_in(context, "ops-prof")
    page.goto("/courses")
    page.get_by_role("link", name=COURSE, exact=True).click()
    page.get_by_role("link", name="Members").click()
    row = page.locator("#members tbody tr").filter(has_text=STUDENTS[1])
    expect(row.locator("td").first).to_have_text("student")
    page.get_by_label("Username").fill(STUDENTS[1])
    page.get_by_label("Part", exact=True).select_option("ta")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#saved")).to_contain_text(STUDENTS[1])
    expect(row.locator("td").first).to_have_text("TA")
    check_page(page)
    page.screenshot(path=str(screenshot_dir / "assignment-members.png"), full_page=True)
    page.get_by_role("button", name=f"Remove {STUDENTS[1]} from {COURSE}").click()
    page.get_by_role("button", name=f"Remove {STUDENTS[1]}").click()  # the confirmation page's
    expect(page.locator("#members")).not_to_contain_text(STUDENTS[1])
    page.get_by_label("Username").fill(STUDENTS[1])  # back in as a student, for the other tests
    page.get_by_label("Part", exact=True).select_option("student")
    page.get_by_role("button", name="Save").click()
    expect(row.locator("td").first).to_have_text("student")
    page.get_by_label("Username").fill("ops-prof")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#member-error")).to_contain_text("cannot change your own part")
    check_page(page)


def _save_schedule(page: Page) -> None:
    """Save the settings form's schedule. hw4's grades are the session's (other tests' runs):
    where the change moves any, its preview asks first, and is confirmed."""
    page.get_by_role("button", name="Save schedule").click()
    page.locator("#saved, #confirm-button").first.wait_for()
    if page.locator("#confirm-button").count():
        page.locator("#confirm-button").click()
