"""The web pages in a real (headless) Chromium: login, upload, live run page, breakdown,
build log, other students' runs, the instructor's gradebook and re-grade, CSRF refusals, password change."""
from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ErrorClass, Role, Run, RunState, Submission, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.storage.blobstore import StoredBlob
from tests.browser.a11y import check_page
from tests.fixtures.feedback_runs import record_scored
from tests.fixtures.hostile_zips import tar_gz
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import small_zip
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.rubric import load_rubric
from worker.starter_kit import zip_tree
from worker.timing import RatioSummary

PASSWORD = "correct horse battery"
USERS = {"amy": Role.student, "ben": Role.student, "prof": Role.instructor}
STATE: dict[str, Any] = {}  # what one test leaves for the next (they run in file order)


@pytest.fixture(scope="module", autouse=True)
def users(sessions: sessionmaker[Session]) -> None:
    # Enrolled in hw4 alone: a new user with no assignment named joins every assignment, and
    # browser tests run earlier in the session create courses of their own.
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        for name, role in USERS.items():
            set_password(get_or_create_user(session, name, role, [hw4.course]), PASSWORD, SUITE_ARGON2)


def log_in(context: BrowserContext, username: str, password: str = PASSWORD) -> Page:
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    return page


def login_fields(url: str) -> dict[str, list[str]]:
    """The query fields of `url`, which must be the login page's."""
    parts = urlsplit(url)
    assert parts.path == "/login", url
    return parse_qs(parts.query, strict_parsing=True)


