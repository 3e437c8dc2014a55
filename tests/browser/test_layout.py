"""Every page at a phone's width (390 px) and a laptop's (1280 px) in a real (headless)
Chromium: the page itself never scrolls sideways (a wide table scrolls inside its own box),
the gradebook's per-row Re-grade button can be brought on screen and pressed, and the
accessibility checks (tests/browser/a11y.py: axe-core's and our own) pass at both widths. Each page has data to show:
the run page a regrade request answered and one open, and comments; the regrade queue both
requests; the staff's history of one student; the code view a file with a long line; the
confirmation pages (a member's removal, a bulk re-grade, a roster import) what they would do.
On a phone a table wider than the window says so and the keyboard scrolls it to its last
column, a run's correctness cases are cards whose errors read whole, and the build log is
reached by Tab and scrolled by the arrow keys."""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import ProblemResult, RegradeRequest, Role, Run, RunComment, RunState, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, _scored_run, log_in
from tests.fixtures import feedback_runs
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import COURSE, WorkerProcess
from worker.starter_kit import ZIP_TOP_FOLDER, zip_tree

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
    """A student with a built run (a long log line) and a scored run (a regrade request
    rejected, one open, comments), a token, a second student with an upload, and an instructor,
    all of hw4 alone (a new user named no assignment would join every course of the session)."""
    # Not the reference kit: code shared by more students would change the other tests' similarity report.
    folder = tmp_path_factory.mktemp("layout")
    (folder / "notes.txt").write_text(f"no code here, only a long line:\n{LONG_LINE}\n")
    archive = zip_tree(folder, folder.parent / "notes.zip")
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        set_password(get_or_create_user(session, STAFF, Role.instructor, [hw4.course]), PASSWORD, SUITE_ARGON2)
        _sub, other = record_submission(session, get_or_create_user(session, OTHER, Role.student, [hw4.course]), hw4,
                                        archive.name, blob)
        other.state, other.finished_at = RunState.built, utcnow()
        student = get_or_create_user(session, STUDENT, Role.student, [hw4.course])
        set_password(student, PASSWORD, SUITE_ARGON2)
        entry = entry_of(session, student.id, hw4.course_id)
        assert entry is not None
        entry.full_name, entry.section = "Maximiliana Konstantinopoulou-Wojciechowska", "Section B (Thursday lab)"
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
        scored = session.get(Run, scored_id)
        assert scored is not None
        student_id, staff_id, submission_id = scored.submission.user_id, _user_id(session, STAFF), scored.submission_id
        session.add_all([
            RegradeRequest(run_id=scored_id, student_id=student_id, state="rejected", decided_by_id=staff_id,
                           decided_at=utcnow(), reason="Problem 2.1 fails on a case my own tests pass: " + LONG_LINE,
                           reply="The case's maximum error is 0.42 against a tolerance of 1e-3; see its row."),
            RegradeRequest(run_id=scored_id, student_id=student_id, reason="Problem 2.2 timed out while the GPU "
                           "was shared with another run, I think; could it be graded again?"),
            RunComment(run_id=scored_id, author_id=student_id, body="Is src/combine.cu's softmax kernel the one "
                       "that was timed for problem 2.2_with_a_rather_long_identifier_in_it?"),
            RunComment(run_id=scored_id, author_id=staff_id, body="Yes: the build log names it."),
        ])
    return {"built": built_id, "scored": scored_id, "submission": submission_id, "blob": blob}


def _user_id(session: Session, username: str) -> int:
    return session.scalars(select(User.id).where(User.username == username)).one()


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


