"""Links and forms that cannot be forged, on PostgreSQL through the real app: a reset link on the
roster page is built on KG_PUBLIC_URL whatever Host the request names (without it, a path and how
to set it; the CLI likewise); every state-changing form is refused with a 403 page when its
Origin (or Referer) is another site's, even with a valid CSRF token, checked against
KG_PUBLIC_URL or, unset, the request's own scheme://host."""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import CROSS_SITE_POSTS, create_app
from grader.cli.main import app as cli_app
from grader.db import session_scope
from grader.models import ApiToken, AuditEvent, PasswordReset, User
from grader.settings import Settings
from tests.service.test_security import World, _concrete, csrf_of, served, world  # noqa: F401 (fixture)
from tests.service.test_web_run_words import _people
from tests.service.test_web_sessions import cli_env, username  # noqa: F401 (fixtures)
from tests.service.test_web_settings import PASSWORD, Browser

PUBLIC_URL = "https://grader.example.edu"
LINK = re.compile(r'<code id="reset-link">([^<]+)</code>')


@pytest.fixture
def roster_people(sessions: sessionmaker[Session]) -> tuple[str, str]:
    """A student of hw4 and an instructor of hw4 (their password: test_web_settings.PASSWORD)."""
    return _people(sessions)


def _issue(settings: Settings, prof: str, student: str, **headers: str) -> tuple[str, str]:
    staff = Browser(settings, prof)
    answer = staff.client.post("/roster/reset-link", data={"csrf_token": staff.page_csrf("/roster"),
                                                          "username": student}, headers=headers)
    assert answer.status_code == 200, answer.text
    found = LINK.search(answer.text)
    assert found, answer.text
    return answer.text, found.group(1)


def test_a_forged_host_does_not_change_a_reset_link(
        settings: Settings, sessions: sessionmaker[Session], roster_people: tuple[str, str]) -> None:
    student, prof = roster_people
    public = settings.model_copy(update={"public_url": PUBLIC_URL})
    page, link = _issue(public, prof, student, host="attacker.example", **{"X-Forwarded-Host": "attacker.example"})
    assert link.startswith(PUBLIC_URL + "/reset/") and "attacker" not in page
    assert 'id="reset-path-hint"' not in page
    with session_scope(sessions) as session:
        issued = session.scalars(select(AuditEvent).join(User, User.id == AuditEvent.user_id)
                                 .where(User.username == student, AuditEvent.event == "reset_issued")).one()
        assert issued.actor_id == session.scalar(select(User.id).where(User.username == prof))


def test_without_a_public_url_the_roster_page_shows_a_path_and_how_to_set_it(
        settings: Settings, roster_people: tuple[str, str]) -> None:
    student, prof = roster_people
    page, link = _issue(settings, prof, student, host="attacker.example")
    assert link.startswith("/reset/") and "attacker" not in page
    assert 'id="reset-path-hint"' in page and "KG_PUBLIC_URL" in page


def test_the_cli_builds_reset_links_on_the_public_url(
        settings: Settings, roster_people: tuple[str, str], cli_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.settings import get_settings

    student, _ = roster_people
    bare = CliRunner().invoke(cli_app, ["user", "reset-link", student])
    assert bare.exit_code == 0 and bare.stdout.startswith("/reset/") and "KG_PUBLIC_URL" in bare.stderr
    monkeypatch.setenv("KG_PUBLIC_URL", PUBLIC_URL)
    get_settings.cache_clear()
    whole = CliRunner().invoke(cli_app, ["user", "reset-link", student])
    assert whole.exit_code == 0 and whole.stdout.startswith(PUBLIC_URL + "/reset/"), whole.output


@pytest.mark.parametrize(("asked", "lands"), [("/login/", "/login"), ("/api/v1/submissions/?page=2",
                                                                     "/api/v1/submissions?page=2")])
def test_a_redirect_never_names_a_forged_host(settings: Settings, asked: str, lands: str) -> None:
    answer = TestClient(create_app(settings)).get(asked, headers={"host": "attacker.example"}, follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"] == lands


# ---- Origin / Referer ------------------------------------------------------------------------


def _tokens(sessions: sessionmaker[Session], name: str) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(ApiToken.id)).join(User).where(User.username == name)) or 0)


