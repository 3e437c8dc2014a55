"""The roster page in Chromium with a real worker: an instructor imports a 300-line Canvas
gradebook export; the page answers at once and follows the background import (students
imported of those to import) until the result is shown; the new accounts' first passwords
download once as a login,password CSV, and a second download is refused with the reason. And
the same on the embedded default (`grader dev`: SQLite, the SQLite broker, its one worker
consuming the CPU queue too), where a downloaded password then logs the student in."""
from __future__ import annotations

import csv
import io
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_embedded_default import EmbeddedService, free_port, log_in
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import COURSE, WorkerProcess
from tests.service.test_roster_canvas import _canvas_export, held_login

PASSWORD = "correct horse battery"
DOWNLOAD = "Download the first passwords (CSV, one time only)"


def _download(page: Page) -> list[list[str]]:
    """The rows of the passwords' CSV the download button gives."""
    with page.expect_download() as download:
        page.get_by_role("button", name=DOWNLOAD).click()
    assert re.fullmatch(r"first-passwords-\d+\.csv", download.value.suggested_filename)
    return list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))


def test_a_canvas_roster_imports_in_the_background_and_its_passwords_download_once(
        context: BrowserContext, sessions: sessionmaker[Session], worker: WorkerProcess, screenshot_dir: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    login = f"bprof-{tag}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, login, Role.instructor), PASSWORD, SUITE_ARGON2)
    page = context.new_page()
    page.goto("/login?next=/roster")
    page.get_by_label("Username").fill(login)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/roster")
    expect(page.locator("#roster-hint")).to_contain_text("Canvas gradebook export")

    roster = _canvas_export(tag, 297)
    assert len(roster.splitlines()) == 300
    page.get_by_label("Roster file (.csv)").set_input_files(
        {"name": "canvas.csv", "mimeType": "text/csv", "buffer": roster.encode()})
    page.get_by_role("button", name="Import students").click()
    expect(page.locator("#confirm-question")).to_have_text(f"Import 297 students into {COURSE}, each enrolled there as "
                                                           "a student?")
    expect(page.locator("main")).to_contain_text("1 line cannot be imported and is skipped: line 300:")
    with held_login(sessions, f"s151{tag}"):  # the import waits at student 151, its 152nd line
        page.get_by_role("button", name="Import 297 students").click()
        # The page answers at once and follows the job: part of the students, then the result.
        part = re.compile(r"^([1-9]\d?|1[0-4]\d|15[01]) of 297 students imported$")  # 1 to 151
        expect(page.locator("#roster-progress")).to_have_text(part, timeout=60_000)
        expect(page.locator("#roster-job-state")).to_have_text("importing")
        expect(page.get_by_role("button", name="Import students")).to_be_disabled()
    expect(page.locator("#roster-summary")).to_have_text("297 created, 0 updated, 0 unchanged, 1 line(s) with errors.",
                                                         timeout=240_000)
    expect(page.locator("#roster-errors li")).to_have_text(["Line 300: the SIS Login ID is empty"])
    expect(page.locator("#roster-created tbody tr")).to_have_count(297)
    expect(page.locator("#roster-created thead th")).to_have_text(["Login"])
    expect(page.locator("#roster-created-list summary")).to_have_text("The 297 new accounts")
    expect(page.locator("#roster-passwords")).to_contain_text("can be downloaded once")
    page.screenshot(path=str(screenshot_dir / "roster-import.png"), full_page=False)
    check_page(page)

    rows = _download(page)
    assert rows[0] == ["login", "password"] and len(rows) == 298
    assert {r[0] for r in rows[1:]} >= {f"s001{tag}", f"s000{tag}@andrew.example.edu"}
    assert all(re.fullmatch(r"[A-Za-z2-9]{12}", r[1]) for r in rows[1:])

    page.get_by_role("button", name=DOWNLOAD).click()
    expect(page.locator("#roster-error")).to_contain_text("were already downloaded")
    expect(page.locator("#roster-taken")).to_contain_text("are not kept")
    expect(page.get_by_role("button", name=DOWNLOAD)).to_have_count(0)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedService]:
    service = EmbeddedService(tmp_path_factory.mktemp("embedded-roster") / "var", free_port())
    yield service
    service.stop()


def test_the_embedded_default_imports_in_its_one_worker(browser: Browser, embedded: EmbeddedService) -> None:
    page = log_in(browser, embedded, "instructor")
    page.goto("/roster")
    page.get_by_label("Or paste the CSV").fill(_canvas_export("dev", 20))
    page.get_by_role("button", name="Import students").click()
    page.get_by_role("button", name="Import 20 students").click()
    expect(page.locator("#roster-summary")).to_have_text("20 created, 0 updated, 0 unchanged, 1 line(s) with errors.",
                                                         timeout=180_000)
    rows = _download(page)
    assert rows[0] == ["login", "password"] and len(rows) == 21
    student = browser.new_context(base_url=f"http://127.0.0.1:{embedded.port}").new_page()
    student.goto("/login")
    student.get_by_label("Username").fill(rows[1][0])
    student.get_by_label("Password").fill(rows[1][1])
    student.get_by_role("button", name="Log in").click()
    expect(student.get_by_role("button", name="Log out")).to_be_visible()