def count(sessions: sessionmaker[Session], model: type) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_login_page_wrong_password_and_session_cookie(context: BrowserContext, screenshot_dir: Path) -> None:
    page = log_in(context, "amy", "not the password")
    expect(page.locator("#login-error")).to_have_text("Wrong username or password.")
    # What a student without a password does, in words: no server command.
    expect(page.get_by_text("No password yet, or forgot it? Ask your course staff")).to_be_visible()
    expect(page.locator("main code")).to_have_count(0)
    page.screenshot(path=str(screenshot_dir / "login.png"))
    anonymous = {c["name"]: c for c in context.cookies()}["kg_session"]["value"]
    page = log_in(context, "amy")
    expect(page.get_by_role("heading", name="Submit your assignment")).to_be_visible()
    cookie = {c["name"]: c for c in context.cookies()}["kg_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert cookie["value"] != anonymous  # the pre-login session is replaced, not extended
    # Log out: the session no longer opens student pages.
    page.get_by_role("button", name="Log out").click()
    page.goto("/submissions")
    assert login_fields(page.url) == {"next": ["/submissions"]}  # logged out: nothing says a session ended


def _drop(page: Page, name: str, data: bytes) -> None:
    """Drag a file onto the upload form's drop zone (a real drop event with a DataTransfer)."""
    transfer = page.evaluate_handle(
        """([b64, name]) => {
            const bin = atob(b64), bytes = new Uint8Array(bin.length);
            for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
            const dt = new DataTransfer();
            dt.items.add(new File([bytes], name));
            return dt;
        }""", [base64.b64encode(data).decode(), name])
    zone = page.locator(".dropzone")
    zone.dispatch_event("dragenter", {"dataTransfer": transfer})
    expect(zone).to_have_class(re.compile(r"\bover\b"))
    zone.dispatch_event("drop", {"dataTransfer": transfer})


def test_student_uploads_and_watches_the_run(
    context: BrowserContext, worker: Any, sessions: sessionmaker[Session], screenshot_dir: Path,
    tmp_path: Path,
) -> None:
    page = log_in(context, "amy")
    expect(page.get_by_text("The limit is 2 MiB")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "upload.png"))
    before = count(sessions, Submission)
    picker = page.get_by_label(re.compile("Submission"))
    # The wrong type, picked or dropped: a clear error on the page, the choice cleared, nothing sent.
    picker.set_input_files({"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello"})
    expect(page.locator("#file-error")).to_contain_text("“notes.txt” is not a .zip file")
    assert picker.evaluate("el => el.files.length") == 0 and picker.get_attribute("aria-invalid") == "true"
    _drop(page, "slides.pdf", b"%PDF-1.4")
    expect(page.locator("#file-error")).to_contain_text("“slides.pdf” is not a .zip file")
    _drop(page, "huge.zip", b"PK\x03\x04" + b"\0" * (3 * 1024 * 1024))
    expect(page.locator("#file-error")).to_contain_text("“huge.zip” is 3.0 MiB; the limit is 2 MiB.")
    # A .zip name on something else passes the page's check; the server refuses it by its header.
    picker.set_input_files({"name": "fake.zip", "mimeType": "application/zip", "buffer": b"hello"})
    page.get_by_role("button", name="Upload and grade").click()
    expect(page.locator("#upload-error")).to_contain_text("“fake.zip” is not a zip file")
    # How to make one, in words with the assignment's folder name (no Markdown backticks).
    expect(page.locator("#upload-error")).to_contain_text(
        "Zip your assignment folder (for example: zip -r llmsys_hw4.zip llmsys_hw4) and upload the .zip file.")
    assert "`" not in page.locator("#upload-error").inner_text()
    # A .tar.gz renamed .zip: the message says what it is.
    picker.set_input_files({"name": "kit.zip", "mimeType": "application/zip", "buffer": tar_gz()})
    page.get_by_role("button", name="Upload and grade").click()
    expect(page.locator("#upload-error")).to_contain_text("“kit.zip” is a gzip file (a .tar.gz, say), not a zip file")
    # Refused on the same form (the page sent it itself): the file is still chosen, to send again.
    assert page.url.endswith("/") and picker.evaluate("el => el.files.length") == 1
    # Opening /submit with GET (a reload after a plain form post) shows the upload form, not a raw 405.
    assert page.goto("/submit").url.endswith("/")  # type: ignore[union-attr]
    expect(page.get_by_role("heading", name="Submit your assignment")).to_be_visible()
    assert count(sessions, Submission) == before
    # The reference kit, zipped as a student would, dropped onto the form.
    archive = zip_tree(load_rubric("hw4").starter_dir, tmp_path / "llmsys_hw4.zip")
    _drop(page, archive.name, archive.read_bytes())
    expect(page.locator("#file-chosen")).to_contain_text("Ready to upload: llmsys_hw4.zip")
    expect(page.locator("#file-error")).to_be_hidden()
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    STATE["run_id"] = run_id
    expect(page.locator("#run-state")).to_have_text(re.compile("queued|building|running"))
    # No reload from the test: the page's script polls and reloads itself when the run is final.
    expect(page.locator("#run-state")).to_have_text(re.compile("^(built|scored|failed)$"), timeout=300_000)
    assert page.locator("#run-state").inner_text() == "built", worker.log()
    build_lines = page.locator("#log-build li")
    assert build_lines.count() > 0
    assert page.locator("#log-build").evaluate("el => el.tagName") == "OL"  # numbered lines
    page.screenshot(path=str(screenshot_dir / "run-built.png"), full_page=True)
    page.get_by_role("link", name="My submissions").click()
    expect(page.get_by_role("link", name=f"Run {run_id}")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "history.png"))


def _set_run(sessions: sessionmaker[Session], run_id: int, **values: Any) -> None:
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))


def _unheld_run(sessions: sessionmaker[Session], filename: str, **values: Any) -> int:
    """A queued run of amy's, on the earlier upload's zip, that no worker holds (a test moves it)."""
    with session_scope(sessions) as session:
        earlier = session.get(Run, STATE["run_id"])
        assert earlier is not None
        blob = StoredBlob(sha256=earlier.submission.sha256, size=earlier.submission.size_bytes)
        user = get_or_create_user(session, "amy", Role.student)
        _sub, run = record_submission(session, user, get_assignment(session, "hw4"), filename, blob)
        for key, value in values.items():
            setattr(run, key, value)
        session.flush()
        return run.id


