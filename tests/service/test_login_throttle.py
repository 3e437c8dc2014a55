"""The login throttle on PostgreSQL through the real app (grader.auth.throttle): 20 wrong guesses
at one account meet a doubling back-off and then the lock (429, Retry-After, the page's words),
a right password is refused while blocked and works once the block is over (time is moved by
editing the throttle's rows, or a four-second lock runs out); the same per client address
(several accounts from one address, behind a trusted proxy), on /forgot, and for API tokens
(the API and the token upload form); `grader user unlock` clears it; every step is in the
audit log."""
from __future__ import annotations

import random
import re
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.cli.main import app as cli_app
from grader.cli.main import init_database
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import AuditEvent, LoginThrottle, Role, User, utcnow
from grader.passwords import set_password
from grader.settings import Settings, SmtpSettings, ThrottleSettings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_sessions import cli_env  # noqa: F401 (fixture)

PASSWORD = "the right passphrase"
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')
ACCOUNT_WORDS = re.compile(r"Too many failed attempts for this account\. Try again in (\d+ (?:min|s)[^,]*), at "
                           r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.")
ADDRESS_WORDS = "Too many failed attempts from your network address. Try again in"
EMPTY_ZIP = b"PK\x05\x06" + bytes(18)
# Waits long enough that a loaded CI machine cannot outlast them between two requests of a test
# (a 1 s wait did: the form post after it was graded instead of refused).
WAIT_S = 30
LOCK_S = 4.0


def retry_after(answer: Response) -> int:
    return int(answer.headers["retry-after"])


def fresh_address() -> str:
    """An address no other test uses: the throttle counts per address."""
    return f"10.{random.randrange(256)}.{random.randrange(256)}.{random.randrange(1, 255)}"


def with_throttle(settings: Settings, **changes: object) -> Settings:
    """The session's settings with the shipped throttle policy (conftest lifts the address
    counts for the rest of the suite), changed by `changes`."""
    return settings.model_copy(update={"throttle": ThrottleSettings().model_copy(update=changes)})


def browser(settings: Settings, address: str | None = None, **kwargs: object) -> TestClient:
    return TestClient(create_app(settings), client=(address or fresh_address(), 40000), **kwargs)  # type: ignore[arg-type]


def csrf_of(html: str) -> str:
    found = CSRF_INPUT.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def try_login(client: TestClient, login: str, password: str) -> Response:
    return client.post("/login", data={"csrf_token": csrf_of(client.get("/login").text), "username": login,
                                       "password": password}, follow_redirects=False)


def logged_in(client: TestClient) -> bool:
    return client.get("/submissions", follow_redirects=False).status_code == 200


@pytest.fixture
def account(sessions: sessionmaker[Session]) -> tuple[str, int]:
    login = f"thr-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, login, Role.student)
        set_password(user, PASSWORD, SUITE_ARGON2)
        session.flush()
        return login, user.id


def move_time(sessions: sessionmaker[Session], key: str) -> None:
    """The block of `key` is over (as if its wait had passed)."""
    with session_scope(sessions) as session:
        session.execute(update(LoginThrottle).where(LoginThrottle.key == key)
                        .values(blocked_until=utcnow() - timedelta(seconds=1)))


def throttle_row(sessions: sessionmaker[Session], key: str) -> LoginThrottle | None:
    with session_scope(sessions) as session:
        row = session.get(LoginThrottle, key)
        session.expunge_all()
        return row


def events_of(sessions: sessionmaker[Session], user_id: int | None = None, address: str | None = None) -> list[str]:
    with session_scope(sessions) as session:
        query = select(AuditEvent.event).order_by(AuditEvent.id)
        if user_id is not None:
            query = query.where(AuditEvent.user_id == user_id)
        if address is not None:
            query = query.where(AuditEvent.address == address)
        return list(session.scalars(query))


def test_twenty_wrong_guesses_meet_the_back_off_then_the_lock_which_ends(
        settings: Settings, sessions: sessionmaker[Session], account: tuple[str, int]) -> None:
    login, user_id = account
    key = f"login:account:{user_id}"
    throttled = with_throttle(settings, backoff_s=WAIT_S)  # 5 free failures, waits of 30, 60, 120, 240 s,
    # the 10th locks for 900 s
    client = browser(throttled)
    codes, waits = [], []
    for guess in range(20):
        answer = try_login(client, login, f"wrong guess {guess}")
        codes.append(answer.status_code)
        assert 'value="' + login + '"' in answer.text  # the login typed comes back
        assert "wrong guess" not in answer.text  # never the password
        if answer.status_code != 429:
            assert "Wrong username or password." in answer.text and "Too many" not in answer.text
            continue
        waits.append(retry_after(answer))
        words = ACCOUNT_WORDS.search(answer.text)
        assert words, answer.text
        assert 'id="login-wait"' in answer.text
        if len(waits) == 1:  # a right password during the back-off is refused, unchecked
            right = try_login(client, login, PASSWORD)
            assert right.status_code == 429 and "Wrong username" not in right.text and not logged_in(client)
        if len(waits) <= 4:
            move_time(sessions, key)  # the back-off wait passes
    assert codes == [401] * 5 + [429] * 15
    assert waits[:4] == [WAIT_S, 2 * WAIT_S, 4 * WAIT_S, 8 * WAIT_S]
    assert all(895 <= wait <= 900 for wait in waits[4:]), waits  # the lock, met by guesses 10 to 20
    assert ACCOUNT_WORDS.search(try_login(client, login, "wrong again").text)[1] in ("15 min", "14 min 59 s")
    row = throttle_row(sessions, key)
    assert row is not None and row.failures == 10  # refused guesses are not counted

    during = try_login(client, login, PASSWORD)  # the right password during the lock
    assert during.status_code == 429 and ACCOUNT_WORDS.search(during.text) and not logged_in(client)
    assert throttle_row(sessions, key) is not None

    move_time(sessions, key)  # the lock has expired
    after = try_login(client, login, PASSWORD)
    assert after.status_code == 303 and logged_in(client)
    assert throttle_row(sessions, key) is None  # a right password forgets the account's failures
    assert events_of(sessions, user_id) == (["login_failed"] * 5 + ["login_failed", "throttled"] * 4
                                            + ["login_failed", "locked", "login"])


def test_a_short_lock_runs_out_on_the_clock(settings: Settings, account: tuple[str, int]) -> None:
    login, _ = account
    client = browser(with_throttle(settings, account_free=0, account_lock_after=2, backoff_s=0, lock_s=LOCK_S))
    assert try_login(client, login, "wrong").status_code == 401
    locked = try_login(client, login, "wrong")
    locked_at = time.monotonic()
    assert locked.status_code == 429 and 1 <= retry_after(locked) <= LOCK_S
    assert try_login(client, login, PASSWORD).status_code == 429
    time.sleep(max(0.0, locked_at + LOCK_S + 0.2 - time.monotonic()))
    assert try_login(client, login, PASSWORD).status_code == 303 and logged_in(client)


def test_the_throttle_holds_on_the_embedded_sqlite_database(tmp_path: Path) -> None:
    embedded = Settings.from_variables({"KG_DATA_DIR": str(tmp_path)}, throttle=ThrottleSettings(
        account_free=2, account_lock_after=3))
    init_database(embedded)
    with session_scope(make_session_factory(make_engine(embedded))) as session:
        user = get_or_create_user(session, "Embedded", Role.student)
        set_password(user, PASSWORD, SUITE_ARGON2)
        session.flush()
        key = f"login:account:{user.id}"
    client = browser(embedded)
    assert [try_login(client, "embedded", "wrong").status_code for _ in range(4)] == [401, 401, 429, 429]
    assert try_login(client, "EMBEDDED", PASSWORD).status_code == 429
    with session_scope(make_session_factory(make_engine(embedded))) as session:
        session.execute(update(LoginThrottle).where(LoginThrottle.key == key)
                        .values(blocked_until=utcnow() - timedelta(seconds=1)))
    assert try_login(client, "EMBEDDED", PASSWORD).status_code == 303 and logged_in(client)


def test_an_unknown_login_is_throttled_like_an_account(settings: Settings) -> None:
    """The answers tell no one whether a login exists: a made-up one meets the same block."""
    client = browser(with_throttle(settings, account_free=1, account_lock_after=2))
    name = f"nobody-{uuid.uuid4().hex[:6]}"
    assert try_login(client, name, "x").status_code == 401
    assert try_login(client, name.upper(), "x").status_code == 429  # the same login, typed otherwise


def test_concurrent_guesses_are_checked_one_after_the_other(
        settings: Settings, sessions: sessionmaker[Session], account: tuple[str, int]) -> None:
    """Guesses sent at once all wait for the account's row: no more are checked than the lock allows."""
    from concurrent.futures import ThreadPoolExecutor

    login, user_id = account
    app = create_app(with_throttle(settings, account_free=3, account_lock_after=3))
    clients = [TestClient(app, client=(fresh_address(), 40000)) for _ in range(12)]
    forms = [csrf_of(c.get("/login").text) for c in clients]

    def guess(i: int) -> int:
        return clients[i].post("/login", data={"csrf_token": forms[i], "username": login, "password": f"w{i}"},
                               follow_redirects=False).status_code

    with ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(guess, range(12)))
    assert sorted(codes) == [401] * 2 + [429] * 10, codes
    assert events_of(sessions, user_id).count("login_failed") == 3


