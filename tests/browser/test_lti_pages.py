"""LTI launches in a real Chromium from the test LMS (tests/peers: lti1p3platform's platform on
127.0.0.1), the tool on `localhost`: another site, so inside the LMS's frame every cookie of the
tool's is a third-party cookie (and ours are SameSite=Lax, which a cross-site frame never sets).
Chromium runs with its third-party-cookie blocking on. A link opened in a window of its own
logs the person in directly; a link opened in the LMS's frame shows the tool's page there
(framing allowed for it alone) with a button that opens kernelgrade in a first-party window,
logged in, on the link's assignment."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect
from sqlalchemy.orm import Session, sessionmaker

from tests.browser.conftest import chromium
from tests.peers.fixtures import lms  # noqa: F401
from tests.peers.form_browser import Form, FormBrowser
from tests.peers.lms import INSTRUCTOR, LEARNER, Link, Platform
from tests.peers.lms import User as LmsUser
from tests.service.test_lti import register

BLOCK_THIRD_PARTY_COOKIES = "--test-third-party-cookie-phaseout"


@pytest.fixture(scope="module")
def blocking_browser(playwright: Playwright) -> Iterator[Browser]:
    yield from chromium(playwright, BLOCK_THIRD_PARTY_COOKIES)


@pytest.fixture
def linked(lms: Platform, base_url: str, sessions: sessionmaker[Session]) -> tuple[Platform, Link, LmsUser, str]:  # noqa: F811
    """The LMS registered with the tool at `localhost`, a course whose instructor deep-linked a
    new assignment, and one of its students."""
    tool = base_url.replace("127.0.0.1", "localhost")
    tag = uuid.uuid4().hex[:8]
    register(lms, tool, sessions, f"frame-{tag}")
    course = lms.add_course(f"ctx-{tag}", f"Frames {tag}")
    teacher = lms.add_user(f"t-{tag}", "Tess Teacher", f"t-{tag}@uni.example", "Tess", "Teacher")
    student = lms.add_user(f"s-{tag}", "Sam Framed", f"s-{tag}@uni.example", "Sam", "Framed")
    lms.enroll(course, teacher, INSTRUCTOR)
    lms.enroll(course, student, LEARNER)
    with FormBrowser() as instructor:
        chooser = instructor.open(lms.deep_link_url(teacher, course))
        ticket = chooser.text.split('name="ticket" value="', 1)[1].split('"', 1)[0]
        instructor.submit(Form(f"{tool}/lti/choose", "POST", {"ticket": ticket, "assignment": f"frame-{tag}"}))
    (link,) = lms.links(course)
    return lms, link, student, f"frame-{tag}"


def _logged_in_on(page: Page, slug: str, tool_host: str) -> None:
    assert urlsplit(page.url).hostname == tool_host and f"assignment={slug}" in page.url, page.url
    expect(page.locator("form[action='/logout']")).to_have_count(1)


def test_a_launch_in_its_own_window_logs_in_directly(blocking_browser: Browser,
                                                     linked: tuple[Platform, Link, LmsUser, str]) -> None:
    lms_, link, student, slug = linked
    context = blocking_browser.new_context()
    page = context.new_page()
    page.goto(lms_.launch_url(student, link))
    page.wait_for_url(f"**assignment={slug}**")
    _logged_in_on(page, slug, "localhost")
    context.close()


def test_a_launch_in_the_lms_frame_continues_in_a_first_party_window(
        blocking_browser: Browser, linked: tuple[Platform, Link, LmsUser, str]) -> None:
    lms_, link, student, slug = linked
    context = blocking_browser.new_context()
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto(lms_.framed_url(student, link))
    frame = page.frame_locator("#tool")
    button = frame.locator("#lti-open")
    expect(button).to_have_text("Open kernelgrade")
    # inside the frame the tool set no cookie (third-party there): nobody is logged in yet
    assert not [c for c in context.cookies() if c["domain"] == "localhost" and c["name"] == "kg_session"]
    with context.expect_page() as opened:
        button.click()
    window = opened.value
    window.wait_for_url(f"**assignment={slug}**")
    _logged_in_on(window, slug, "localhost")
    # the button's link works once
    again = context.new_page()
    again.goto(window.url.split("/?", 1)[0] + button.get_attribute("href"))  # type: ignore[operator]
    expect(again.locator("h1")).to_have_text("This launch is refused")
    context.close()


def test_a_refusal_shows_inside_the_lms_frame(blocking_browser: Browser,
                                              linked: tuple[Platform, Link, LmsUser, str]) -> None:
    lms_, link, _, _ = linked
    mentor = lms_.add_user(f"m-{uuid.uuid4().hex[:6]}", "Max Mentor", "m@uni.example", "Max", "Mentor")
    lms_.enroll(link.course, mentor, ("http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor",))
    context = blocking_browser.new_context()
    page = context.new_page()
    page.goto(lms_.framed_url(mentor, link))
    expect(page.frame_locator("#tool").locator("p.error")).to_contain_text("gives no access")
    context.close()
