"""Single sign-on over HTTP, with no browser: the service served on its own address, signing in
through a real OpenID Connect provider (oidc-provider-mock, tests/fixtures/oidc_provider.py).
An answer the browser did not ask for (a tampered state, another browser's), an id_token
answering another request (its nonce), a code issued to another client, the provider saying no
and a provider that cannot be reached each log nobody in and land on the login page saying so,
audited. The id_token's own checks (audience, signature, issuer, expiry) are tried on real
tokens of the provider that are wrong in one way each. Password login off for students leaves
their API tokens working."""
from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.auth.sso import CALLBACK_PATH, Provider, SsoRefused
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import AuditEvent, Role, User
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.oidc_provider import IdentityProvider, identity_provider, sign_in, sso_service, sso_settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, free_port
from tests.service.test_security import csrf_of


@pytest.fixture(scope="module")
def provider() -> Iterator[IdentityProvider]:
    with identity_provider() as p:
        yield p


@pytest.fixture(scope="module")
def service(settings_env: dict[str, str], settings: Settings, provider: IdentityProvider) -> Iterator[Settings]:
    with sso_service(settings_env, provider, KG_SSO_DOMAINS="example.edu") as s:
        yield s


@pytest.fixture
def browser(service: Settings) -> Iterator[httpx.Client]:
    """One browser's cookies, on the service."""
    with httpx.Client(base_url=service.public_url) as client:
        yield client


def _person(provider: IdentityProvider, prefix: str) -> tuple[str, str]:
    """A new person at the provider: their subject and login."""
    sub, login = f"sub-{uuid.uuid4().hex}", f"{prefix}-{uuid.uuid4().hex[:8]}"
    provider.set_user(sub, {"preferred_username": login, "email": f"{login}@example.edu", "name": "Pat Doe"})
    return sub, login


def _with(url: str, **changes: str) -> str:
    """`url` with query fields changed."""
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    return urlunsplit(parts._replace(query=urlencode({**query, **changes})))


def _refused_with(browser: httpx.Client, answer: httpx.Response, words: str) -> None:
    """The answer sent the browser to the login page, which says `words`, once; nobody is logged in."""
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login"), answer.text[:300]
    page = browser.get(answer.headers["location"])
    assert page.status_code == 200 and words in page.text, page.text
    assert words not in browser.get("/login").text  # shown once
    assert browser.get("/settings/tokens", follow_redirects=False).headers["location"].startswith("/login")


def _sso_events(sessions: sessionmaker[Session], event: str) -> list[AuditEvent]:
    with session_scope(sessions) as session:
        rows = session.scalars(select(AuditEvent).where(AuditEvent.via == "sso", AuditEvent.event == event)
                               .order_by(AuditEvent.id)).all()
        session.expunge_all()
        return list(rows)


def test_a_sign_in_logs_in_a_new_student_and_goes_where_the_login_was_asked_for(
        browser: httpx.Client, provider: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    sub, login = _person(provider, "http")
    answer = sign_in(browser, provider, sub, next_path="/settings/tokens")
    assert answer.status_code == 303 and answer.headers["location"] == "/settings/tokens"
    assert browser.get("/settings/tokens").status_code == 200
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.username == login))
        assert user is not None and user.role is Role.student and user.password_hash is None
        assert (user.full_name, user.email) == ("Pat Doe", f"{login}@example.edu")
    [login_event] = [e for e in _sso_events(sessions, "login") if e.login == login]
    assert sub in login_event.detail


