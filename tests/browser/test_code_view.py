"""The submitted code in a real (headless) Chromium, at a phone's width and a laptop's: a
student opens the code view from the history and from the run page, reads a highlighted file
and another one, and downloads the zip (the very bytes uploaded); staff go from the
gradebook's Uploads count to the student's history and on to the code. No page scrolls
sideways and each passes the accessibility checks (tests/browser/a11y.py)."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, RunState, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.browser.a11y import check_page
from tests.browser.test_layout import WIDTHS, _assert_no_page_scroll
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.hostile_zips import make_zip
from tests.fixtures.passwords import SUITE_ARGON2

TAG = uuid.uuid4().hex[:6]
STUDENT, STAFF = f"code-view-student-{TAG}@university.edu", f"code-view-prof-{TAG}"
FILENAME = "hw4_submission_with_a_rather_long_name_final_v2.zip"
# Code of this test's own (no other test's student has it: the similarity report stays as it was).
LONG = "    float scaled_value_" + TAG + " = input[row * stride + col] * inverse_temperature_for_this_block;  " * 4
ARCHIVE = make_zip([
    ("llmsys_hw4/src/softmax_kernel.cu", f"// softmax {TAG}\n#include <cuda.h>\n__global__ void softmax_{TAG}("
                                         f"float* input) {{\n{LONG}\n}}\n".encode()),
    ("llmsys_hw4/src/layernorm_kernel.cu", f"__global__ void layernorm_{TAG}() {{ return; }}\n".encode()),
    ("llmsys_hw4/src/combine.cu", f'extern "C" void combine_{TAG}() {{}}\n'.encode()),
    ("llmsys_hw4/minitorch/cuda_kernel_ops.py", f"def bind_{TAG}():\n    return None  # {TAG}\n".encode()),
    ("llmsys_hw4/README.md", f"Notes of {TAG}: nothing here is graded.\n".encode()),
    ("llmsys_hw4/data/" + "a_very_long_folder_name_for_measurements/" * 3 + "results.csv", b"n,ms\n1,2\n"),
])


@pytest.fixture(scope="module")
def submitted(sessions: sessionmaker[Session], settings: Settings) -> dict[str, Any]:
    blob = BlobStore(settings.blob_dir).put_bytes(ARCHIVE)
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        student = get_or_create_user(session, STUDENT, Role.student, [hw4.course])
        set_password(student, PASSWORD, SUITE_ARGON2)
        set_password(get_or_create_user(session, STAFF, Role.instructor, [hw4.course]), PASSWORD, SUITE_ARGON2)
        sub, run = record_submission(session, student, hw4, FILENAME, blob)
        run.state, run.finished_at, run.message = RunState.built, utcnow(), "Built; not run on a GPU."
        session.flush()
        return {"submission": sub.id, "run": run.id}


def _fits(page: Any, width: int) -> None:
    _assert_no_page_scroll(page, width)
    check_page(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_student_reads_the_code_and_downloads_the_zip(browser: Browser, base_url: str, submitted: dict[str, Any],
                                                      width: int, screenshot_dir: Path) -> None:
    context = browser.new_context(base_url=base_url, viewport={"width": width, "height": 844},
                                  accept_downloads=True)
    page = log_in(context, STUDENT)
    page.goto("/submissions")
    page.get_by_role("link", name=f"Code of submission {submitted['submission']}").click()
    expect(page).to_have_url(f"{base_url}/submissions/{submitted['submission']}/code")
    expect(page.get_by_role("heading", name="Submitted code")).to_be_visible()
    expect(page.locator("#file-title")).to_have_text("llmsys_hw4/src/softmax_kernel.cu")  # the first graded file
    expect(page.locator("ol.code .tok-k", has_text="__global__")).to_be_visible()  # highlighted on the server
    expect(page.locator("ol.code li")).to_have_count(5)
    readme = page.locator("#zip-files tr", has_text="README.md")
    expect(readme).to_contain_text("not taken")
    expect(page.locator("#zip-files tr", has_text="combine.cu")).to_contain_text("graded")
    _fits(page, width)
    page.screenshot(path=str(screenshot_dir / f"code-view-{width}.png"), full_page=True)

    readme.get_by_role("link").click()
    expect(page.locator("ol.code")).to_contain_text(f"Notes of {TAG}: nothing here is graded.")
    _fits(page, width)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the zip as uploaded").click()
    assert download.value.suggested_filename == FILENAME
    assert open(download.value.path(), "rb").read() == ARCHIVE

    page.goto(f"/runs/{submitted['run']}")  # the run page links to the same view
    page.get_by_role("link", name="Submitted code").click()
    expect(page.locator("#file-title")).to_have_text("llmsys_hw4/src/softmax_kernel.cu")
    context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_staff_open_a_students_history_from_the_gradebook(browser: Browser, base_url: str, submitted: dict[str, Any],
                                                          width: int, screenshot_dir: Path) -> None:
    context = browser.new_context(base_url=base_url, viewport={"width": width, "height": 844})
    page = log_in(context, STAFF)
    page.goto(f"/gradebook?assignment=hw4&q={STUDENT}")
    page.get_by_role("link", name=f"1 uploads: history of {STUDENT}").click()
    expect(page.get_by_role("heading", name=f"History of {STUDENT}")).to_be_visible()
    row = page.locator("#student-history tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(FILENAME)
    expect(row).to_contain_text(f"Run {submitted['run']}: built")
    expect(page.locator("#counted")).to_contain_text("no run is scored yet")
    _fits(page, width)
    page.screenshot(path=str(screenshot_dir / f"student-history-{width}.png"), full_page=True)
    row.get_by_role("link", name=f"Code of submission {submitted['submission']}").click()
    expect(page.locator("ol.code .tok-k", has_text="__global__")).to_be_visible()
    _fits(page, width)
    context.close()
