"""The site administrators' GPU workers page in Chromium (issue 52): reached from /ops/lti's site
operations links, it lists a GPU that its host's supervisor left out and the faults before it,
and passes the accessibility checks (tests/browser/a11y.py). The rows are written by the
supervisor's own recorder (grader.gpu_events.record_event); a real supervisor writing them is
tests/service/test_gpu_worker_faults.py's."""
from __future__ import annotations

import uuid

from playwright.sync_api import BrowserContext, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.gpu_events import record_event
from grader.gpu_workers import Gpu, WorkerEvent
from grader.models import Role
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2


def test_a_site_admin_finds_the_left_out_gpu(context: BrowserContext, sessions: sessionmaker[Session]) -> None:
    tag = uuid.uuid4().hex[:6]
    host, gpu = f"rack-{tag}", Gpu(3, f"GPU-{tag}")
    with session_scope(sessions) as db:
        admin = get_or_create_user(db, f"gwp-adm-{tag}", Role.student, [])
        admin.site_admin = True
        set_password(admin, PASSWORD, SUITE_ARGON2)
    for event in (WorkerEvent(gpu, "started"), WorkerEvent(gpu, "restarted", -9, 1),
                  WorkerEvent(gpu, "left_out", 1, 1)):
        assert record_event(sessions, host, event)
    page = log_in(context, f"gwp-adm-{tag}")
    page.goto("/ops/lti")
    page.get_by_role("navigation", name="Site operations").get_by_role("link", name="GPU workers").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("GPU workers")
    out = page.locator("#gpus-out tbody tr").filter(has_text=host)
    expect(out).to_contain_text(f"GPU-{tag}")
    expect(out).to_contain_text("Worker exited with code 1 after 1 restart in a row: GPU left out")
    faults = page.locator("#gpu-faults tbody tr").filter(has_text=host)
    expect(faults).to_have_count(2)
    expect(faults.nth(0)).to_contain_text("GPU left out")
    expect(faults.nth(1)).to_contain_text("killed by signal 9 (SIGKILL): restarted (restart 1 in a row)")
    check_page(page)
