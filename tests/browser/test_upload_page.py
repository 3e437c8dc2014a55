"""The upload page says what is graded before anything is sent: the files looked for, each
problem's points, its speed floor and target from the rubric, and the targets calibrated on a
GPU model where staff stored some."""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from grader.course.deadlines import LatePolicy
from grader.course.membership import get_or_create_user
from grader.course.policies import set_schedule
from grader.db import session_scope
from grader.models import Assignment, Course, GpuCalibration, Role, utcnow
from grader.passwords import set_password
from grader.service import get_assignment
from tests.browser.a11y import check_page
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import random_zip
from worker.rubric import load_rubric

PASSWORD = "correct horse battery"


@pytest.fixture
def calibrated_gpu(sessions: sessionmaker[Session]) -> Iterator[str]:
    """A calibration of hw4 on a GPU model of this test's own, removed afterwards."""
    gpu = f"Test GPU {uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        session.add(GpuCalibration(assignment_id=get_assignment(session, "hw4").id, gpu_name=gpu,
                                   targets={"1.1": 5.25, "1.2": 4.0}, margin=0.9))
    yield gpu
    with session_scope(sessions) as session:
        session.execute(delete(GpuCalibration).where(GpuCalibration.gpu_name == gpu))


def test_the_rubric_and_targets_are_shown_before_uploading(context: BrowserContext, sessions: sessionmaker[Session],
                                                           calibrated_gpu: str) -> None:
    name = f"rubric-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    rubric = load_rubric("hw4")
    section = page.locator("#rubric-hw4")
    expect(page.get_by_role("heading", name="What is graded")).to_be_visible()
    points = f"{sum(p.points for p in rubric.problems):g} points"
    expect(section.locator("summary")).to_have_text(re.compile(rf".+: .+ \(hw4\), {points}$"))  # course and title
    expect(section).to_contain_text("src/softmax_kernel.cu, src/layernorm_kernel.cu, src/combine.cu")
    rows = section.locator("tbody tr")
    expect(rows).to_have_count(len(rubric.problems))
    first = rubric.problems[0]
    cells = rows.first.locator("td")
    expect(rows.first.locator("th")).to_have_text(f"{first.id} {first.title}")
    expect(cells.nth(0)).to_have_text(f"{first.points:g}")
    expect(cells.nth(1)).to_have_text(
        f"{first.scoring.correctness_points:g} ({first.scoring.hidden_points:g} from hidden edge cases)")
    expect(cells.nth(3)).to_have_text(f"{first.scoring.speed_floor:g}x")
    expect(cells.nth(4)).to_have_text(f"{first.scoring.target:.3g}x")
    expect(section.locator(".calibrated")).to_have_text(
        f"Graded on {calibrated_gpu}, the targets measured on that GPU apply instead: 1.1 5.25x, 1.2 4x.")


def _own_assignment(sessions: sessionmaker[Session], prefix: str, policy: LatePolicy | None = None) -> tuple[str, str]:
    """An assignment of the test's own whose grading is paused (an upload is stored, never
    graded), with `policy`, and a student of it alone: (slug, login)."""
    tag = uuid.uuid4().hex[:6]
    slug, name = f"{prefix}-{tag}", f"{prefix}-stu-{tag}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=slug, title=f"{prefix} {tag}", total_points=100, grading_paused=True,
                               course=Course(slug=slug, title=f"{prefix} {tag}")))
        session.flush()
        if policy is not None:
            set_schedule(session, slug, policy, "latest")
        set_password(get_or_create_user(session, name, Role.student, [get_assignment(session, slug).course]),
                     PASSWORD, SUITE_ARGON2)
    return slug, name


def test_a_student_in_two_courses_picks_by_course_and_title(context: BrowserContext,
                                                             sessions: sessionmaker[Session]) -> None:
    """Two courses, each with its assignment: the form lists each by its course and title (not
    a bare slug), and the one picked is sent by its slug."""
    tag = uuid.uuid4().hex[:6]
    name = f"two-{tag}"
    with session_scope(sessions) as session:
        courses = [Course(slug=f"{c}-{tag}", title=title) for c, title in (("gpu", "GPU Programming"),
                                                                           ("ml", "ML Systems"))]
        for course, (slug, title) in zip(courses, ((f"vec-{tag}", "Vector add"), (f"red-{tag}", "Reduction")),
                                         strict=True):
            session.add(Assignment(slug=slug, title=title, total_points=10, grading_paused=True, course=course))
        session.flush()
        set_password(get_or_create_user(session, name, Role.student, courses), PASSWORD, SUITE_ARGON2)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    options = page.get_by_label("Assignment").locator("option")
    expect(options).to_have_text([f"ML Systems: Reduction (red-{tag})", f"GPU Programming: Vector add (vec-{tag})"])
    page.get_by_label("Assignment").select_option(label=f"GPU Programming: Vector add (vec-{tag})")
    assert page.get_by_label("Assignment").input_value() == f"vec-{tag}"
    expect(page.locator(f"#deadline-vec-{tag} strong")).to_have_text(f"GPU Programming: Vector add (vec-{tag})")
    check_page(page)