def _has_data(page: Page, runs: dict[str, Any]) -> None:
    """The newer pages checked above showed what they are for, not an empty state."""
    page.goto("/assignments/hw4/regrade-requests?show=all")  # the open one and the answered one
    expect(page.locator("article.regrade-request")).to_have_count(2)
    page.goto(f"/runs/{runs['scored']}")
    expect(page.locator("#regrade .regrade-request")).to_have_count(2)
    expect(page.locator("#comments")).to_contain_text("Yes: the build log names it.")
    page.goto(f"/assignments/hw4/students/{quote(STUDENT)}")
    expect(page.locator("main")).to_contain_text("graded-on-gpu.zip")
    page.goto(f"/submissions/{runs['submission']}/code?file={ZIP_TOP_FOLDER}/notes.txt")
    expect(page.locator("main")).to_contain_text("-I/some/include/dir")
    page.goto(f"/courses/{COURSE}/members/{OTHER}/remove")
    expect(page.locator("#confirm-question")).to_have_text(f"Remove {OTHER} (student) from {COURSE}?")


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_the_window(browser: Browser, base_url: str, runs: dict[str, Any], width: int,
                                    worker: WorkerProcess) -> None:
    viewport = {"width": width, "height": 844 if width < 600 else 800}
    anonymous = browser.new_context(base_url=base_url, viewport=viewport)
    _visit(anonymous.new_page(), ["/login", "/", "/forgot"], width)
    anonymous.close()

    student = browser.new_context(base_url=base_url, viewport=viewport)
    code = f"/submissions/{runs['submission']}/code"  # the zip's one file, under its top folder
    _visit(log_in(student, STUDENT), ["/", "/submissions", f"/runs/{runs['scored']}", f"/runs/{runs['built']}",
                                      f"{code}?file={ZIP_TOP_FOLDER}/notes.txt", "/settings/tokens", "/settings/password",
                                      "/settings/account", "/no/such/page", "/runs/abc"], width)
    student.close()

    staff = browser.new_context(base_url=base_url, viewport=viewport)
    page = log_in(staff, STAFF)
    # Not here: the similarity pages (a report computed here would change what tests/browser/test_ops_pages.py
    # starts from); tests/browser/test_similarity_pair.py checks them at 390 px.
    _visit(page, ["/gradebook", "/roster", "/courses", f"/courses/{COURSE}", "/assignments/hw4/settings",
                  f"/courses/{COURSE}/members", "/assignments/hw4/grading", f"/runs/{runs['scored']}",
                  "/assignments/hw4/regrade-requests?show=all",
                  f"/assignments/hw4/students/{quote(STUDENT)}",
                  f"{code}?file={ZIP_TOP_FOLDER}/notes.txt", f"/courses/{COURSE}/members/{OTHER}/remove",
                  "/gradebook/regrade?assignment=hw4&which=all"], width)
    _has_data(page, runs)
    # The roster's result (imported in the background by the worker): the table of new accounts.
    page.goto("/roster")
    page.get_by_label("Or paste the CSV").fill(f"lay.new.student.{width}.with.a.long.address@university.edu,Lay New,A")
    page.get_by_role("button", name="Import students").click()
    expect(page.locator("#confirm-question")).to_have_text(f"Import 1 student into {COURSE}, each enrolled there as a student?")
    _assert_no_page_scroll(page, width)
    check_page(page)
    page.get_by_role("button", name="Import 1 student").click()
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


# Where each cell of the breakdown lies, against the window and the table's own box.
CELLS_JS = """() => {
  const box = document.querySelector("#breakdown").closest(".scroll-x").getBoundingClientRect();
  return [...document.querySelectorAll("#breakdown tbody tr")].map((row) =>
    [...row.querySelectorAll("td.points, td.status, td.speed")].map((cell) => {
      const r = cell.getBoundingClientRect();
      return { cls: cell.className, text: cell.innerText.trim(), left: r.left, right: r.right,
               inBox: r.left >= box.left - 0.5 && r.right <= box.right + 0.5 };
    }));
}"""


def test_the_breakdown_shows_score_status_and_speed_on_a_phone(browser: Browser, base_url: str,
                                                               runs: dict[str, Any]) -> None:
    """At 390 px the run page's per-problem table shows every problem's points, status and
    speedup inside the window, each named by its column (a card per problem), without
    scrolling the table's box sideways; at 1280 px it is the usual table."""
    for width in WIDTHS:
        ctx = browser.new_context(base_url=base_url, viewport={"width": width, "height": 844})
        page = log_in(ctx, STUDENT)
        page.goto(f"/runs/{runs['scored']}")
        rows = page.evaluate(CELLS_JS)
        assert len(rows) >= 4 and all(len(cells) == 3 for cells in rows), rows
        for cells in rows:
            for cell in cells:
                assert 0 <= cell["left"] and cell["right"] <= width and cell["inBox"], (width, cell)
        scroll = page.locator("#breakdown").locator("xpath=..")
        assert scroll.evaluate("el => el.scrollWidth <= el.clientWidth"), width
        first = page.locator("#breakdown tbody tr").first
        if width < 600:
            assert first.locator("td.points").evaluate("el => getComputedStyle(el, '::before').content") == '"Points: "'
            expect(page.get_by_role("table", name="Points per problem")).to_be_visible()
            expect(first.get_by_role("cell").first).to_be_visible()
        else:
            assert first.locator("td.points").evaluate("el => getComputedStyle(el).display") == "table-cell"
        check_page(page)
        ctx.close()


