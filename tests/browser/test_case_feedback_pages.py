"""The run page's per-case feedback in Chromium (issue 18), on runs recorded as the pipeline
records them (tests/fixtures/feedback_runs.py): each problem's cases in a box that opens, a card
per case at phone width, hidden cases as the rubric's disclosure setting says,
"partial" at 14 of 20, and one banner in words for a run that graded nothing."""
from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy.orm import Session, sessionmaker

import grader.pages.run_view
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ErrorClass, Role, RunState
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_layout import OVERFLOW_JS
from tests.fixtures.feedback_runs import scored_run, ungraded_run, withheld
from tests.fixtures.passwords import SUITE_ARGON2
from worker.rubric import load_rubric

PASSWORD = "feedback horse battery"


@pytest.fixture(scope="module")
def student(sessions: sessionmaker[Session]) -> str:
    name = f"bfeed-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    return name


def log_in(context: BrowserContext, username: str) -> Page:
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    return page


def test_cases_statuses_and_phone_width(browser: Browser, base_url: str, sessions: sessionmaker[Session],
                                        student: str) -> None:
    run_id = scored_run(sessions, student)
    context = browser.new_context(base_url=base_url, viewport={"width": 390, "height": 800})
    try:
        page = log_in(context, student)
        page.goto(f"/runs/{run_id}")
        statuses = page.locator("#breakdown tbody tr td:nth-child(3)")
        expect(statuses).to_have_text(["partial", "passed", "partial", "failed", "not graded"])
        expect(page.locator("#breakdown tbody tr").nth(2)).to_contain_text("14 / 20")
        # A problem with a failed case opens its box; one whose cases all passed opens on a click.
        failed = page.locator("#cases-1\\.1")
        expect(failed.locator("tbody tr").nth(2).locator("th, td")).to_have_text(
            ["sfw-b3h5f7t1-nofut-pad (hidden)", "3 × 5 × 7 × 1", "C ABI", "failed",
             "Largest error 0.5 at index [2, 4, 6, 0]; values off where to_len is 1."])
        passed = page.locator("#cases-1\\.2")
        expect(passed.locator("table")).to_be_hidden()
        passed.locator("summary").click()
        expect(passed.locator("tbody tr")).to_have_count(2)
        expect(passed.locator("tbody tr").first).to_contain_text("passed")
        expect(page.locator("#cases-3")).to_have_count(0)  # not measured
        # Each case is a card as wide as the phone: neither the page nor the case table's box scrolls.
        seen = page.evaluate(OVERFLOW_JS)
        assert seen["page"] <= 390, seen
        box = failed.locator(".scroll-x")
        assert box.evaluate("el => el.scrollWidth <= el.clientWidth")
        check_page(page)
    finally:
        context.close()


def test_withheld_hidden_cases(context: BrowserContext, sessions: sessionmaker[Session], student: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    rubric = withheld(load_rubric("hw4"))
    run_id = scored_run(sessions, student, rubric)
    monkeypatch.setattr(grader.pages.run_view, "load_rubric", lambda _slug, search: rubric)  # the server runs in this process
    page = log_in(context, student)
    page.goto(f"/runs/{run_id}")
    box = page.locator("#cases-1\\.1")
    expect(box.locator("tbody tr").nth(2).locator("th, td")).to_have_text(
        ["hidden case 1", "not disclosed", "C ABI", "failed",
         "Wrong result (this assignment does not disclose the details of hidden cases)."])
    expect(page.locator("code.failure").first).to_have_text(
        "hidden case 1: Wrong result (this assignment does not disclose the details of hidden cases).")
    body = page.locator("main").inner_text()
    for spelled in ("sfw-b3h5f7t1", "3 × 5 × 7 × 1", "3, 5, 7, 1"):
        assert spelled not in body, spelled


def test_a_run_that_graded_nothing(context: BrowserContext, sessions: sessionmaker[Session], student: str) -> None:
    page = log_in(context, student)
    built = ungraded_run(sessions, student, RunState.built, None, "Build succeeded.")
    page.goto(f"/runs/{built}")
    banner = page.get_by_role("region", name="Not graded")
    expect(banner).to_contain_text("This run was built but not graded: the worker that took it has no GPU stage")
    expect(page.locator("#breakdown")).to_have_count(0)
    failed = ungraded_run(sessions, student, RunState.failed, ErrorClass.build_error, "combine did not compile.")
    page.goto(f"/runs/{failed}")
    expect(page.get_by_role("region", name="Not graded")).to_contain_text(
        "No problem could be graded because the kernels did not build (a build error)")
    expect(page.get_by_text("build_error")).to_have_count(0)
    expect(page.get_by_text("not_run")).to_have_count(0)
    check_page(page)
