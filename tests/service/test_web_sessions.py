"""Server-side browser sessions on PostgreSQL: the signed cookie carries a session id whose
sha256 is the row (and the user id the upload rate limit counts by, which grants nothing); a
session slides (idle expiry renewed by each request, an absolute maximum); it ends at logout,
at expiry, when the password changes (the /settings/password page ends the user's other
sessions and rotates its own) and with `grader user logout-all`. Logins are case-insensitive,
by login or e-mail."""
from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from itsdangerous import TimestampSigner
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.auth.sessions import secret_key
from grader.cli.main import app as cli_app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, User, WebSession, utcnow
from grader.passwords import check_password, set_password
from grader.settings import Settings, get_settings
from tests.fixtures.passwords import SUITE_ARGON2

PASSWORD = "correct horse battery"
NEW_PASSWORD = "a new and longer passphrase"
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF_INPUT.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def login(settings: Settings, username: str, password: str = PASSWORD) -> TestClient:
    client = TestClient(create_app(settings))
    response = client.post("/login", data={"csrf_token": csrf_of(client.get("/login").text), "username": username,
                                           "password": password}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


def logged_in(client: TestClient) -> bool:
    return client.get("/submissions", follow_redirects=False).status_code == 200


def cookie_payload(client: TestClient) -> dict[str, object]:
    """Starlette's cookie is base64(JSON).timestamp.signature: the JSON is what the cookie carries."""
    data = str(client.cookies.get("kg_session")).split(".")[0]
    return dict(json.loads(base64.b64decode(data + "=" * (-len(data) % 4))))


@pytest.fixture
def username(sessions: sessionmaker[Session]) -> str:
    name = f"sess-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    return name


def rows_of(sessions: sessionmaker[Session], name: str) -> list[WebSession]:
    with session_scope(sessions) as session:
        rows = list(session.scalars(select(WebSession).join(User).where(User.username == name)
                                    .order_by(WebSession.id)))
        session.expunge_all()
        return rows


def test_the_cookie_carries_only_the_session_id_and_the_table_only_its_hash(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    client = login(settings, username)
    payload = cookie_payload(client)
    assert set(payload) == {"sid", "uid"}  # uid: the rate limit's key, never trusted (see below)
    sid = str(payload["sid"])
    assert len(sid) >= 43  # 256 random bits
    (row,) = rows_of(sessions, username)
    assert row.id_hash == hashlib.sha256(sid.encode()).hexdigest() and row.revoked_at is None
    assert row.expires_at - row.created_at == timedelta(seconds=settings.session_max_age_s)
    assert csrf_of(client.get("/").text) not in (sid, row.id_hash)


def _expire(sessions: sessionmaker[Session], username: str) -> None:
    with session_scope(sessions) as session:
        session.execute(update(WebSession).where(WebSession.user_id == select(User.id).where(
            User.username == username).scalar_subquery()).values(expires_at=utcnow() - timedelta(seconds=1)))


def test_an_expired_session_is_refused(settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    client = login(settings, username)
    assert logged_in(client)
    _expire(sessions, username)
    # The login page says the session ended, and goes back to the page asked for.
    ended = client.get("/submissions", follow_redirects=False).headers["location"]
    assert ended == "/login?next=%2Fsubmissions&ended=session"
    assert "Your session has ended." in client.get(ended).text
    assert not logged_in(client)
    assert client.get("/runs/1/status").status_code == 401
    assert "uid" not in cookie_payload(client)  # the rate limit no longer counts it as the student
    # The next login replaces the expired row instead of piling rows up.
    login(settings, username)
    assert len(rows_of(sessions, username)) == 1


def _age(sessions: sessionmaker[Session], username: str, seen_ago: timedelta, created_ago: timedelta) -> None:
    """Move the user's sessions back in time: made `created_ago`, last used `seen_ago`."""
    now = utcnow()
    with session_scope(sessions) as session:
        session.execute(update(WebSession).where(WebSession.user_id == select(User.id).where(
            User.username == username).scalar_subquery()).values(last_seen_at=now - seen_ago,
                                                                  created_at=now - created_ago))


def test_an_active_session_slides_and_an_idle_one_ends(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    """A student working through the deadline is not logged out: each request renews the idle
    expiry (KG_SESSION_IDLE_S); a session left alone that long ends, with the login page's notice."""
    idle = timedelta(seconds=settings.session_idle_s)
    client = login(settings, username)
    for _ in range(3):  # three idle periods of steady work
        _age(sessions, username, seen_ago=idle - timedelta(minutes=2), created_ago=3 * idle)
        assert logged_in(client)
        (row,) = rows_of(sessions, username)
        assert utcnow() - row.last_seen_at < timedelta(seconds=30)  # renewed
    _age(sessions, username, seen_ago=idle + timedelta(seconds=5), created_ago=idle + timedelta(seconds=5))
    ended = client.get("/submissions", follow_redirects=False).headers["location"]
    assert ended == "/login?next=%2Fsubmissions&ended=session"


def test_the_absolute_maximum_ends_even_an_active_session(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    short = settings.model_copy(update={"session_max_age_s": 120, "session_idle_s": 3600})
    client = login(short, username)
    (row,) = rows_of(sessions, username)
    assert row.expires_at - row.created_at == timedelta(seconds=120)
    _expire(sessions, username)  # its maximum passed, though it was used a moment ago
    assert not logged_in(client)


def test_login_is_case_insensitive_by_login_or_email(settings: Settings, sessions: sessionmaker[Session]) -> None:
    tag = uuid.uuid4().hex[:6]
    name, email = f"Case-Mix-{tag}", f"Ada.{tag}@Uni.Example.edu"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        user.email = email
        set_password(user, PASSWORD, SUITE_ARGON2)
        # the same login typed otherwise names the same account: no second account is made
        assert get_or_create_user(session, name.upper(), Role.student).id == user.id
    for typed in (name, name.lower(), name.upper(), f"  {name.swapcase()} ", email.lower(), email.upper()):
        assert logged_in(login(settings, typed)), typed
    form = TestClient(create_app(settings)).get("/login").text
    assert 'autocapitalize="none"' in form and 'autocorrect="off"' in form and 'spellcheck="false"' in form


def test_an_email_two_accounts_share_names_neither(settings: Settings, sessions: sessionmaker[Session]) -> None:
    tag = uuid.uuid4().hex[:6]
    shared = f"shared-{tag}@uni.example.edu"
    with session_scope(sessions) as session:
        for name in (f"one-{tag}", f"two-{tag}"):
            user = get_or_create_user(session, name, Role.student)
            user.email = shared
            set_password(user, PASSWORD, SUITE_ARGON2)
    client = TestClient(create_app(settings))
    answer = client.post("/login", data={"csrf_token": csrf_of(client.get("/login").text), "username": shared,
                                         "password": PASSWORD}, follow_redirects=False)
    assert answer.status_code == 401 and f'value="{shared}"' in answer.text


def test_logins_migration_0018_left_apart_keep_their_exact_names(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    """Two accounts whose logins differ only by case (made before logins were case-insensitive:
    no login_key) are not merged: each logs in by its exact name, neither by a third spelling."""
    tag = uuid.uuid4().hex[:6]
    upper, lower = f"Twin-{tag}", f"twin-{tag}"
    with session_scope(sessions) as session:
        first = get_or_create_user(session, upper, Role.student)
        session.flush()
        first.login_key = None
        session.flush()
        second = User(username=lower, role=Role.student)
        session.add(second)
        session.flush()
        second.login_key = None
        set_password(first, PASSWORD, SUITE_ARGON2)
        set_password(second, NEW_PASSWORD, SUITE_ARGON2)
    assert logged_in(login(settings, upper, PASSWORD))
    assert logged_in(login(settings, lower, NEW_PASSWORD))
    client = TestClient(create_app(settings))
    third = client.post("/login", data={"csrf_token": csrf_of(client.get("/login").text),
                                        "username": upper.upper(), "password": PASSWORD}, follow_redirects=False)
    assert third.status_code == 401


def test_logout_revokes_the_row_and_a_new_login_gets_a_new_id(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    client = login(settings, username)
    first = cookie_payload(client)["sid"]
    client.post("/logout", data={"csrf_token": csrf_of(client.get("/").text)})
    assert not logged_in(client)
    assert cookie_payload(client)["sid"] != first
    (row,) = rows_of(sessions, username)
    assert row.revoked_at is not None
    again = login(settings, username)
    assert cookie_payload(again)["sid"] != first and logged_in(again)


def test_a_form_sent_after_the_session_ended_says_that_nothing_was_changed(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    client = login(settings, username)
    token = csrf_of(client.get("/settings/tokens").text)
    _expire(sessions, username)
    sent = client.post("/settings/tokens", data={"csrf_token": token, "name": "sent late"}, follow_redirects=False)
    assert sent.status_code == 303 and sent.headers["location"] == "/login?next=%2Fsettings%2Ftokens&ended=form"
    assert ("Your session ended before the form arrived, so nothing was changed. Log in and send it again."
            in client.get(sent.headers["location"]).text)
    assert "sent late" not in login(settings, username).get("/settings/tokens").text


def test_a_forged_uid_in_the_cookie_grants_nothing(settings: Settings, sessions: sessionmaker[Session],
                                                   username: str) -> None:
    """Even with the signing key, a cookie naming the user but no live session opens nothing:
    the row decides, the cookie's uid is only the rate limit's key."""
    with session_scope(sessions) as session:
        uid = session.scalar(select(User.id).where(User.username == username))
    signer = TimestampSigner(secret_key(settings))
    forged = {"sid": secrets.token_urlsafe(32), "uid": uid}
    cookie = signer.sign(base64.b64encode(json.dumps(forged).encode())).decode()
    thief = TestClient(create_app(settings), cookies={"kg_session": cookie})
    assert not logged_in(thief)
    assert login(settings, username) and not logged_in(thief)  # the user's own login changes nothing


@pytest.mark.parametrize(("asked", "lands"), [
    ("/runs/5?tab=log", "/runs/5?tab=log"), ("//example.org/x", "/"), ("https://example.org/", "/"),
    ("/\\example.org", "/"), ("javascript:alert(1)", "/"), ("", "/"),
])
def test_login_goes_back_only_to_a_page_of_this_site(settings: Settings, username: str, asked: str,
                                                     lands: str) -> None:
    client = TestClient(create_app(settings))
    form = client.get("/login", params={"next": asked}).text
    assert (f'name="next" value="{lands}"' in form) == (lands != "/")
    response = client.post("/login", data={"csrf_token": csrf_of(form), "username": username, "password": PASSWORD,
                                           "next": asked}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == lands
    # Already logged in, the login page sends the browser on the same way.
    assert client.get("/login", params={"next": asked}, follow_redirects=False).headers["location"] == lands


def test_a_next_page_with_a_control_character_is_refused_with_a_sentence(settings: Settings) -> None:
    """A tab in `next` (browsers drop it, so "/\t/example.org" would lead off the site): the
    request is refused before the login page reads it (grader/control_chars.py)."""
    refused = TestClient(create_app(settings)).get("/login", params={"next": "/\t/example.org"})
    assert refused.status_code == 422 and "control character" in refused.text, refused.text


# ---- password change ------------------------------------------------------------------------


def change(client: TestClient, current: str, new: str, again: str | None = None) -> tuple[int, str]:
    response = client.post("/settings/password", data={
        "csrf_token": csrf_of(client.get("/settings/password").text), "current": current, "new": new,
        "again": new if again is None else again}, follow_redirects=False)
    return response.status_code, response.text


def test_password_page_needs_login_and_csrf(settings: Settings, username: str) -> None:
    anonymous = TestClient(create_app(settings))
    asked = anonymous.get("/settings/password", follow_redirects=False)
    assert asked.headers["location"] == "/login?next=%2Fsettings%2Fpassword"
    client = login(settings, username)
    for sent in ({}, {"csrf_token": "forged"}):
        response = client.post("/settings/password", data={**sent, "current": PASSWORD, "new": NEW_PASSWORD,
                                                             "again": NEW_PASSWORD})
        assert response.status_code == 403
    assert login(settings, username).cookies.get("kg_session")  # the old password still works


@pytest.mark.parametrize(("current", "new", "again", "message"), [
    ("wrong password!", NEW_PASSWORD, None, "Your current password is not right."),
    (PASSWORD, NEW_PASSWORD, NEW_PASSWORD + "x", "The two new passwords differ."),
    (PASSWORD, "short1", None, "at least 8 characters"),
    (PASSWORD, PASSWORD, None, "The new password is your current one."),
])
def test_password_change_refusals(settings: Settings, sessions: sessionmaker[Session], username: str,
                                  current: str, new: str, again: str | None, message: str) -> None:
    client = login(settings, username)
    code, html = change(client, current, new, again)
    assert code == 400 and message in html
    assert logged_in(client)
    with session_scope(sessions) as session:
        assert check_password(session, username, PASSWORD, SUITE_ARGON2) is not None


def test_minimum_length_comes_from_the_settings(settings: Settings, username: str) -> None:
    strict = settings.model_copy(update={"password_min_length": 30})
    client = login(strict, username)
    assert 'minlength="30"' in client.get("/settings/password").text
    code, html = change(client, PASSWORD, NEW_PASSWORD)  # 27 characters
    assert code == 400 and "at least 30 characters" in html


def test_password_change_ends_the_other_sessions_and_rotates_this_one(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    laptop, phone = login(settings, username), login(settings, username)
    before = cookie_payload(laptop)["sid"]
    code, _ = change(laptop, PASSWORD, NEW_PASSWORD)
    assert code == 303
    done = laptop.get("/settings/password?changed=1")
    assert done.status_code == 200 and "Password changed" in done.text
    assert cookie_payload(laptop)["sid"] != before and logged_in(laptop)
    assert not logged_in(phone)
    live = [r for r in rows_of(sessions, username) if r.revoked_at is None]
    assert len(live) == 1
    with session_scope(sessions) as session:
        assert check_password(session, username, PASSWORD, SUITE_ARGON2) is None
        assert check_password(session, username, NEW_PASSWORD, SUITE_ARGON2) is not None
    login(settings, username, NEW_PASSWORD)


def test_the_form_changes_only_its_sessions_user(settings: Settings, sessions: sessionmaker[Session],
                                                 username: str) -> None:
    other = f"other-{username}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, other, Role.student), PASSWORD, SUITE_ARGON2)
    theirs = login(settings, other)
    client = login(settings, username)
    response = client.post("/settings/password", data={
        "csrf_token": csrf_of(client.get("/settings/password").text), "username": other, "user": other,
        "current": PASSWORD, "new": NEW_PASSWORD, "again": NEW_PASSWORD}, follow_redirects=False)
    assert response.status_code == 303
    with session_scope(sessions) as session:
        assert check_password(session, other, PASSWORD, SUITE_ARGON2) is not None
        assert check_password(session, username, NEW_PASSWORD, SUITE_ARGON2) is not None
    assert logged_in(theirs)


# ---- grader user logout-all -----------------------------------------------------------------


@pytest.fixture
def cli_env(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_instructor_ends_every_session_of_a_user(cli_env: None, settings: Settings, sessions: sessionmaker[Session],
                                                 username: str) -> None:
    browsers = [login(settings, username) for _ in range(3)]
    bystander_name = f"by-{username}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, bystander_name, Role.student), PASSWORD, SUITE_ARGON2)
    bystander = login(settings, bystander_name)
    result = CliRunner().invoke(cli_app, ["user", "logout-all", username])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"ended 3 sessions of {username}"
    assert not any(logged_in(b) for b in browsers)
    assert logged_in(bystander)
    assert login(settings, username)  # the password still works: only the sessions ended
    missing = CliRunner().invoke(cli_app, ["user", "logout-all", f"nobody-{username}"])
    assert missing.exit_code == 2 and "no user" in missing.stderr



def test_a_login_redoes_a_hash_made_at_another_cost(settings: Settings, sessions: sessionmaker[Session],
                                                    username: str) -> None:
    """The hash cost is the app's setting (KG_ARGON2_*): a password hashed at an older cost is
    hashed again at the app's at its owner's next login, and the login goes through."""
    dearer = SUITE_ARGON2.model_copy(update={"time_cost": SUITE_ARGON2.time_cost + 1})
    assert logged_in(login(settings.model_copy(update={"argon2": dearer}), username))
    with session_scope(sessions) as session:
        stored = session.scalars(select(User.password_hash).where(User.username == username)).one()
    assert stored is not None and f"t={dearer.time_cost}," in stored


def _shift(sessions: sessionmaker[Session], username: str, back: timedelta) -> None:
    """Move the user's sessions' last activity `back` further into the past (time passing)."""
    with session_scope(sessions) as session:
        for row in session.scalars(select(WebSession).join(User).where(User.username == username)):
            row.last_seen_at -= back


def test_a_short_idle_limit_keeps_a_working_student_logged_in(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    """With a 60 s idle limit, a request every 40 s is steady work: each one is recorded, so the
    session never reads as idle; the same pauses with nothing in between still end it."""
    short = settings.model_copy(update={"session_idle_s": 60})
    client = login(short, username)
    for _ in range(4):  # 160 s of work, a request every 40 s
        _shift(sessions, username, timedelta(seconds=40))
        assert logged_in(client)
    _shift(sessions, username, timedelta(seconds=61))
    assert not logged_in(client)


def test_a_long_idle_limit_spares_a_write_per_request(
        settings: Settings, sessions: sessionmaker[Session], username: str) -> None:
    """With the default two hours, a request 10 s after the last recorded one leaves the row as it is."""
    client = login(settings, username)
    _shift(sessions, username, timedelta(seconds=10))
    (before,) = rows_of(sessions, username)
    assert logged_in(client)
    (after,) = rows_of(sessions, username)
    assert after.last_seen_at == before.last_seen_at
