"""Guessing is slowed, then stopped: failed logins, /forgot requests and unknown API tokens are
counted per account and per client address, in the database (`login_throttles`, a row per
key), so every web process sees the same counts.

A key is `<door>:<kind>:<value>`: the door (login, forgot, token, sso), then `account:<id>` (a
known account), `name:<login>` (a login that names no account: counted the same way, so the
answers tell no one which logins exist) or `address:<ip>`. The first `free` failures of a key
cost nothing; each further one blocks the key for a wait that doubles from `backoff_s`; the
`lock_after`-th locks it for `lock_s` (every later failure locks it again). While blocked, a
door refuses without checking anything (a right password included) and nothing is counted:
a refusal tells a guesser nothing, and costs one read. A key's count restarts once `forget_s`
pass without a failure; a right password clears its account's (never its address's: one
right password must not buy a guesser another round on the same address).
"""
from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import case, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from grader.course.deadlines import duration_text, show_instant
from grader.models import LoginThrottle, utcnow
from grader.settings import ThrottleSettings


class Door(enum.StrEnum):
    login = "login"
    forgot = "forgot"
    token = "token"
    sso = "sso"  # single sign-on answers (OpenID Connect or SAML) that logged nobody in (per address only: grader.pages.sign_in)


@dataclass(frozen=True)
class Policy:
    free: int
    lock_after: int
    backoff_s: float
    lock_s: float
    forget_s: float

    def wait_s(self, failures: int) -> float:
        """How long a key is blocked after its `failures`-th failure (0: not at all)."""
        if failures >= self.lock_after:
            return self.lock_s
        if failures <= self.free or self.backoff_s <= 0:
            return 0.0
        return min(self.backoff_s * 2.0 ** (failures - self.free - 1), self.lock_s)

    def locks(self, failures: int) -> bool:
        return failures >= self.lock_after


def policies(settings: ThrottleSettings) -> dict[str, Policy]:
    """The policy of each kind of key: accounts (and names), addresses."""
    account = Policy(settings.account_free, settings.account_lock_after, settings.backoff_s, settings.lock_s,
                     settings.forget_s)
    address = Policy(settings.address_free, settings.address_lock_after, settings.backoff_s, settings.lock_s,
                     settings.forget_s)
    return {"account": account, "name": account, "address": address}


def account_key(door: Door, user_id: int | None, typed: str) -> str:
    """The key of the account a door was asked about: its id when the login names one, else the
    login as typed (lower case, cut: the column is bounded)."""
    return f"{door}:account:{user_id}" if user_id is not None else f"{door}:name:{typed.strip().casefold()[:200]}"


def address_key(door: Door, address: str) -> str:
    return f"{door}:address:{address}"


@dataclass(frozen=True)
class Block:
    """A key that is refused until `until`: `locked` (the lock, not a back-off wait), and
    whether it is an account's or an address's."""

    key: str
    until: datetime
    locked: bool

    @property
    def of_address(self) -> bool:
        return _kind(self.key) == "address"

    def retry_after_s(self, now: datetime | None = None) -> int:
        """Whole seconds to wait (Retry-After), at least 1."""
        return max(1, math.ceil((self.until - (now or utcnow())).total_seconds()))


def refusal_words(block: Block, zone: ZoneInfo, now: datetime | None = None) -> str:
    """The sentence a refused visitor reads: whose attempts, and when to try again (in `zone`)."""
    whose = "from your network address" if block.of_address else "for this account"
    wait = duration_text(timedelta(seconds=block.retry_after_s(now)))
    return f"Too many failed attempts {whose}. Try again in {wait}, at {show_instant(block.until, zone)}."


def _kind(key: str) -> str:
    return key.split(":", 2)[1]


