"""The run page's GPU time by phase in Chromium: the course's staff open it at a phone's width
(390 px) and a laptop's, the table scrolls inside its own box (never the page), and the page
passes the accessibility checks open; the student's page has no such box."""
from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role
from grader.passwords import set_password
from grader.service import get_assignment
from tests.browser.a11y import check_page
from tests.browser.test_layout import OVERFLOW_JS
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_run_gpu_time import scored_run_with_phases


@pytest.mark.parametrize("width", (390, 1280))
def test_staff_open_the_gpu_time_and_the_student_has_none(
    browser: Browser, base_url: str, sessions: sessionmaker[Session], width: int,
) -> None:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        student = get_or_create_user(session, f"gt-stu-{tag}", Role.student, [hw4.course])
        prof = get_or_create_user(session, f"gt-prof-{tag}", Role.instructor, [hw4.course])
        for user in (student, prof):
            set_password(user, PASSWORD, SUITE_ARGON2)
        run_id = scored_run_with_phases(session, student)
    viewport = {"width": width, "height": 844 if width < 600 else 800}

    staff = browser.new_context(base_url=base_url, viewport=viewport)
    page = log_in(staff, f"gt-prof-{tag}")
    page.goto(f"/runs/{run_id}")
    box = page.locator("#gpu-time")
    box.locator("summary").click()
    expect(box.get_by_role("row", name="timing (one after another) 9.0 11.0 10.0 30.0")).to_be_visible()
    seen = page.evaluate(OVERFLOW_JS)
    assert seen["page"] <= width, f"the run page at {width} px is {seen['page']} px wide: {seen['out']}"
    check_page(page)
    staff.close()

    own = browser.new_context(base_url=base_url, viewport=viewport)
    page = log_in(own, f"gt-stu-{tag}")
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#breakdown")).to_be_visible()
    expect(page.locator("#gpu-time")).to_have_count(0)
    own.close()