def test_run_page_follows_progress_without_reload(
    context: BrowserContext, sessions: sessionmaker[Session], screenshot_dir: Path,
) -> None:
    """The worker's writes (state, progress), made here on a run no worker holds, reach the
    open page by its own polling: queue position and ETA, building, problem k of 5."""
    run_id = _unheld_run(sessions, "progress.zip", enqueued_at=utcnow())  # sent: it has a place in the queue
    page = log_in(context, "amy")
    page.goto(f"/runs/{run_id}")
    # The earlier upload finished, so there is a recent duration to estimate from.
    expect(page.locator("#run-progress")).to_contain_text(re.compile(r"Position \d+ in the queue; estimated result in"))
    expect(page.locator('[data-step="queued"]')).to_have_attribute("aria-current", "step")
    page.evaluate("window.kgNotReloaded = true")
    _set_run(sessions, run_id, state=RunState.building, started_at=utcnow(), progress={"stage": "build"})
    expect(page.locator("#run-progress")).to_have_text("Building: compiling the kernels with nvcc.")
    _set_run(sessions, run_id, state=RunState.running,
             progress={"stage": "run", "problem": "2.1", "index": 3, "total": 5})
    expect(page.locator("#run-progress")).to_have_text(
        "Running problem 3 of 5: 2.1 LayerNorm forward (ker_layer_norm).")
    expect(page.locator('[data-step="running"]')).to_have_attribute("aria-current", "step")
    assert page.evaluate("window.kgNotReloaded === true")  # updated in place
    expect(page.locator("#run-checked")).to_be_hidden()
    # the two-step result: the kernel problems' verdicts while their speed is measured
    checked = [{"problem": "1.1", "correct": True, "correctness_points": 14, "correctness_max": 14,
                "speed": "being measured"},
               {"problem": "2.2", "correct": False, "correctness_points": 3.5, "correctness_max": 14,
                "speed": "not timed"}]
    _set_run(sessions, run_id, progress={"stage": "run", "problem": "1.1", "index": 1, "total": 5, "checked": checked})
    items = page.locator("#run-checked li")
    expect(items).to_have_count(2)
    expect(items.nth(0)).to_have_text(re.compile(r"^1\.1 .+: correct, 14 of 14 correctness points; speed being measured$"))
    expect(items.nth(1)).to_have_text(re.compile(r"^2\.2 .+: a correctness case failed, 3\.5 of 14 correctness points; "
                                                 r"speed not timed$"))
    assert page.evaluate("window.kgNotReloaded === true")
    page.screenshot(path=str(screenshot_dir / "run-progress.png"))
    _set_run(sessions, run_id, state=RunState.failed, finished_at=utcnow(), progress=None,
             error_class=ErrorClass.timeout, message="Grading stopped: time limit.")
    expect(page.locator("#run-state")).to_have_text("failed")
    expect(page.locator("#run-message")).to_have_text("Grading stopped: time limit.")
    assert page.evaluate("window.kgNotReloaded === undefined")  # final: reloaded for the breakdown


def test_run_page_says_when_the_session_ended(
    context: BrowserContext, sessions: sessionmaker[Session],
) -> None:
    """The run page's polling meets a 401 once the session has ended (here: its cookie is
    gone): it stops and says so, with a way to log in, instead of showing a stale status."""
    run_id = _unheld_run(sessions, "session.zip")
    page = log_in(context, "amy")
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-state")).to_have_text("queued")
    expect(page.locator("#signed-out")).to_have_count(0)
    context.clear_cookies()
    notice = page.locator("#signed-out")
    expect(notice).to_contain_text("Your session has ended")
    link = notice.get_by_role("link", name="log in again")  # back to this page once logged in
    expect(link).to_have_attribute("href", f"/login?next=%2Fruns%2F{run_id}")
    expect(notice).to_contain_text("log in again to come back here")
    _set_run(sessions, run_id, state=RunState.failed, finished_at=utcnow(), error_class=ErrorClass.timeout,
             message="Grading stopped: time limit.")
    page.wait_for_timeout(2500)  # one more poll would have reloaded the page: it no longer polls
    expect(page.locator("#run-state")).to_have_text("queued")


