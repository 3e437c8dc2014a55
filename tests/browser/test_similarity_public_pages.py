"""Known public solutions in a real (headless) Chromium (issue 51): the instructor lists a zip of
a solution found online on the assignment's settings page, computes the similarity report (the
worker reads the listed zip), and the report names that source for the student who handed in a
disguised copy of it, on the page and in the JSON; a source is never ranked as a student. The
source is removed again; adding and removing each leave an audit row. Each page passes the
accessibility checks (tests/browser/a11y.py)."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import AuditEvent, Role, Submission
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from grader.similarity.store import report_path
from grader.storage.blobstore import BlobStore
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess
from worker.rubric import load_rubric
from worker.starter_kit import render_starter, zip_tree

STUDENT = "pub-ana"
PUBLISHED = """\
// softmax, from a blog post
#include "includes/block_reduce.h"
__global__ void blog_softmax(float* inp, const float* mask, int rows, int cols, float scale) {
  int r = blockIdx.x;
  if (r >= rows) return;
  float* x = inp + static_cast<size_t>(r) * cols;
  float best = -1e30f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) { best = fmaxf(best, x[c] * scale + (mask ? mask[c] : 0.f)); }
  __shared__ float shared_best[32];
  shared_best[threadIdx.x % 32] = best;
  __syncthreads();
  for (int k = 0; k < 32; ++k) best = fmaxf(best, shared_best[k]);
  float total = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float e = __expf(x[c] * scale + (mask ? mask[c] : 0.f) - best);
    x[c] = e;
    total += e;
  }
  __shared__ float shared_total[32];
  shared_total[threadIdx.x % 32] = total;
  __syncthreads();
  total = 0.f;
  for (int k = 0; k < 32; ++k) total += shared_total[k];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) { x[c] = x[c] / (total + 1e-6f); }
}
"""


def _kit(tree: Path, softmax: str) -> None:
    """Our kit's student starter with a softmax kernel file of `softmax`."""
    render_starter(load_rubric("hw4").starter_dir, tree)
    (tree / "src" / "softmax_kernel.cu").write_text(softmax)


@pytest.fixture(scope="module")
def public_zip(sessions: sessionmaker[Session], settings: Settings, tmp_path_factory: pytest.TempPathFactory,
               worker: WorkerProcess) -> Iterator[Path]:
    """An instructor; a student whose softmax kernel is the published one renamed and
    re-commented (their submission, inserted here, and the report are removed afterwards); the
    published solution's zip, for the instructor to upload."""
    work = tmp_path_factory.mktemp("public")
    _kit(work / "published", PUBLISHED)
    copied = PUBLISHED.replace("best", "peak").replace("total", "denom").replace("from a blog post", "my own work")
    _kit(work / "student", copied)
    archive = zip_tree(work / "student", work / "llmsys_hw4.zip")
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, "pub-prof", Role.instructor), PASSWORD, SUITE_ARGON2)
        session.add(Submission(user=get_or_create_user(session, STUDENT, Role.student),
                               assignment=get_assignment(session, "hw4"), original_filename=archive.name,
                               size_bytes=blob.size, sha256=blob.sha256))
    yield zip_tree(work / "published", work / "blog-softmax.zip")
    with session_scope(sessions) as session:  # other pages' tests compare their own class
        session.execute(delete(Submission).where(
            Submission.user_id == get_or_create_user(session, STUDENT, Role.student).id))
    report_path(settings.data_dir, "hw4").unlink(missing_ok=True)


def test_a_listed_public_zip_is_named_for_the_student_who_copied_it(
        context: BrowserContext, public_zip: Path, sessions: sessionmaker[Session]) -> None:
    label = f"blog-softmax.zip, sha256 {hashlib.sha256(public_zip.read_bytes()).hexdigest()}"
    page = log_in(context, "pub-prof")
    page.goto("/assignments/hw4/settings")
    expect(page.locator("#no-public")).to_be_visible()
    page.get_by_label("The source's zip").set_input_files(public_zip)
    page.get_by_role("button", name="Add the source").click()
    expect(page.locator("#public-message")).to_have_text(f"Listed {label} (known solution); compute the report again.")
    expect(page.locator("#public-list li")).to_have_count(1)
    expect(page.locator("#public-list li code")).to_have_text(f"{label} (known solution)")
    check_page(page)

    page.goto("/assignments/hw4/similarity")
    expect(page.locator("#public-setting")).to_contain_text(label)
    page.get_by_role("button", name=re.compile("^Compute")).click()
    expect(page.locator("#public-compared")).to_contain_text(label, timeout=120_000)  # the new report's
    row = page.locator("#public-table tbody tr").filter(has=page.get_by_role("rowheader", name=STUDENT, exact=True))
    expect(row.locator("td").first).to_have_text(label)
    expect(row.locator("td").nth(1)).to_have_text("100%")
    expect(row.locator("td").nth(3)).to_contain_text("src/softmax_kernel.cu")
    expect(page.locator("#pairs")).not_to_contain_text("blog-softmax.zip")  # never ranked as a student
    check_page(page)
    body = page.request.get("/assignments/hw4/similarity.json").json()
    assert body["public_sources"] == [label]
    mine = [m for m in body["public_matches"] if m["student"] == STUDENT]
    assert len(mine) == 1 and mine[0]["source"] == label and mine[0]["score"] == 1.0, mine
    assert label not in body["submissions"] and all(label not in (p["a"], p["b"]) for p in body["pairs"])

    _relist_as_common_code(page, label, public_zip)
    page.goto("/assignments/hw4/similarity")
    page.get_by_role("button", name=re.compile("^Compute")).click()
    expect(page.locator("#common-compared")).to_contain_text(label, timeout=120_000)  # the new report's
    expect(page.locator("#no-public")).to_be_visible()
    check_page(page)
    body = page.request.get("/assignments/hw4/similarity.json").json()
    assert body["common_sources"] == [label] and body["public_sources"] == [] and body["public_matches"] == []

    page.goto("/assignments/hw4/settings")
    page.get_by_role("button", name=f"Remove the listed source {label} (common code, left out)").click()
    expect(page.locator("#public-message")).to_have_text(
        f"{label} (common code, left out) is no longer listed; compute the report again.")
    expect(page.locator("#no-public")).to_be_visible()
    check_page(page)
    with session_scope(sessions) as session:
        details = session.scalars(select(AuditEvent.detail).where(AuditEvent.detail.contains(label)).order_by(AuditEvent.id)).all()
    assert details == [f"assignment hw4: similarity source listed: {label} (known solution)",
                       f"assignment hw4: similarity source removed: {label} (known solution)",
                       f"assignment hw4: similarity source listed: {label} (common code, left out)",
                       f"assignment hw4: similarity source removed: {label} (common code, left out)"]


def _relist_as_common_code(page: Page, label: str, public_zip: Path) -> None:
    """The same zip taken off as a solution and listed again as common code."""
    page.goto("/assignments/hw4/settings")
    page.get_by_role("button", name=f"Remove the listed source {label} (known solution)").click()
    expect(page.locator("#public-message")).to_have_text(f"{label} (known solution) is no longer listed; compute the report again.")
    page.get_by_label("The source's zip").set_input_files(public_zip)
    page.get_by_label("Its role").select_option("common")
    page.get_by_role("button", name="Add the source").click()
    expect(page.locator("#public-message")).to_have_text(f"Listed {label} (common code, left out); compute the report again.")
    check_page(page)
