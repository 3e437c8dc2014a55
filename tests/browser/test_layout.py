"""Every page at a phone's width (390 px) and a laptop's (1280 px) in a real (headless)
Chromium: the page itself never scrolls sideways (a wide table scrolls inside its own box),
the gradebook's per-row Re-grade button can be brought on screen and pressed, and the
accessibility checks (tests/browser/a11y.py) pass at both widths."""
from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth import issue_token, set_password
from grader.blobstore import BlobStore
from grader.db import session_scope
from grader.models import ProblemResult, Role, Run, RunState, utcnow
from grader.service import get_assignment, get_or_create_user, record_submission
from grader.settings import Settings
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, _scored_run, log_in
from tests.service.conftest import WorkerProcess
from worker.starter_kit import zip_tree

WIDTHS = (390, 1280)
STUDENT, OTHER, STAFF = "lay-student-with-a-long-login@university.edu", "lay-other", "lay-prof"
# A long build-log line and file name, as real ones are: they must not widen the page either.
LONG_LINE = "nvcc -O3 -arch=sm_90 -Xcompiler -fPIC --shared " + "-I/some/include/dir " * 12 + "combine.cu"

# The page's own width beyond the window, and the elements that stick out (for the message).
OVERFLOW_JS = """() => {
  const width = window.innerWidth;
  const out = [...document.querySelectorAll("body *")]
    .filter((el) => el.getBoundingClientRect().right > width + 0.5 && !el.closest(".scroll-x, ol.log"))
    .slice(0, 5).map((el) => el.outerHTML.slice(0, 100));
  return { page: document.documentElement.scrollWidth, window: width, out };
}"""


