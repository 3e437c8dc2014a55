"""A student chooses which of their runs counts, where the course allows it (issue 18), in
Chromium: with the option off (the default) the history offers no choice and a choice sent
anyway is refused in words; the instructor ticks "Students choose which run counts" on the
settings page; the student counts an older, better run from their history, and the gradebook
row shows it, "chosen by the student"; back to the score policy's pick restores the newer run;
the run page's "Count this run instead" does the same.
The history is checked at 390 px (no sideways scroll) and for accessibility."""
from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from tests.browser.a11y import check_page
from tests.browser.test_counted_run_pages import Course, two_scored_runs
from tests.browser.test_pages import log_in as log_in_page

# Sends a choice the page does not offer, as a forged-by-hand form would, with the page's CSRF token.
SEND_CHOICE_JS = """(runId) => {
  const form = document.createElement("form");
  form.method = "post"; form.action = "/submissions/counted";
  for (const [name, value] of [["csrf_token", document.querySelector("input[name=csrf_token]").value],
                               ["run_id", String(runId)]]) {
    const input = document.createElement("input"); input.type = "hidden"; input.name = name; input.value = value;
    form.appendChild(input);
  }
  document.body.appendChild(form); form.submit();
}"""


@pytest.fixture
def course(sessions: sessionmaker[Session]) -> Course:
    return two_scored_runs(sessions, "chb")


def log_in(context: BrowserContext, username: str) -> Page:
    page = log_in_page(context, username)
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    return page


def _gradebook_row(page: Page, course: Course) -> Locator:
    page.goto(f"/gradebook?assignment={course.slug}")
    return page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name=course.student))


def test_a_student_chooses_their_counted_run_once_the_course_allows_it(
        browser: Browser, base_url: str, context: BrowserContext, course: Course, screenshot_dir: Path) -> None:
    student = log_in(context, course.student)
    student.goto("/submissions")
    expect(student.get_by_role("button", name="Count this run")).to_have_count(0)
    student.evaluate(SEND_CHOICE_JS, course.older)
    student.wait_for_url("**/submissions?refused=not_allowed*")
    expect(student.locator("#counted-refused")).to_have_text(
        f"The staff of {course.slug} have not let students choose which run counts: the score policy picks it.")
    expect(student.locator(f"#counts-{course.slug}")).to_contain_text(f"run {course.newer}, 60 / 100")

    staff_context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    staff_context.set_default_timeout(15_000)
    try:
        prof = log_in(staff_context, course.prof)
        row = _gradebook_row(prof, course)
        expect(row.locator(".final-grade")).to_have_text("60")
        prof.goto(f"/assignments/{course.slug}/settings")
        choice = prof.get_by_label("Students choose which run counts")
        expect(choice).not_to_be_checked()
        choice.check()
        prof.get_by_role("button", name="Save schedule").click()
        expect(prof.locator("#saved")).to_have_text("Schedule saved.")
        expect(prof.get_by_label("Students choose which run counts")).to_be_checked()

        student.set_viewport_size({"width": 390, "height": 844})
        student.goto("/submissions")
        expect(student.locator(f"#counts-{course.slug}")).to_contain_text("You may choose which of your scored runs counts")
        student.get_by_role("button", name=f"Count run {course.older}").click()
        counts = student.locator(f"#counts-{course.slug}")
        expect(counts).to_contain_text("the run you chose")
        expect(counts).to_contain_text(f"run {course.older}, 90 / 100")
        item = student.locator("ul.plain li", has=student.get_by_role("link", name=f"Run {course.older}", exact=True))
        expect(item.locator(".counts")).to_have_text("counts")
        expect(item).to_contain_text("you chose it")
        assert student.evaluate("document.documentElement.scrollWidth") <= 390
        check_page(student)
        student.set_viewport_size({"width": 1280, "height": 800})
        student.evaluate("document.activeElement && document.activeElement.blur()")
        student.screenshot(path=str(screenshot_dir / "history-choice.png"), full_page=True)

        row = _gradebook_row(prof, course)
        expect(row.locator(".final-grade")).to_have_text("90")
        expect(row.get_by_role("link", name=f"Run {course.older}", exact=True)).to_have_count(1)
        expect(row.locator(".chosen")).to_have_text("chosen by the student")

        student.get_by_role("button", name=f"Back to the score policy's pick in {course.slug}").click()
        expect(student.locator(f"#counts-{course.slug}")).to_contain_text(f"run {course.newer}, 60 / 100")
        expect(student.locator(f"#counts-{course.slug}")).not_to_contain_text("you chose")
        row = _gradebook_row(prof, course)
        expect(row.locator(".final-grade")).to_have_text("60")
        expect(row.locator(".chosen")).to_have_count(0)

        # The same choice from the run page.
        student.goto(f"/runs/{course.older}")
        expect(student.locator("#run-counts")).to_contain_text(f"The gradebook counts run {course.newer}, not this one.")
        student.get_by_role("button", name="Count this run instead").click()
        expect(student.locator("#run-counts")).to_have_text("The gradebook counts this run (you chose it).")
        check_page(student)
        row = _gradebook_row(prof, course)
        expect(row.locator(".final-grade")).to_have_text("90")
        expect(row.locator(".chosen")).to_have_text("chosen by the student")
    finally:
        staff_context.close()