def _scored_run(sessions: sessionmaker[Session], username: str, like_run: int) -> int:
    """A scored run as the pipeline records it (real scoring of made-up measurements), on a
    new submission of the same upload as `like_run` (a worker without a GPU cannot score)."""
    rubric = load_rubric("hw4")
    fast = RatioSummary(median_baseline_ms=4.0, median_custom_ms=0.5, speedup=8.0, low=7.6, high=8.4, trials=12)
    slow = RatioSummary(median_baseline_ms=1.0, median_custom_ms=0.8, speedup=1.25, low=1.2, high=1.3, trials=20)
    bad = CaseOutcome("lfw-r64h1024", (64, 1024), ok=False, max_err=0.42, where=(3, 17), public=True)
    good = CaseOutcome("case-ok", (8, 64), ok=True, max_err=1e-6)
    measurements = [
        ProblemMeasurement("1.1", routes={"abi": [good, good], "binding": [good]},
                           figures={"student": fast, "reference_ops": fast, "trusted": fast}),
        ProblemMeasurement("1.2", routes={"abi": [good, good], "binding": [good]},
                           figures={"student": slow, "reference_ops": slow, "trusted": slow}),
        ProblemMeasurement("2.1", routes={"abi": [good, bad], "binding": [good]}, first_failure=bad),
        ProblemMeasurement("2.2", status="timeout", log_tail="the child stopped answering"),
    ]
    with session_scope(sessions) as session:
        user = get_or_create_user(session, username, Role.student)
        earlier = session.get(Run, like_run)
        assert earlier is not None
        blob = StoredBlob(sha256=earlier.submission.sha256, size=earlier.submission.size_bytes)
        _sub, run = record_submission(session, user, get_assignment(session, "hw4"), "graded-on-gpu.zip", blob)
        record_scored(run, rubric, measurements)
        run.finished_at = utcnow()
        run.stages = {"build": {"status": "ok", "seconds": 3.2, "log": "nvcc -O3 softmax.cu\nok"}}
        session.flush()
        return run.id


def test_breakdown_of_a_scored_run(context: BrowserContext, sessions: sessionmaker[Session],
                                   screenshot_dir: Path) -> None:
    run_id = STATE["scored_run_id"] = _scored_run(sessions, "amy", STATE["run_id"])
    page = log_in(context, "amy")
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-state")).to_have_text("scored")
    rows = page.locator("#breakdown tbody tr")
    expect(rows).to_have_count(5)
    first = rows.nth(0)
    expect(first).to_contain_text("20 / 20")
    expect(first).to_contain_text("3 of 3 passed")
    expect(first).to_contain_text("8x [7.6, 8.4]")
    expect(first).to_contain_text("vs target")
    expect(rows.nth(2)).to_contain_text("2 of 3 passed")
    expect(page.locator("code.failure")).to_have_text("case lfw-r64h1024, shape 64 × 1024: Largest error 0.42 at index [3, 17].")
    expect(page.get_by_role("heading", name="2.2: where points were lost")).to_be_visible()
    expect(page.get_by_text(re.compile("2.2: timed out"))).to_be_visible()
    # The speedup and its 95% interval against the target, drawn on the server (inline SVG).
    chart = first.locator("svg.speedup-chart")
    expect(chart).to_have_count(1)
    expect(chart.locator("title")).to_have_text(re.compile(r"^Speedup 8x, 95% interval 7\.6 to 8\.4; target [\d.]+x, met"))
    expect(rows.nth(1).locator("svg.speedup-chart title")).to_contain_text("not met")
    expect(rows.nth(3).locator("svg")).to_have_count(0)  # timed out: nothing measured, no chart
    # Every problem that lost points says why.
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td")
        points, out_of = (float(v) for v in cells.nth(0).inner_text().split(" / "))
        if points < out_of:
            problem = rows.nth(i).locator("th").inner_text().split()[0]
            reasons = page.locator("section.problem", has=page.get_by_role(
                "heading", name=f"{problem}: where points were lost")).locator("li")
            assert reasons.count() >= 1 and reasons.first.inner_text().strip(), problem
    page.screenshot(path=str(screenshot_dir / "run-scored.png"), full_page=True)