def test_one_address_guessing_many_accounts_is_blocked_and_unlocked(
        settings: Settings, sessions: sessionmaker[Session], account: tuple[str, int], cli_env: None) -> None:
    """Per client address, found behind a trusted proxy from X-Forwarded-For: a forged header
    from anyone else is not believed, and `grader user unlock --address` clears the block."""
    login, user_id = account
    proxy, guesser = "192.0.2.10", fresh_address()
    throttled = with_throttle(settings, address_free=3, address_lock_after=4).model_copy(
        update={"trusted_proxies": [proxy]})
    via_proxy = browser(throttled, proxy, headers={"X-Forwarded-For": f"203.0.113.9, {guesser}"})
    for n in range(4):
        answer = try_login(via_proxy, f"victim-{n}-{uuid.uuid4().hex[:4]}", "guess")
    assert answer.status_code == 429 and ADDRESS_WORDS in answer.text
    assert try_login(via_proxy, login, PASSWORD).status_code == 429  # the address is locked, for every account
    assert throttle_row(sessions, f"login:address:{guesser}") is not None  # the client, not the proxy

    elsewhere = browser(throttled, headers={"X-Forwarded-For": guesser})  # not from the proxy: header ignored
    assert try_login(elsewhere, login, PASSWORD).status_code == 303

    result = CliRunner().invoke(cli_app, ["user", "unlock", "--address", guesser])
    assert result.exit_code == 0 and f"login:address:{guesser}" in result.output, result.output
    assert try_login(via_proxy, login, PASSWORD).status_code == 303
    assert events_of(sessions, address=guesser)[-2:] == ["unlocked", "login"]


