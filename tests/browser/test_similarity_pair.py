"""The similarity pair view in a real (headless) Chromium at 1280 px: two students share a
kernel file with a very long line, far down the file; the side by side wraps it, the page has
no horizontal scroll, the shared lines are highlighted on both sides, every line's number is on
screen, and each side opens scrolled to its first shared line; at 390 px the pair and the
ranking still fit the window."""
from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Submission
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from grader.similarity.store import report_path
from grader.storage.blobstore import BlobStore
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess
from worker.rubric import load_rubric
from worker.starter_kit import zip_tree

STUDENTS = ("wide-ana", "wide-ben")
# Of one side's box: the first shared line's number, whether it is in view, how far the box is
# scrolled, and whether each line number in view is drawn inside the box.
SEEN_JS = """(pre) => {
  const box = pre.getBoundingClientRect();
  const hit = pre.querySelector(".hit");
  const inView = (r) => r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5;
  const numbers = [...pre.querySelectorAll(".n")].filter((n) => inView(n.getBoundingClientRect())).map((n) => {
    const glyphs = document.createRange();  // where the number's own text is drawn
    glyphs.selectNodeContents(n);
    const r = glyphs.getBoundingClientRect();
    return r.width > 0 && r.left >= box.left - 0.5 && r.right <= box.right + 0.5;
  });
  return { firstHit: Number(hit.querySelector(".n").textContent), hitShown: inView(hit.getBoundingClientRect()),
           scrollTop: pre.scrollTop, numbers };
}"""
LONG_LINE = "  float wide_" + " + ".join(f"inp[{i}] * {i}.5f" for i in range(40)) + ";\n"


@pytest.fixture(scope="module", autouse=True)
def wide_pair(sessions: sessionmaker[Session], settings: Settings, tmp_path_factory: pytest.TempPathFactory,
              worker: WorkerProcess) -> Iterator[None]:
    """An instructor, and two students with the same kit whose softmax kernel has a long line
    (the worker computes the report); their submissions and the report computed here are
    removed afterwards."""
    work = tmp_path_factory.mktemp("wide")
    tree = work / "kit"
    shutil.copytree(load_rubric("hw4").starter_dir, tree)
    kernel = tree / "src" / "softmax_kernel.cu"
    text = kernel.read_text()
    at = text.index("{", text.index("ker_attn_softmax(")) + 1
    notes = "".join(f"// a note of the students' own, line {n}\n" for n in range(1, 151))  # no code: not shared
    kernel.write_text(notes + text[:at] + "\n" + LONG_LINE + text[at:])
    archive = zip_tree(tree, work / "llmsys_hw4.zip")
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, "wide-prof", Role.instructor), PASSWORD, SUITE_ARGON2)
        for name in STUDENTS:
            session.add(Submission(user=get_or_create_user(session, name, Role.student),
                                   assignment=get_assignment(session, "hw4"), original_filename=archive.name,
                                   size_bytes=blob.size, sha256=blob.sha256))
    yield
    with session_scope(sessions) as session:  # other pages' tests compare their own class
        for name in STUDENTS:
            session.execute(delete(Submission).where(Submission.user_id == get_or_create_user(session, name, Role.student).id))
    report_path(settings.data_dir, "hw4").unlink(missing_ok=True)


def test_a_pair_fits_1280_px_without_horizontal_scroll(browser: Browser, base_url: str) -> None:
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    try:
        page = log_in(context, "wide-prof")
        page.goto("/assignments/hw4/similarity")
        page.get_by_role("button", name=re.compile("Compute")).click()
        expect(page.locator("#report-summary")).to_contain_text("students", timeout=120_000)
        row = page.locator("#pairs tbody tr").filter(has_text=f"{STUDENTS[0]} and {STUDENTS[1]}")
        row.get_by_role("link", name=re.compile("Side by side")).click()
        expect(page.get_by_role("heading", level=1)).to_contain_text(f"{STUDENTS[0]} and {STUDENTS[1]}")
        expect(page.locator("pre[data-side=a]", has_text="wide_inp[0] * 0.5f + inp[1]")).to_be_visible()
        expect(page.locator("pre[data-side=b] .hit").first).to_be_visible()
        widths = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert widths[0] <= widths[1], widths
        for side in ("a", "b"):
            pre = page.locator(f"pre[data-side={side}]", has_text="wide_inp[0] * 0.5f + inp[1]")
            assert pre.evaluate("e => e.scrollWidth <= e.clientWidth"), side  # the long line wraps
            seen = pre.evaluate(SEEN_JS)
            assert seen["firstHit"] > 150 and seen["scrollTop"] > 0, (side, seen)  # opened at the shared region
            assert seen["hitShown"], (side, seen)
            assert seen["numbers"] and all(seen["numbers"]), (side, seen)  # every line number on screen
            assert pre.locator(".hit", has_text="BEGIN SOLUTION").count() == 0  # a starter's marker is no evidence
        expect(page.locator(".base-file").first).to_contain_text(re.compile(
            r"^Compared against (the base's src/\w+\.cu, sha256 [0-9a-f]{16}|no src/\w+\.cu in the base)\.$"))
        expect(page.locator("#pair-extent")).to_contain_text(re.compile(r"^Its strongest matches share \d+ lines, the longest run \d+ lines\.$"))
        # On a phone: the pair and the ranking (its table scrolls in its own box) fit the window.
        page.set_viewport_size({"width": 390, "height": 800})
        for address in (page.url, "/assignments/hw4/similarity"):
            page.goto(address)
            widths = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            assert widths[0] <= widths[1], (address, widths)
    finally:
        context.close()