def test_compiler_log_with_line_numbers(context: BrowserContext, worker: Any, tmp_path: Path) -> None:
    """A kernel that does not compile: the run page opens nvcc's log, numbered, and names the
    first error by the source file and line the compiler names (linked into the code view at
    that line), and by its line in the log (linked there)."""
    kit = tmp_path / "llmsys_hw4"
    shutil.copytree(load_rubric("hw4").starter_dir, kit, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    source = kit / "src" / "combine.cu"  # every problem needs it: the run fails as a build error
    source.write_text(source.read_text().replace('extern "C"', 'extern "C" not_cuda_at_all;', 1))
    broken_at = next(n for n, text in enumerate(source.read_text().splitlines(), 1) if "not_cuda_at_all" in text)
    page = log_in(context, "amy")
    page.get_by_label(re.compile("Submission")).set_input_files(str(zip_tree(kit, tmp_path / "broken.zip")))
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    expect(page.locator("#run-state")).to_have_text("failed", timeout=300_000)
    expect(page.locator("#run-message")).to_contain_text("combine did not compile")
    log = page.locator("#log-build")
    expect(log).to_be_visible()  # the build stage is open
    first = page.locator("#log-build").locator("xpath=..").locator("p.first-error")
    expect(first).to_contain_text(re.compile(rf"^First error: src/combine\.cu, line {broken_at}: \S"))
    jump = first.get_by_role("link", name=re.compile(r"^line \d+ of the build log$"))
    line = int(jump.inner_text().split()[1])
    assert line != broken_at  # the log's own numbering is not the source's
    jump.click()
    target = page.locator(f"#log-build-{line}")
    expect(target).to_contain_text(re.compile(r"combine\.cu\(\d+\): error"))
    assert target.evaluate("el => el.matches(':target') && el.classList.contains('err')")
    # The number a student reads is the list's own: the line's position in the ordered list.
    assert log.locator("li").nth(line - 1).get_attribute("id") == f"log-build-{line}"
    # Nothing graded: one banner says why, in words, instead of five rows of "not graded: build_error".
    expect(page.get_by_role("region", name="Not graded")).to_contain_text(
        "No problem could be graded because the kernels did not build (a build error)")
    expect(page.locator("#breakdown")).to_have_count(0)
    # The source's line: the code view opens the file the compiler names, at that line.
    first.get_by_role("link", name=f"src/combine.cu, line {broken_at}").click()
    expect(page.locator("#file-title")).to_have_text(re.compile(r"^\w+/src/combine\.cu$"))
    source_line = page.locator(f"ol.code li#L{broken_at}")
    expect(source_line).to_contain_text("not_cuda_at_all")
    assert source_line.evaluate("el => el.matches(':target')")


def test_another_student_gets_404(context: BrowserContext) -> None:
    run_id = STATE["run_id"]
    page = log_in(context, "ben")
    response = page.goto(f"/runs/{run_id}")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    assert context.request.get(f"/runs/{run_id}/status").status == 404
    assert page.goto("/gradebook").status == 403  # type: ignore[union-attr]  # a student of the course
    # ben's history does not list amy's run.
    page.goto("/submissions")
    expect(page.get_by_role("link", name=f"Run {run_id}")).to_have_count(0)


def test_instructor_gradebook_and_regrade(context: BrowserContext, sessions: sessionmaker[Session],
                                          screenshot_dir: Path) -> None:
    page = log_in(context, "prof")
    page.get_by_role("link", name="Gradebook").click()
    row = page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name="amy"))
    expect(row).to_have_count(1)
    expect(page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name="ben"))).to_contain_text(
        "no scored run")
    page.screenshot(path=str(screenshot_dir / "gradebook.png"), full_page=True)
    latest = int(row.get_by_role("link", name=re.compile(r"^Run \d+$")).inner_text().split()[-1])
    with session_scope(sessions) as session:
        runs_before = session.scalar(select(func.count()).select_from(Run)) or 0
        submission_id = session.get(Run, latest).submission_id  # type: ignore[union-attr]
    row.get_by_role("button", name=re.compile("the graded one")).click()  # amy uploaded since: two buttons
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    new_id = int(page.url.rsplit("/", 1)[1])
    assert new_id > latest
    expect(page.locator("p.hint", has_text="re-grade")).to_be_visible()
    with session_scope(sessions) as session:
        new = session.get(Run, new_id)
        assert new is not None and new.reason == "regrade" and new.submission_id == submission_id
        assert (session.scalar(select(func.count()).select_from(Run)) or 0) == runs_before + 1