def _tab_to(page: Page, selector: str) -> None:
    """Press Tab from the top of the page until the element at `selector` has the focus."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(200):
        page.keyboard.press("Tab")
        if page.evaluate("(sel) => document.activeElement === document.querySelector(sel)", selector):
            return
    raise AssertionError(f"{page.url}: Tab never reached {selector}")


def _scroll_right_by_keys(page: Page, selector: str) -> None:
    """With the box at `selector` focused by Tab, ArrowRight scrolls it to its right edge."""
    _tab_to(page, selector)
    box = page.locator(selector)
    for _ in range(200):
        if box.evaluate("el => el.scrollLeft + el.clientWidth >= el.scrollWidth - 1"):
            break
        page.keyboard.press("ArrowRight")
    assert box.evaluate("el => el.scrollLeft > 0 && el.scrollLeft + el.clientWidth >= el.scrollWidth - 1")


# Where a cell lies against the window and its scrolling box, and whether its own text is cut.
CELL_JS = """(cell) => {
  const r = cell.getBoundingClientRect(), box = cell.closest(".scroll-x").getBoundingClientRect();
  return { left: r.left, right: r.right, width: r.width, cut: cell.scrollWidth > cell.clientWidth + 1,
           inBox: r.left >= box.left - 0.5 && r.right <= box.right + 0.5, text: cell.innerText.trim(),
           label: getComputedStyle(cell, "::before").content };
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_narrow_tables_and_logs(browser: Browser, base_url: str, runs: dict[str, Any],
                                sessions: sessionmaker[Session], width: int) -> None:
    """/submissions: at 390 px its table (wider than the phone) says so and the keyboard scrolls
    it to its last columns; at 1280 px it fits. A run's failing case shows its whole error (a
    labelled card on the phone, a column on the laptop). The build log (a line wider than the
    window) is reached by Tab and scrolled by the arrow keys. The accessibility checks pass."""
    failing = feedback_runs.scored_run(sessions, STUDENT)
    ctx = browser.new_context(base_url=base_url, viewport={"width": width, "height": 844})
    page = log_in(ctx, STUDENT)

    page.goto("/submissions")
    table = page.get_by_role("region", name="Submissions table")
    hint = page.get_by_text("Scroll the table sideways for every column")
    uploaded = page.get_by_role("columnheader", name="Uploaded")
    if width < 600:
        expect(hint).to_be_visible()
        assert table.evaluate("el => el.scrollWidth > el.clientWidth")  # Uploaded, Runs start past the edge
        assert not uploaded.evaluate(CELL_JS)["inBox"]
        _scroll_right_by_keys(page, "main .scroll-x")
    else:
        expect(hint).to_be_hidden()
        assert table.evaluate("el => el.scrollWidth <= el.clientWidth")
    for name in ("Uploaded", "Runs"):
        assert page.get_by_role("columnheader", name=name).evaluate(CELL_JS)["inBox"], (width, name)
    _assert_no_page_scroll(page, width)
    check_page(page)

    page.goto(f"/runs/{failing}")
    error = page.locator("#cases-1\\.1 tbody tr").nth(2).locator("td.case-error")
    cell = error.evaluate(CELL_JS)
    assert cell["text"] == "Largest error 0.5 at index [2, 4, 6, 0]; values off where to_len is 1.", cell
    assert not cell["cut"] and cell["inBox"] and 0 <= cell["left"] and cell["right"] <= width, (width, cell)
    assert cell["width"] > width / 3, (width, cell)  # a readable width, not a column of a few letters
    assert page.locator("#cases-1\\.1 .scroll-x").evaluate("el => el.scrollWidth <= el.clientWidth"), width
    assert cell["label"] == ('"Error: "' if width < 600 else "none"), cell
    _assert_no_page_scroll(page, width)
    check_page(page)

    page.goto(f"/runs/{runs['built']}")
    log = page.get_by_role("list", name="build log, numbered lines")
    assert log.evaluate("el => el.scrollWidth > el.clientWidth")  # the long line goes past its edge
    _scroll_right_by_keys(page, "#log-build")
    check_page(page)
    ctx.close()