def test_an_answer_this_browser_did_not_ask_for_is_refused(
        browser: httpx.Client, service: Settings, provider: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    sub, login = _person(provider, "state")
    started = browser.get("/login/sso")
    back = provider.authorize(started.headers["location"], sub)
    before = len(_sso_events(sessions, "login_failed"))
    _refused_with(browser, browser.get(_with(back, state="tampered")), "not for a sign-in this browser started")
    # The right answer, delivered to another browser (a login forced on someone else): refused too
    with httpx.Client(base_url=service.public_url) as other:
        _refused_with(other, other.get(back), "not for a sign-in this browser started")
    assert len(_sso_events(sessions, "login_failed")) == before + 2
    with session_scope(sessions) as session:
        assert session.scalar(select(User).where(User.username == login)) is None


def test_an_id_token_answering_another_request_is_refused(
        browser: httpx.Client, provider: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    sub, login = _person(provider, "nonce")
    answer = sign_in(browser, provider, sub, alter=lambda url: _with(url, nonce="someone-elses-nonce"))
    _refused_with(browser, answer, "it answers another sign-in")
    assert "nonce" in _sso_events(sessions, "login_failed")[-1].detail


def test_a_code_issued_to_another_client_is_refused(
        browser: httpx.Client, service: Settings, provider: IdentityProvider) -> None:
    sub, _ = _person(provider, "client")
    other, _secret = provider.register(service.public_url + CALLBACK_PATH)
    answer = sign_in(browser, provider, sub, alter=lambda url: _with(url, client_id=other))
    _refused_with(browser, answer, "refused to finish the sign-in (invalid_grant)")


def test_the_provider_saying_no_logs_nobody_in(browser: httpx.Client, provider: IdentityProvider) -> None:
    started = browser.get("/login/sso")
    _refused_with(browser, browser.get(provider.deny(started.headers["location"])),
                  "ended the sign-in with access_denied")


def test_a_provider_that_cannot_be_reached_is_said_so(settings_env: dict[str, str], settings: Settings) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = Settings.from_variables({**settings_env, "KG_PUBLIC_URL": "http://testserver", "KG_SSO_ISSUER": nowhere,
                                    "KG_SSO_CLIENT_ID": "kernelgrade"})
    with TestClient(create_app(down)) as client:
        answer = client.get("/login/sso", follow_redirects=False)
        assert answer.status_code == 303
        assert "could not be reached" in client.get(answer.headers["location"]).text


def test_without_an_issuer_there_is_no_button_and_no_sso_address(client: TestClient) -> None:
    assert 'id="sso-button"' not in client.get("/login").text
    assert client.get("/login/sso", follow_redirects=False).status_code == 404
    assert client.get(CALLBACK_PATH, follow_redirects=False).status_code == 404


def _token_as(provider: IdentityProvider, client_id: str, secret: str, redirect_uri: str, sub: str, nonce: str,
              **headers: str) -> dict[str, Any]:
    """A real token response of the provider to `client_id`, for `sub` and `nonce`, walked by hand
    (`headers` go with the token request: a Host header changes the issuer the provider names)."""
    query = urlencode({"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
                       "scope": "openid profile email", "state": "s", "nonce": nonce})
    back = provider.authorize(f"{provider.issuer}/oauth2/authorize?{query}", sub)
    code = parse_qs(urlsplit(back).query)["code"][0]
    answer = httpx.post(f"{provider.issuer}/oauth2/token", auth=(client_id, secret), headers=headers,
                        data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri})
    answer.raise_for_status()
    return dict(answer.json())


def _check(settings: Settings, token: dict[str, Any], nonce: str) -> dict[str, Any]:
    # in a thread of its own: a browser test before this one (Playwright's sync API) may have left
    # an event loop running in this thread, where asyncio.run refuses to start another
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, Provider(settings.sso, settings.public_url).check_id_token(token, nonce)).result()


def _refusal(settings: Settings, token: dict[str, Any], nonce: str) -> str:
    with pytest.raises(SsoRefused) as refused:
        _check(settings, token, nonce)
    return str(refused.value)


def test_the_id_token_is_checked(service: Settings, provider: IdentityProvider) -> None:
    sub, login = _person(provider, "token")
    ours = (service.sso.client_id, service.sso.client_secret, service.public_url + CALLBACK_PATH)
    good = _token_as(provider, *ours, sub, "n-1")
    assert _check(service, good, "n-1")["preferred_username"] == login  # the same path, right: accepted
    assert "it answers another sign-in" in _refusal(service, good, "n-2")

    other = provider.register(service.public_url + CALLBACK_PATH)
    not_ours = _token_as(provider, *other, service.public_url + CALLBACK_PATH, sub, "n-1")
    assert "it was issued to another service" in _refusal(service, not_ours, "n-1")

    header, payload, signature = good["id_token"].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps({**claims, "sub": "someone-else"}).encode()).rstrip(b"=").decode()
    assert "its signature is not the provider's" in _refusal(
        service, {**good, "id_token": f"{header}.{forged}.{signature}"}, "n-1")

    port = urlsplit(provider.issuer).port
    elsewhere = _token_as(provider, *ours, sub, "n-1", host=f"localhost:{port}")  # iss: http://localhost:PORT
    assert "it comes from another provider" in _refusal(service, elsewhere, "n-1")


def test_an_expired_id_token_is_refused(settings_env: dict[str, str]) -> None:
    with identity_provider(token_max_age=timedelta(minutes=-10)) as stale:
        port = free_port()  # nothing is served: the check needs only the provider
        settings = sso_settings(settings_env, stale, port)
        sub = f"sub-{uuid.uuid4().hex}"
        stale.set_user(sub, {"preferred_username": "late"})
        token = _token_as(stale, settings.sso.client_id, settings.sso.client_secret,
                          settings.public_url + CALLBACK_PATH, sub, "n-1")
        assert "it has expired" in _refusal(settings, token, "n-1")


def test_password_login_off_for_students_leaves_their_api_tokens_working(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    login = f"tokens-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        student = get_or_create_user(session, login, Role.student)
        set_password(student, "a right password", SUITE_ARGON2)
        token = issue_token(session, student, "t")
    no_passwords = settings.model_copy(update={"password_login_roles": [Role.instructor]})
    with TestClient(create_app(no_passwords)) as client:
        assert client.get("/api/v1/submissions", headers=auth(token)).status_code == 200
        form = client.get("/login").text
        answer = client.post("/login", data={"csrf_token": csrf_of(form), "username": login,
                                             "password": "a right password"}, follow_redirects=False)
        assert answer.status_code == 403
        assert "Password login is off for student accounts" in answer.text
        wrong = client.post("/login", data={"csrf_token": csrf_of(form), "username": login,
                                            "password": "a wrong password"}, follow_redirects=False)
        assert wrong.status_code == 401 and "Password login is off" not in wrong.text  # tells a guesser nothing