def test_posts_without_the_csrf_token_are_refused(context: BrowserContext, sessions: sessionmaker[Session]) -> None:
    log_in(context, "prof")
    runs_before = count(sessions, Run)
    with session_scope(sessions) as session:
        submission_id = session.scalar(select(func.min(Submission.id)))
    for form in ({}, {"csrf_token": "forged"}):
        refused = context.request.post(f"/submissions/{submission_id}/regrade", form=form, max_redirects=0)
        assert refused.status == 403 and "not sent from a current kernelgrade page" in refused.text()
    assert count(sessions, Run) == runs_before
    # Login and logout forms are covered too.
    assert context.request.post("/login", form={"username": "prof", "password": PASSWORD}).status == 403
    assert context.request.post("/logout", form={}, max_redirects=0).status == 403
    # The session upload checks the token before the file is read: nothing is stored.
    before = count(sessions, Submission)
    upload = context.request.post("/submit", multipart={
        "assignment": "hw4", "file": {"name": "a.zip", "mimeType": "application/zip", "buffer": small_zip()}})
    assert upload.status == 403 and count(sessions, Submission) == before


def test_gradebook_sort_filter_search_charts_and_regrade_selected(
    context: BrowserContext, sessions: sessionmaker[Session],
) -> None:
    page = log_in(context, "prof")
    page.goto("/gradebook")
    expect(page.locator("svg.histogram > title")).to_contain_text("histogram of")
    expect(page.locator("svg.distributions > title")).to_contain_text("1.1:")
    # Search by typing and pressing Enter (keyboard only).
    page.get_by_label("Search student").fill("am")
    page.get_by_label("Search student").press("Enter")
    expect(page.locator("#gradebook tbody th[scope=row]")).to_have_text(["amy"])
    expect(page.locator("#shown")).to_contain_text("Students 1–1 of 1 matching the filters")
    page.get_by_role("link", name="Clear filters").click()
    # Sort by score, best first, by clicking its header; students without a score come last.
    page.locator("#gradebook thead").get_by_role("link", name="Score").click()
    expect(page.locator("#gradebook thead th[aria-sort]")).to_have_attribute("aria-sort", "descending")
    # Other browser tests of the session add hw4 students of their own: amy (scored) is listed
    # before ben (no score), wherever the others fall.
    shown = page.locator("#gradebook tbody th[scope=row]").all_inner_texts()
    assert "amy" in shown and "ben" in shown and shown.index("amy") < shown.index("ben"), shown
    page.get_by_label("Newest run").select_option("none")
    page.get_by_role("button", name="Apply").click()
    names = page.locator("#gradebook tbody th[scope=row]")
    expect(names.filter(has_text="ben")).to_have_count(1)  # ben never uploaded
    expect(names.filter(has_text="amy")).to_have_count(0)
    page.get_by_role("link", name="Clear filters").click()
    # Re-grade the ticked rows only.
    with session_scope(sessions) as session:
        runs_before = session.scalar(select(func.count()).select_from(Run)) or 0
    page.get_by_label(re.compile("^Select amy's submission")).check()
    page.get_by_role("button", name="Re-grade selected").click()
    expect(page.locator("#confirm-question")).to_contain_text("Re-grade 1 ticked submission of 1 student")
    page.get_by_role("button", name="Queue 1 re-grade run").click()
    expect(page.locator("#regrade-notice")).to_have_text("1 re-grade run queued.")
    with session_scope(sessions) as session:
        assert (session.scalar(select(func.count()).select_from(Run)) or 0) == runs_before + 1