def test_grader_user_unlock_clears_a_locked_account(
        settings: Settings, sessions: sessionmaker[Session], account: tuple[str, int], cli_env: None) -> None:
    login, user_id = account
    client = browser(with_throttle(settings, account_free=0, account_lock_after=1))
    assert try_login(client, login, "wrong").status_code == 429
    assert try_login(client, login, PASSWORD).status_code == 429
    result = CliRunner().invoke(cli_app, ["user", "unlock", login.upper()])  # logins are case-insensitive
    assert result.exit_code == 0 and f"login:account:{user_id}" in result.output, result.output
    assert try_login(client, login, PASSWORD).status_code == 303
    assert events_of(sessions, user_id)[-2:] == ["unlocked", "login"]
    audit = CliRunner().invoke(cli_app, ["user", "audit", login, "--limit", "3"])
    assert audit.exit_code == 0 and audit.output.splitlines()[0].split("\t")[1:3] == ["login", "web"]
    assert CliRunner().invoke(cli_app, ["user", "unlock"]).exit_code == 2


def test_the_password_page_counts_a_wrong_current_password(
        settings: Settings, sessions: sessionmaker[Session], account: tuple[str, int]) -> None:
    """A borrowed session cannot be used to guess the password on /settings/password."""
    login, user_id = account
    client = browser(with_throttle(settings, account_free=1, account_lock_after=2))
    assert try_login(client, login, PASSWORD).status_code == 303

    def change(current: str) -> Response:
        form = client.get("/settings/password").text
        return client.post("/settings/password", data={"csrf_token": csrf_of(form), "current": current,
                                                       "new": "another passphrase", "again": "another passphrase"})
    assert change("guess one").status_code == 400
    blocked = change("guess two")
    assert blocked.status_code == 429 and "for this account" in blocked.text
    assert change(PASSWORD).status_code == 429  # refused, unchecked, while locked


