"""Scoring stored measurements again in Chromium (issue 53): after the rubric's Problem 1.1
target was lowered from 6.5x to 4x, the instructor's button on the settings page opens a preview
listing the student whose counted run gains (95.62 -> 97.18, "1.1: 18.44 -> 20") and the run
that cannot be scored again (no stored measurement), and writes nothing; cancelling keeps the
grade, confirming writes it and the gradebook shows it. Each page passes the accessibility
checks, at desktop width and at 390 px."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.settings import Settings
from tests.browser.a11y import check_page
from tests.browser.test_pages import log_in
from tests.fixtures.rescore_data import rubric_copy, set_target
from tests.service.conftest import served
from tests.service.test_rescore_service import seed


@pytest.fixture
def rescore_context(browser: Browser, sessions: sessionmaker[Session], settings_env: dict[str, str],
                    tmp_path: Path) -> Iterator[tuple[BrowserContext, str, str, str]]:
    """The app served with the rubric's folder, a class graded under hw4's rubric copy whose 1.1
    target is then lowered: (a browser context on it, the slug, the instructor, the tag)."""
    tag = uuid.uuid4().hex[:6]
    slug, folder = f"rescore-{tag}", tmp_path / "rubrics"
    with session_scope(sessions) as session:
        prof, _ta = seed(session, slug, folder, tag, {"gains": [4.0], "stays": [7.0], "old": [None]})
    rubric_copy(folder, slug, set_target("1.1", 4.0))
    with served(Settings.from_variables(settings_env, rubric_dirs=[folder])) as url:
        context = browser.new_context(base_url=url, viewport={"width": 1100, "height": 800})
        context.set_default_timeout(15_000)
        yield context, slug, prof, tag
        context.close()


def _grade(page: Page, slug: str, login: str) -> str:
    page.goto(f"/gradebook?assignment={slug}")
    row = page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name=login))
    return row.locator(".final-grade").inner_text()


def _rows(page: Page, table: str) -> list[list[str]]:
    return [row.locator("td").all_inner_texts() for row in page.locator(f"#{table} tbody tr").all()]


def test_the_rescore_button_previews_then_writes_once_confirmed(
        rescore_context: tuple[BrowserContext, str, str, str], screenshot_dir: Path) -> None:
    context, slug, prof, tag = rescore_context
    gains, old = f"gains-{tag}", f"old-{tag}"
    page = log_in(context, prof)
    assert _grade(page, slug, gains) == "95.62"
    page.goto(f"/assignments/{slug}/settings")
    page.get_by_role("link", name="Score the stored measurements again (shows what changes first)").click()

    expect(page.get_by_role("heading", level=1)).to_have_text(f"Confirm scoring {slug} again")
    expect(page.locator("#confirm-question")).to_have_text(f"Write the new scores of {slug}? It changes 1 run's score.")
    [row] = [r for r in _rows(page, "rescore-students") if r[0] == gains]
    assert row[3:6] == ["95.62 → 97.18", "1.1: 18.44 → 20", "95.62 → 97.18"]
    [refused] = _rows(page, "rescore-refused")
    assert refused[1:] == [old, "problem 1.1: no measurement is stored (graded before they were kept)"]
    check_page(page)
    page.screenshot(path=str(screenshot_dir / "rescore-preview.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    check_page(page)
    page.set_viewport_size({"width": 1100, "height": 800})
    page.get_by_role("link", name="Cancel: Keep the scores as they are").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Settings")
    assert _grade(page, slug, gains) == "95.62"  # cancelled: nothing written

    page.goto(f"/assignments/{slug}/rescore")
    page.get_by_role("button", name="Write and change 1 run's score").click()
    expect(page.locator("#rescore-saved")).to_have_text("Scores written: 1 run(s) scored again.")
    check_page(page)
    assert _grade(page, slug, gains) == "97.18"
    assert _grade(page, slug, old) == "95.62"  # not re-scorable: its score stays
    page.goto(f"/assignments/{slug}/rescore")
    expect(page.locator("#confirm-question")).to_contain_text("Nothing changes")
    check_page(page)
