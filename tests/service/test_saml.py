"""SAML single sign-on over HTTP, with no browser: the service served on its own address, signing
in through a real SAML identity provider (pysaml2's IdP side, tests/fixtures/saml_idp.py). A
right answer logs in and goes where the login page was asked to go; an answer signed by another
key, one addressed to another service, one posted a second time and one this browser never
asked for each log nobody in and land on the login page saying so, audited. The service's
metadata names its ACS and its certificate; with SAML unset, its addresses are absent."""
from __future__ import annotations

import html
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from defusedxml import ElementTree
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.saml import ACS_PATH, METADATA_PATH, ServiceProvider
from grader.db import session_scope
from grader.models import AuditEvent, ExternalIdentity, Role, User
from grader.settings import Settings
from tests.fixtures.saml_idp import IdentityProvider, identity_provider, make_pair, post_answer, saml_service

MD = "{urn:oasis:names:tc:SAML:2.0:metadata}"
EPPN = "eduPersonPrincipalName"


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with identity_provider() as p:
        yield p


@pytest.fixture(scope="module")
def service(settings_env: dict[str, str], settings: Settings, idp: IdentityProvider) -> Iterator[Settings]:
    with saml_service(settings_env, idp) as s:
        yield s


@pytest.fixture
def browser(service: Settings) -> Iterator[httpx.Client]:
    """One browser's cookies, on the service."""
    with httpx.Client(base_url=service.public_url) as client:
        yield client


def _person(idp: IdentityProvider, prefix: str, persistent: bool = True) -> str:
    """A new person at the provider: their user name there, which is also their login here."""
    login = f"{prefix}-{uuid.uuid4().hex[:8]}"
    idp.set_user(login, {EPPN: [login], "mail": [f"{login}@example.edu"], "displayName": ["Pat Doe"]},
                 persistent_id=f"pid-{uuid.uuid4().hex}" if persistent else None)
    return login


def _start(browser: httpx.Client, next_path: str = "/") -> str:
    started = browser.get("/login/saml", params={"next": next_path})
    assert started.status_code == 302, started.text[:500]
    return started.headers["location"]


def _refused_with(browser: httpx.Client, answer: httpx.Response, words: str) -> None:
    """The answer sent the browser to the login page, which says `words`, once; nobody is logged in."""
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login"), answer.text[:300]
    page = browser.get(answer.headers["location"])
    assert page.status_code == 200 and words in html.unescape(page.text), page.text
    assert words not in html.unescape(browser.get("/login").text)  # shown once
    assert browser.get("/settings/tokens", follow_redirects=False).headers["location"].startswith("/login")


def _saml_events(sessions: sessionmaker[Session], event: str) -> list[AuditEvent]:
    with session_scope(sessions) as session:
        rows = session.scalars(select(AuditEvent).where(AuditEvent.via == "saml", AuditEvent.event == event)
                               .order_by(AuditEvent.id)).all()
        session.expunge_all()
        return list(rows)


def _no_account(sessions: sessionmaker[Session], login: str) -> None:
    with session_scope(sessions) as session:
        assert session.scalar(select(User).where(User.username == login)) is None


def test_a_sign_in_logs_in_a_new_student_tied_to_the_persistent_name_id(
        browser: httpx.Client, idp: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    login = _person(idp, "saml-http")
    acs, fields = idp.answer(_start(browser, "/settings/tokens"), login)
    answer = post_answer(browser, acs, fields)
    assert answer.status_code == 303 and answer.headers["location"] == "/settings/tokens", answer.text[:500]
    assert browser.get("/settings/tokens").status_code == 200
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.username == login))
        assert user is not None and user.role is Role.student and user.password_hash is None
        assert (user.full_name, user.email) == ("Pat Doe", f"{login}@example.edu")
        [tie] = session.scalars(select(ExternalIdentity).where(ExternalIdentity.user_id == user.id)).all()
        assert (tie.issuer, tie.kind) == (idp.entity_id, "saml")
        assert tie.subject == idp.people[login].persistent_id
    [event] = [e for e in _saml_events(sessions, "login") if e.login == login]
    assert idp.people[login].persistent_id in event.detail


def test_without_a_persistent_name_id_the_login_attribute_is_the_identity(
        browser: httpx.Client, idp: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    login = _person(idp, "saml-transient", persistent=False)
    for _ in range(2):  # two sign-ins, each with a new transient NameID: one account, one tie
        with httpx.Client(base_url=browser.base_url) as fresh:
            answer = post_answer(fresh, *idp.answer(_start(fresh), login))
            assert answer.status_code == 303 and answer.headers["location"] == "/", answer.text[:500]
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.username == login))
        assert user is not None
        assert session.scalars(select(ExternalIdentity.subject).where(ExternalIdentity.user_id == user.id)).all() == [
            login]