@pytest.fixture(scope="module")
def runs(sessions: sessionmaker[Session], settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A student with a built run (a long log line) and a scored run, a token, a second
    student with an upload, and an instructor."""
    # Not the reference kit: code shared by more students would change the other tests' similarity report.
    folder = tmp_path_factory.mktemp("layout")
    (folder / "notes.txt").write_text("no code here\n")
    archive = zip_tree(folder, folder.parent / "notes.zip")
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, STAFF, Role.instructor), PASSWORD)
        hw4 = get_assignment(session, "hw4")
        _sub, other = record_submission(session, get_or_create_user(session, OTHER, Role.student), hw4, archive.name, blob)
        other.state, other.finished_at = RunState.built, utcnow()
        student = get_or_create_user(session, STUDENT, Role.student)
        set_password(student, PASSWORD)
        student.full_name, student.section = "Maximiliana Konstantinopoulou-Wojciechowska", "Section B (Thursday lab)"
        issue_token(session, student, "a laptop token with a long descriptive name")
        _sub, built = record_submission(session, student, hw4, "my_final_submission_for_hw4_really_final_v3.zip", blob)
        built.state, built.finished_at, built.message = RunState.built, utcnow(), "Built; not run on a GPU."
        built.stages = {"build": {"status": "ok", "seconds": 3.2, "log": f"{LONG_LINE}\nok"}}
        session.flush()
        built_id = built.id
    scored_id = _scored_run(sessions, STUDENT, built_id)
    with session_scope(sessions) as session:  # graded on a GPU model with no calibration: flagged in red
        result = session.scalars(select(ProblemResult).where(ProblemResult.run_id == scored_id)).first()
        assert result is not None and result.details["measurement"] is not None
        measurement = {**result.details["measurement"], "telemetry": {"before": {"name": "NVIDIA H200 NVL (a new model)"}}}
        result.details = {**result.details, "measurement": measurement}
    return {"built": built_id, "scored": scored_id, "blob": blob}


def _assert_no_page_scroll(page: Page, width: int) -> None:
    seen = page.evaluate(OVERFLOW_JS)
    assert seen["window"] == width
    assert seen["page"] <= width, f"{page.url} at {width} px is {seen['page']} px wide; sticking out: {seen['out']}"


def _visit(page: Page, paths: list[str], width: int) -> None:
    for path in paths:
        page.goto(path)
        _assert_no_page_scroll(page, width)
        check_page(page)


def _regrade_button_on_screen(page: Page, width: int) -> None:
    """The gradebook row's Re-grade button, scrolled to inside its table's box, is on screen
    and is what a click there hits (not cut off by the box). At 1280 px the whole table shows."""
    page.goto("/gradebook")
    if width >= 1280:
        assert page.locator(".scroll-x").evaluate("el => el.scrollWidth <= el.clientWidth")
    button = page.get_by_role("button", name=f"Re-grade {OTHER}'s submission", exact=False)
    button.scroll_into_view_if_needed()
    box = button.bounding_box()
    assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width, box
    hit = page.evaluate("([x, y]) => document.elementFromPoint(x, y)?.getAttribute('aria-label') || ''",
                        [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2])
    assert hit.startswith(f"Re-grade {OTHER}'s submission"), hit


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_the_window(browser: Browser, base_url: str, runs: dict[str, Any], width: int,
                                    worker: WorkerProcess) -> None:
    viewport = {"width": width, "height": 844 if width < 600 else 800}
    anonymous = browser.new_context(base_url=base_url, viewport=viewport)
    _visit(anonymous.new_page(), ["/login", "/"], width)
    anonymous.close()

    student = browser.new_context(base_url=base_url, viewport=viewport)
    _visit(log_in(student, STUDENT), ["/", "/submissions", f"/runs/{runs['scored']}", f"/runs/{runs['built']}",
                                      "/settings/tokens", "/settings/password", "/no/such/page", "/runs/abc"], width)
    student.close()

    staff = browser.new_context(base_url=base_url, viewport=viewport)
    page = log_in(staff, STAFF)
    # Not here: the similarity pages (a report computed here would change what tests/browser/test_ops_pages.py
    # starts from); tests/browser/test_similarity_pair.py checks them at 390 px.
    _visit(page, ["/gradebook", "/roster", "/assignments", "/assignments/hw4/settings", "/assignments/hw4/members",
                  "/assignments/hw4/grading", f"/runs/{runs['scored']}"], width)
    # The roster's result (imported in the background by the worker): the table of new accounts.
    page.goto("/roster")
    page.get_by_label("Or paste the CSV").fill(f"lay.new.student.{width}.with.a.long.address@university.edu,Lay New,A")
    page.get_by_role("button", name="Import students").click()
    expect(page.locator("#roster-created tbody tr")).to_have_count(1, timeout=60_000)
    _assert_no_page_scroll(page, width)
    check_page(page)
    _regrade_button_on_screen(page, width)
    staff.close()


def test_a_run_in_flight_fits_a_phone(browser: Browser, base_url: str, runs: dict[str, Any],
                                      sessions: sessionmaker[Session]) -> None:
    """The staff page of runs in flight lists one (a run marked building, no worker holds it)."""
    with session_scope(sessions) as session:
        run = session.get(Run, runs["built"])
        assert run is not None
        _sub, flying = record_submission(session, run.submission.user, run.submission.assignment, "again.zip",
                                         runs["blob"])
        flying.state, flying.started_at, flying.enqueued_at = RunState.building, utcnow(), utcnow()
        session.flush()
        flying_id = flying.id
    ctx = browser.new_context(base_url=base_url, viewport={"width": 390, "height": 844})
    page = log_in(ctx, STAFF)
    page.goto("/assignments/hw4/grading")
    expect(page.locator("#in-flight")).to_contain_text(str(flying_id))
    _assert_no_page_scroll(page, 390)
    check_page(page)
    ctx.close()
    with session_scope(sessions) as session:  # leave no run in flight for the other tests
        done = session.get(Run, flying_id)
        assert done is not None
        done.state, done.finished_at = RunState.built, utcnow()