def _make_token(browser: Browser, **headers: str):  # type: ignore[no-untyped-def]
    return browser.client.post("/settings/tokens", data={"csrf_token": browser.page_csrf("/settings/tokens"),
                                                          "name": "origin"}, headers=headers, follow_redirects=False)


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},  # a sandboxed frame, or a page that hides its origin
    {"Referer": "https://evil.example/page"},  # no Origin: the Referer's origin decides
    {"Origin": "https://testserver"},  # another scheme of this host
    {"Origin": "http://testserver.evil.example"},
])
def test_a_valid_csrf_token_from_a_foreign_origin_is_refused(
        settings: Settings, sessions: sessionmaker[Session], username: str, headers: dict[str, str]) -> None:
    browser = Browser(settings, username)
    answer = _make_token(browser, **headers)
    assert answer.status_code == 403, answer.text
    assert "Form refused" in answer.text and "nothing was done" in answer.text and "http://testserver" in answer.text
    assert "evil.example" not in answer.text or "another site (" in answer.text
    assert _tokens(sessions, username) == 0


@pytest.mark.parametrize("headers", [
    {"Origin": "http://testserver"},
    {"Origin": "HTTP://TestServer"},
    {"Referer": "http://testserver/settings/tokens"},
    {},  # neither header (not a browser page): the CSRF token alone decides
])
def test_the_services_own_origin_passes(
        settings: Settings, sessions: sessionmaker[Session], username: str, headers: dict[str, str]) -> None:
    browser = Browser(settings, username)
    assert _make_token(browser, **headers).status_code == 201
    assert _tokens(sessions, username) == 1


def test_with_a_public_url_forms_must_come_from_it(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    """Behind a proxy the Host may be anything: KG_PUBLIC_URL's origin is the one accepted."""
    public = settings.model_copy(update={"public_url": PUBLIC_URL + "/"})
    browser = Browser(public, username)
    assert _make_token(browser, Origin="http://testserver").status_code == 403  # the request's own host: no
    assert _make_token(browser, Origin=PUBLIC_URL).status_code == 201
    assert _tokens(sessions, username) == 1


def test_the_login_form_from_a_foreign_origin_logs_no_one_in(settings: Settings, username: str) -> None:
    client = TestClient(create_app(settings))
    form = client.get("/login").text
    answer = client.post("/login", data={"csrf_token": csrf_of(form), "username": username, "password": PASSWORD},
                         headers={"Origin": "https://evil.example"}, follow_redirects=False)
    assert answer.status_code == 403
    assert client.get("/submissions", follow_redirects=False).status_code == 303


def test_every_session_form_refuses_a_foreign_origin(world: World) -> None:  # noqa: F811
    """Every POST route of the pages (a new one included), with this session's valid CSRF token."""
    before = (world.b_runs(), world.count(ApiToken), world.count(User), world.count(PasswordReset))
    posts = [p for m, p in served(world.settings) if m == "POST" and not p.startswith("/api/")]
    assert "/submit" in posts and "/upload" in posts and "/login" in posts
    for path in posts:
        answer = world.staff_web.post(_concrete(path, world), headers={"Origin": "https://evil.example"},
                                      data={"csrf_token": csrf_of(world.staff_web.get("/").text), "name": "x",
                                            "which": "all", "token": world.staff_token},
                                      files={"file": ("x.zip", b"PK\x05\x06" + bytes(18))}, follow_redirects=False)
        if path in CROSS_SITE_POSTS:  # an LMS or identity provider posts these by design: what they carry, signed,
            # is the credential (refused here without it; absent where single sign-on is not set up)
            assert answer.status_code in (400, 403, 404) and "Form refused" not in answer.text, (path, answer.status_code)
            continue
        assert answer.status_code == 403 and "Form refused" in answer.text, (path, answer.status_code)
    assert (world.b_runs(), world.count(ApiToken), world.count(User), world.count(PasswordReset)) == before
    assert world.staff_web.get("/gradebook", follow_redirects=False).status_code == 200  # still logged in
