"""Forms in a real Chromium (grader.security.SameOriginForms): our own pages' forms carry our
Origin (not `null`: the referrer policy is same-origin), so they pass; a page of another origin
on the same site (another port of this host: the session cookie, SameSite=Lax, still goes
along) posting a valid CSRF token is refused with the 403 page and changes nothing. A wrong
password keeps the login typed, and the login field does not autocapitalize."""
from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import BrowserContext, Page, Request, expect
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ApiToken, Role, User
from grader.passwords import set_password
from tests.fixtures.passwords import SUITE_ARGON2

PASSWORD = "correct horse battery"


@pytest.fixture
def student(sessions: sessionmaker[Session]) -> str:
    name = f"origin-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    return name


def _log_in(page: Page, username: str, password: str = PASSWORD) -> None:
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def _tokens(sessions: sessionmaker[Session], username: str) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(ApiToken.id)).join(User).where(User.username == username)) or 0)


def test_our_forms_carry_our_origin_and_pass(context: BrowserContext, base_url: str, student: str) -> None:
    page = context.new_page()
    origins: list[str | None] = []

    def seen(request: Request) -> None:
        if request.method == "POST":
            origins.append(request.headers.get("origin"))
    page.on("request", seen)
    _log_in(page, student.upper())  # case-insensitive
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    assert origins == [base_url]


def test_a_wrong_password_keeps_the_login_typed(context: BrowserContext, student: str) -> None:
    page = context.new_page()
    _log_in(page, student, "not the password")
    expect(page.locator("#login-error")).to_have_text("Wrong username or password.")
    field = page.get_by_label("Username")
    expect(field).to_have_value(student)
    expect(field).to_have_attribute("autocapitalize", "none")
    expect(page.get_by_label("Password")).to_have_value("")


def test_a_same_site_page_of_another_origin_cannot_post_a_valid_token(
        context: BrowserContext, base_url: str, sessions: sessionmaker[Session], student: str) -> None:
    page = context.new_page()
    _log_in(page, student)
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    page.goto("/settings/tokens")
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    port = int(base_url.rsplit(":", 1)[1])
    evil = f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}/"  # same site, another origin
    context.route(evil, lambda route: route.fulfill(content_type="text/html", body=(
        f'<!doctype html><title>win a prize</title><form method="post" action="{base_url}/settings/tokens">'
        f'<input type="hidden" name="csrf_token" value="{csrf}"><input type="hidden" name="name" value="stolen">'
        '<button>Claim</button></form>')))
    page.goto(evil)
    page.get_by_role("button", name="Claim").click()
    expect(page.get_by_role("heading", name="Form refused")).to_be_visible()
    expect(page.get_by_text("another site")).to_be_visible()
    assert _tokens(sessions, student) == 0
    page.goto("/settings/tokens")  # the same token, from our own page: accepted
    page.get_by_label("Name").first.fill("mine")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_text("mine").first).to_be_visible()
    assert _tokens(sessions, student) == 1