@pytest.fixture
def due_soon(sessions: sessionmaker[Session]) -> tuple[str, str]:
    """Due in 1 h 2 min (hw4 keeps no due date)."""
    return _own_assignment(sessions, "soon", LatePolicy(due_at=utcnow() + timedelta(hours=1, minutes=2)))


def _seconds(text: str) -> int:
    """`1 h 1 min 59 s until the due time` in seconds."""
    sizes = {"d": 86400, "h": 3600, "min": 60, "s": 1}
    return sum(int(n) * sizes[unit] for n, unit in re.findall(r"(\d+) (d|h|min|s)\b", text))


def test_time_left_counts_down_from_the_servers_value(context: BrowserContext, due_soon: tuple[str, str]) -> None:
    """The browser's own clock is a year off: the countdown starts from the seconds the server
    sent and counts the time elapsed since the page loaded (a fake clock moves it here)."""
    slug, name = due_soon
    page = context.new_page()
    page.clock.install(time=datetime(2031, 6, 1, 12, 0, tzinfo=UTC))
    page.goto("/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    left = page.locator(f"#deadline-{slug} .time-left")
    expect(left).to_contain_text(re.compile(r"^Time left: 1 h 1 min \d+ s until the due time\.$"))
    start = _seconds(left.inner_text())
    assert 3600 + 60 < start <= 3600 + 120, start
    page.clock.run_for(5_000)  # the fake clock also flows in real time: at least 5 s less, soon
    deadline = time.monotonic() + 10
    while (now := _seconds(left.inner_text())) > start - 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert start - 15 <= now <= start - 5, (start, now)
    page.clock.run_for((start - 5) * 1000)
    expect(left).to_have_text("Time left: 0 s until the due time (reload the page to see what applies now).")


# Kept across the navigation to the run page: every progress sentence the page showed.
RECORD_PROGRESS = """(() => {
  const seen = () => JSON.parse(sessionStorage.getItem("seen") || "[]");
  document.addEventListener("DOMContentLoaded", () => {
    const sent = document.querySelector("#upload-progress .sent");
    if (!sent) return;
    new MutationObserver(() => {
      const bar = document.querySelector("#upload-progress progress");
      sessionStorage.setItem("seen", JSON.stringify([...seen(), [sent.textContent, bar.value]]));
    }).observe(sent, { childList: true, characterData: true, subtree: true });
  });
})()"""


@pytest.fixture
def paused(sessions: sessionmaker[Session]) -> tuple[str, str]:
    return _own_assignment(sessions, "prog")


def test_an_upload_shows_its_progress_and_a_refusal_keeps_the_file(context: BrowserContext,
                                                                   paused: tuple[str, str]) -> None:
    slug, name = paused
    page = context.new_page()
    page.add_init_script(RECORD_PROGRESS)
    page.goto("/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    picker = page.get_by_label(re.compile("Submission"))
    # Refused by the server (not a zip inside): the words on this same form, the file still chosen.
    picker.set_input_files({"name": "fake.zip", "mimeType": "application/zip", "buffer": b"hello, not a zip"})
    page.get_by_role("button", name="Upload and grade").click()
    expect(page.locator("#upload-error")).to_contain_text("“fake.zip” is not a zip file")
    assert urlsplit(page.url).path == "/"
    assert picker.evaluate("el => [...el.files].map((f) => f.name)") == ["fake.zip"]
    assert page.get_by_label("Assignment").input_value() == slug
    expect(page.get_by_role("button", name="Upload and grade")).to_be_enabled()
    expect(page.locator("#upload-progress")).to_be_hidden()
    check_page(page)
    # A 1.5 MiB zip at 1 MiB/s: the page says how much is sent, then that the server checks it.
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1,
                                                  "uploadThroughput": 1024 * 1024})
    picker.set_input_files({"name": "big.zip", "mimeType": "application/zip",
                            "buffer": random_zip(3 * 512 * 1024)})
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    seen = page.evaluate("() => JSON.parse(sessionStorage.getItem('seen') || '[]')")
    partial = [(words, value) for words, value in seen if re.fullmatch(r"Sent \d+% \(\d\.\d of 1\.5 MiB\)", words)]
    assert any(0 < value < 100 for _, value in partial), seen
    assert [value for _, value in partial] == sorted(value for _, value in partial), seen
    assert seen[-1] == ["Sent; the server is checking and storing it…", 100], seen