def test_an_answer_signed_by_another_key_is_refused(
        browser: httpx.Client, idp: IdentityProvider, sessions: sessionmaker[Session], tmp_path: Path) -> None:
    login = _person(idp, "saml-forged")
    acs, fields = idp.answer(_start(browser), login, pair=make_pair(tmp_path, "impostor"))
    _refused_with(browser, post_answer(browser, acs, fields),
                  "failed its check (its signature is not the sign-in service's)")
    _no_account(sessions, login)
    assert _saml_events(sessions, "login_failed")[-1].detail.startswith("signature:")


def test_an_answer_for_another_service_is_refused(
        browser: httpx.Client, idp: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    login = _person(idp, "saml-audience")
    acs, fields = idp.answer(_start(browser), login, audience="https://other-service.example.edu/saml/metadata")
    _refused_with(browser, post_answer(browser, acs, fields), "failed its check (it was issued to another service)")
    _no_account(sessions, login)
    assert "AudienceRestriction" in _saml_events(sessions, "login_failed")[-1].detail


def test_an_answer_posted_twice_logs_in_once(
        browser: httpx.Client, service: Settings, idp: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    login = _person(idp, "saml-replay")
    acs, fields = idp.answer(_start(browser), login)
    assert post_answer(browser, acs, fields).headers["location"] == "/"
    before = len(_saml_events(sessions, "login_failed"))
    # Again in the browser that used it: refused (it stays logged in as it was, by its first post)
    again = post_answer(browser, acs, fields)
    assert again.status_code == 303 and again.headers["location"].startswith("/login")
    # Again in another browser, one with a sign-in of its own under way: refused, nobody logged in
    with httpx.Client(base_url=service.public_url) as other:
        _start(other)
        _refused_with(other, post_answer(other, acs, fields),
                      "not for a sign-in this browser started (or it was used already)")
    assert len(_saml_events(sessions, "login_failed")) == before + 2
    assert [e.event for e in _saml_events(sessions, "login") if e.login == login] == ["login"]


def test_an_answer_this_browser_did_not_ask_for_is_refused(
        browser: httpx.Client, service: Settings, idp: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    login = _person(idp, "saml-unsolicited")
    acs, fields = idp.answer(_start(browser), login)  # another browser's request: a login forced on this one
    with httpx.Client(base_url=service.public_url) as other:
        _refused_with(other, post_answer(other, acs, fields), "not for a sign-in this browser started")
    _no_account(sessions, login)
    assert "unknown InResponseTo" in _saml_events(sessions, "login_failed")[-1].detail
    # The browser whose request it answers still signs in with it
    assert post_answer(browser, acs, fields).headers["location"] == "/"


def test_the_metadata_names_the_acs_and_a_signing_certificate(browser: httpx.Client, service: Settings) -> None:
    answer = browser.get(METADATA_PATH)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/samlmetadata+xml")
    root = ElementTree.fromstring(answer.text)
    assert root.get("entityID") == service.public_url + METADATA_PATH
    [acs] = root.iter(f"{MD}AssertionConsumerService")
    assert acs.get("Location") == service.public_url + ACS_PATH
    assert acs.get("Binding") == "urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST"
    uses = {key.get("use") for key in root.iter(f"{MD}KeyDescriptor")}
    assert "signing" in uses or None in uses
    key_dir = Path(service.data_dir) / "saml-sp"
    assert {p.name: p.stat().st_mode & 0o777 for p in key_dir.iterdir()} == {"key.pem": 0o600, "cert.pem": 0o600}
    assert key_dir.stat().st_mode & 0o077 == 0


def test_without_saml_its_addresses_are_absent(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        assert "saml-button" not in client.get("/login").text
        for method, path in (("GET", "/login/saml"), ("POST", ACS_PATH), ("GET", METADATA_PATH)):
            assert client.request(method, path, follow_redirects=False).status_code == 404, path



def test_the_provider_keeps_no_one_in_memory(service: Settings, idp: IdentityProvider) -> None:
    """pysaml2 caches each person a response names (for logouts); the service empties it, or
    every sign-in with a transient NameID would stay in the process for good."""
    sp = ServiceProvider(service.saml, service.public_url, service.data_dir)
    session: dict[str, Any] = {}
    for _ in range(2):
        _acs, fields = idp.answer(sp.start(session), _person(idp, "saml-cache", persistent=False))
        assert sp.finish(session, fields["SAMLResponse"]).identity.kind == "saml"
    client, _idp = sp._ready()
    assert client.users.subjects() == []


@pytest.mark.parametrize("attribute", ["urn:oid:1.3.6.1.4.1.5923.1.1.1.6", "eduPersonPrincipalName", "mail"])
def test_the_login_attribute_is_named_by_its_oid_or_its_friendly_name(
        service: Settings, idp: IdentityProvider, attribute: str) -> None:
    settings = service.saml.model_copy(update={"login_attribute": attribute})
    sp = ServiceProvider(settings, service.public_url, service.data_dir)
    session: dict[str, Any] = {}
    login = _person(idp, "saml-oid")
    _acs, fields = idp.answer(sp.start(session), login)
    person = sp.finish(session, fields["SAMLResponse"])
    assert person.login == (f"{login}@example.edu" if attribute == "mail" else login)
    assert (person.name, person.email) == ("Pat Doe", f"{login}@example.edu")