def test_forgot_is_throttled_per_account(settings: Settings, account: tuple[str, int]) -> None:
    """Every request on /forgot counts (the page answers the same whether a link went out)."""
    login, _ = account
    mailing = with_throttle(settings, account_free=2, account_lock_after=5, backoff_s=WAIT_S).model_copy(update={
        "smtp": SmtpSettings(host="127.0.0.1", port=9, security="none", from_="grader@example.edu"),
        "public_url": "https://grader.example.edu"})  # the account has no address: nothing is sent
    client = browser(mailing)

    def ask(name: str) -> Response:
        return client.post("/forgot", data={"csrf_token": csrf_of(client.get("/forgot").text), "username": name})
    assert [ask(login).status_code for _ in range(3)] == [200, 200, 200]  # the third begins a wait
    refused = ask(login.upper())
    assert refused.status_code == 429 and WAIT_S - 10 <= retry_after(refused) <= WAIT_S
    assert ACCOUNT_WORDS.search(refused.text) and f'value="{login.upper()}"' in refused.text
    assert 'id="forgot-sent"' not in refused.text


@pytest.fixture
def token(sessions: sessionmaker[Session], account: tuple[str, int]) -> str:
    with session_scope(sessions) as session:
        user = session.get(User, account[1])
        assert user is not None
        return issue_token(session, user, "thr")


def test_invalid_api_tokens_block_their_address(
        settings: Settings, sessions: sessionmaker[Session], token: str) -> None:
    throttled = with_throttle(settings, address_free=2, address_lock_after=4, backoff_s=WAIT_S)
    address = fresh_address()
    api = browser(throttled, address)
    codes = [api.get("/api/v1/submissions", headers=auth(f"kg_wrong{n}")).status_code for n in range(3)]
    assert codes == [401, 401, 429]
    refused = api.get("/api/v1/submissions", headers=auth(token))  # a valid token from the blocked address
    assert refused.status_code == 429 and WAIT_S - 10 <= retry_after(refused) <= WAIT_S
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert re.search(r"try again in \d+ s", refused.json()["error"]["message"], re.IGNORECASE), refused.text
    assert api.get("/api/v1/submissions").status_code == 401  # no token sent: nothing counted, nothing refused
    assert browser(throttled).get("/api/v1/submissions", headers=auth(token)).status_code == 200  # elsewhere
    form = api.post("/upload", data={"token": token}, files={"file": ("a.zip", EMPTY_ZIP)})
    assert form.status_code == 429 and ADDRESS_WORDS in form.text and "retry-after" in form.headers
    assert events_of(sessions, address=address) == ["token_failed"] * 3 + ["throttled"]
