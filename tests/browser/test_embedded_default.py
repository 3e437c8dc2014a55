"""The embedded default in a real browser: `grader dev` (SQLite, the SQLite broker, one worker
and the reconciler, all on this machine, as README's first command starts it), a student and
an instructor driving Chromium through it end to end.

Student: log in with the password `grader dev` printed, upload the reference kit, watch the
run reach its final state without reloading, read the build log. Instructor: the gradebook
lists the student, the CSV export downloads with the student's row, a re-grade queues a new
run that also ends final, and the similarity report is computed in the background (the one
worker takes the similarity queue too) against the rubric's base. The other browser tests use
PostgreSQL and Redis; this one proves the same journeys on the default a new machine gets.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from worker.rubric import load_rubric
from worker.starter_kit import zip_tree

GRADER = Path(sys.executable).with_name("grader")
FINAL = re.compile("^(built|scored|failed)$")


class EmbeddedService:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.port = port
        self.log_path = data_dir.parent / "grader-dev.log"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("KG_")}, "KG_DATA_DIR": str(data_dir)}
        self.proc = subprocess.Popen([str(GRADER), "dev", "--no-demo", "--port", str(port)], env=env,
                                     stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.passwords = self._wait_for_passwords()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def _wait_for_passwords(self) -> dict[str, str]:
        """The passwords `grader dev` printed, once it answers on its port."""
        deadline = time.monotonic() + 120
        while True:
            found = re.search(r"log in as student / (\S+)\s+or\s+instructor / (\S+)", self.log())
            if found and self._answers():
                return {"student": found.group(1), "instructor": found.group(2)}
            assert self.proc.poll() is None, f"grader dev exited: {self.log()}"
            assert time.monotonic() < deadline, f"grader dev did not come up: {self.log()}"
            time.sleep(0.3)

    def _answers(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedService]:
    service = EmbeddedService(tmp_path_factory.mktemp("embedded") / "var", free_port())
    yield service
    service.stop()


def log_in(browser: Browser, service: EmbeddedService, username: str) -> Page:
    context = browser.new_context(base_url=f"http://127.0.0.1:{service.port}", accept_downloads=True)
    # Generous: on a 2-core machine the service builds the kit (three nvcc at once) while
    # the browser logs in; one CI run saw the login's navigation pass 20 s.
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(service.passwords[username])
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    return page


def test_student_and_instructor_on_the_embedded_default(browser: Browser, embedded: EmbeddedService,
                                                         tmp_path: Path) -> None:
    student = log_in(browser, embedded, "student")
    student.get_by_role("link", name="My submissions").click()
    expect(student.get_by_text("No submissions yet.")).to_be_visible()  # --no-demo: nothing uploaded for them
    student.goto("/")
    archive = zip_tree(load_rubric("hw4").starter_dir, tmp_path / "llmsys_hw4.zip")
    student.get_by_label(re.compile("Submission")).set_input_files(str(archive))
    student.get_by_role("button", name="Upload and grade").click()
    student.wait_for_url(re.compile(r"/runs/\d+$"))
    run_id = int(student.url.rsplit("/", 1)[1])
    expect(student.locator("#run-state")).to_have_text(FINAL, timeout=600_000)
    # No GPU on this machine: the run ends `built`, with its numbered build log.
    assert student.locator("#run-state").inner_text() == "built", embedded.log()
    assert student.locator("#log-build li").count() > 0

    instructor = log_in(browser, embedded, "instructor")
    instructor.get_by_role("link", name="Gradebook").click()
    row = instructor.locator("#gradebook tbody tr", has=instructor.get_by_role("rowheader", name="student"))
    expect(row).to_have_count(1)  # a built run scores nothing, but the student is listed
    with instructor.expect_download() as download:
        instructor.get_by_role("link", name=re.compile("CSV")).first.click()
    csv_text = Path(download.value.path()).read_text()
    assert "student" in csv_text, csv_text[:500]

    row.get_by_role("button", name=re.compile("Re-grade")).click()
    instructor.wait_for_url(re.compile(r"/runs/\d+$"))
    regrade_id = int(instructor.url.rsplit("/", 1)[1])
    assert regrade_id > run_id
    expect(instructor.locator("#run-state")).to_have_text(FINAL, timeout=300_000)
    assert instructor.locator("#run-state").inner_text() == "built", embedded.log()
    # The student sees the re-grade in their history; nothing of it needed a reload.
    student.get_by_role("link", name="My submissions").click()
    expect(student.get_by_role("link", name=f"Run {regrade_id}")).to_be_visible()
    assert "demo:" not in embedded.log_path.read_text(errors="replace")  # the demo never ran

    instructor.goto("/assignments/hw4/similarity")
    instructor.get_by_role("button", name="Compute the report").click()
    expect(instructor.locator("#report-summary")).to_contain_text("over 1 students", timeout=180_000)
    # the rubric's default base, or our kit's when it cannot be fetched (this machine may be offline)
    expect(instructor.locator("#report-base")).to_contain_text(load_rubric("hw4").similarity_base or "")