def test_instructor_imports_a_roster(context: BrowserContext, worker: Any, screenshot_dir: Path) -> None:
    page = log_in(context, "prof")
    page.get_by_role("link", name="Roster", exact=True).click()
    page.get_by_label("Roster file (.csv)").set_input_files({
        "name": "roster.csv", "mimeType": "text/csv",
        "buffer": b"email,name,section\ngrace@uni.edu,Grace Hopper,B\nalan@uni.edu,Alan Turing,A\nnot an email,X\n"})
    page.get_by_role("button", name="Import students").click()
    page.get_by_role("button", name="Import 2 students").click()  # the confirmation page's
    # a worker imports it in the background; the page follows the job and shows the result
    expect(page.locator("#roster-summary")).to_have_text(re.compile(r"^2 created, 0 updated, 0 unchanged, 1 line"),
                                                         timeout=60_000)
    expect(page.locator("#roster-errors li")).to_have_text(["Line 4: “not an email” is not an email address"])
    expect(page.locator("#roster-created tbody tr")).to_have_count(2)
    page.screenshot(path=str(screenshot_dir / "roster.png"), full_page=True)
    page.goto("/gradebook")
    page.get_by_label("Search student").fill("hopper")
    page.get_by_label("Search student").press("Enter")
    row = page.locator("#gradebook tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Grace Hopper")
    expect(row.locator("th")).to_have_text("grace@uni.edu")


def test_password_change_logs_out_the_other_browsers(browser: Browser, base_url: str,
                                                     sessions: sessionmaker[Session], screenshot_dir: Path) -> None:
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, "cara", Role.student, [get_assignment(session, "hw4").course]),
                     PASSWORD, SUITE_ARGON2)
    laptop, phone = (browser.new_context(base_url=base_url, viewport={"width": 1100, "height": 800})
                     for _ in range(2))
    try:
        other = log_in(phone, "cara")
        expect(other.get_by_role("heading", name="Submit your assignment")).to_be_visible()
        page = log_in(laptop, "cara")
        page.get_by_role("link", name="Password").click()
        expect(page.get_by_role("heading", name="Change your password")).to_be_visible()
        page.get_by_label("Current password").fill(PASSWORD)
        page.get_by_label("New password", exact=True).fill("a brand new passphrase")
        page.get_by_label("New password again").fill("a different passphrase")
        page.get_by_role("button", name="Change password").click()
        expect(page.locator("#password-error")).to_have_text("The two new passwords differ.")
        page.get_by_label("Current password").fill(PASSWORD)
        page.get_by_label("New password", exact=True).fill("a brand new passphrase")
        page.get_by_label("New password again").fill("a brand new passphrase")
        page.get_by_role("button", name="Change password").click()
        expect(page.locator("#password-changed")).to_contain_text("Password changed.")
        page.screenshot(path=str(screenshot_dir / "password.png"))
        page.goto("/submissions")  # this browser stays logged in
        expect(page.get_by_role("heading", name="My submissions")).to_be_visible()
        other.goto("/submissions")  # the other one is logged out
        assert login_fields(other.url) == {"next": ["/submissions"], "ended": ["session"]}
        again = log_in(phone, "cara", "a brand new passphrase")
        expect(again.get_by_role("heading", name="Submit your assignment")).to_be_visible()
    finally:
        laptop.close()
        phone.close()


def test_accessibility_of_the_pages(browser: Browser, base_url: str) -> None:
    """Labels, WCAG AA contrast and keyboard reach with visible focus, on every page."""
    pages = {None: ["/login", "/"],
             "amy": ["/", "/submissions", f"/runs/{STATE['scored_run_id']}", f"/runs/{STATE['run_id']}",
                     "/settings/tokens", "/settings/password"],
             "prof": ["/gradebook", "/roster"]}
    for who, paths in pages.items():
        ctx = browser.new_context(base_url=base_url, viewport={"width": 1100, "height": 800})
        page = log_in(ctx, who) if who else ctx.new_page()
        for path in paths:
            page.goto(path)
            check_page(page)
        ctx.close()