class Throttle:
    def __init__(self, settings: ThrottleSettings) -> None:
        self.policies = policies(settings)

    def blocked(self, session: Session, keys: Iterable[str], now: datetime | None = None) -> Block | None:
        """The block that lasts longest among `keys`, or None when none is blocked now."""
        now = now or utcnow()
        row = session.scalars(select(LoginThrottle).where(LoginThrottle.key.in_(list(keys)),
                                                          LoginThrottle.blocked_until > now)
                              .order_by(LoginThrottle.blocked_until.desc()).limit(1)
                              .execution_options(populate_existing=True)).first()
        if row is None or row.blocked_until is None:
            return None
        return Block(row.key, row.blocked_until, self.policies[_kind(row.key)].locks(row.failures))

    def failed(self, session: Session, keys: Iterable[str], now: datetime | None = None) -> list[tuple[Block, int]]:
        """Count a failure for each key; the blocks it starts, each with its key's failure count.
        Atomic per key under concurrent requests (an UPDATE ... RETURNING of the count)."""
        now = now or utcnow()
        started = []
        for key in keys:
            policy = self.policies[_kind(key)]
            failures = self._count(session, key, now, policy)
            wait = policy.wait_s(failures)
            if wait > 0:
                until = now + timedelta(seconds=wait)
                session.execute(update(LoginThrottle).where(LoginThrottle.key == key).values(
                    blocked_until=case((LoginThrottle.blocked_until.is_(None), until),
                                       (LoginThrottle.blocked_until < until, until),
                                       else_=LoginThrottle.blocked_until)))
                started.append((Block(key, until, policy.locks(failures)), failures))
        if started:
            self.prune(session, now)
        return started

    def _count(self, session: Session, key: str, now: datetime, policy: Policy) -> int:
        forgotten_before = now - timedelta(seconds=policy.forget_s)
        for _ in range(2):
            counted = session.execute(
                update(LoginThrottle).where(LoginThrottle.key == key)
                .values(failures=case((LoginThrottle.last_failure_at < forgotten_before, 1),
                                      else_=LoginThrottle.failures + 1), last_failure_at=now)
                .returning(LoginThrottle.failures)).scalar_one_or_none()
            if counted is not None:
                return int(counted)
            if _create(session, key, now, failures=1):
                return 1
        raise RuntimeError(f"the throttle row {key!r} could neither be updated nor created")

    def hold(self, session: Session, key: str, now: datetime | None = None) -> None:
        """Lock `key`'s row until the transaction ends (creating it, with no failure, if need
        be), so that concurrent attempts on one account are checked one after the other: each
        sees the failures and the block of those before it (PostgreSQL's row lock; SQLite
        writes one transaction at a time anyway)."""
        _create(session, key, now or utcnow(), failures=0)
        session.execute(select(LoginThrottle.key).where(LoginThrottle.key == key).with_for_update())

    def succeeded(self, session: Session, key: str) -> None:
        """A right password: the account's failures are forgotten."""
        session.execute(delete(LoginThrottle).where(LoginThrottle.key == key))

    def prune(self, session: Session, now: datetime | None = None) -> int:
        """Forget the keys no longer blocked whose last failure is older than any policy keeps."""
        now = now or utcnow()
        oldest = now - timedelta(seconds=max(p.forget_s for p in self.policies.values()))
        result = session.execute(delete(LoginThrottle).where(
            LoginThrottle.last_failure_at < oldest,
            (LoginThrottle.blocked_until.is_(None)) | (LoginThrottle.blocked_until <= now)))
        return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _create(session: Session, key: str, now: datetime, failures: int) -> bool:
    """Insert `key`'s row unless it exists; whether it was inserted (concurrent inserts: one wins)."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    created = session.execute(insert(LoginThrottle).values(key=key, failures=failures, last_failure_at=now)
                              .on_conflict_do_nothing(index_elements=["key"]))
    return bool(created.rowcount)  # type: ignore[attr-defined]


def unlock(session: Session, keys: Iterable[str]) -> list[str]:
    """Remove the throttle rows of `keys` (failures and blocks alike); the keys that had one."""
    return sorted(session.scalars(delete(LoginThrottle).where(LoginThrottle.key.in_(list(keys)))
                                  .returning(LoginThrottle.key)).all())


def account_keys(user_id: int, username: str) -> list[str]:
    """Every key of an account at every door: by its id, and by its name as typed before it existed."""
    return [account_key(door, user_id, "") for door in Door] + [account_key(door, None, username) for door in Door]


def address_keys(address: str) -> list[str]:
    return [address_key(door, address) for door in Door]
