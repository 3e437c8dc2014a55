"""Logging in with a password, under the throttle (grader.auth.throttle) and into the audit log
(grader.auth.audit): the use case behind the login form, the web page being its adapter.

A login names an account case-insensitively, by its login or by the e-mail address the roster
gave it (find_login). A right password that a course's roster import set is refused while
another course holds the account too (grader.auth.set_up), and so is any password of an
account whose site role may not use one here (grader.auth.password_roles). The attempt holds the account's
throttle row while it checks, so that concurrent guesses at one account are checked one after
the other and each meets the block of those before it.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.audit import Event, Via, record
from grader.auth.credentials import Principal, authenticate
from grader.auth.password_roles import PasswordRoles
from grader.auth.set_up import password_refusal, refused_use
from grader.auth.throttle import Block, Door, Throttle, account_key, address_key
from grader.db import session_scope
from grader.models import User, login_key
from grader.passwords import verify_password
from grader.service import find_user
from grader.settings import Argon2Settings, ThrottleSettings


def find_login(session: Session, typed: str) -> User | None:
    """The account a login form names: its login (grader.service.find_user: exact, else
    case-insensitive), else the one account whose e-mail address it is (case-insensitive; an
    address two accounts share names neither)."""
    typed = typed.strip()
    if not typed:
        return None
    user = find_user(session, typed)
    if user is not None or "@" not in typed:
        return user
    by_email = session.scalars(select(User).where(func.lower(User.email) == login_key(typed)).limit(2)).all()
    return by_email[0] if len(by_email) == 1 else None


@dataclass(frozen=True)
class Attempt:
    """How a login attempt ended: `user` logged in, or refused; `block` is the block that
    refused it unchecked (`checked` False) or the one its failure began; `refused`, why a right
    password did not log in (grader.auth.set_up)."""

    user: User | None
    block: Block | None
    checked: bool
    refused: str | None = None


def attempt_login(session: Session, throttle: Throttle, cost: Argon2Settings, roles: PasswordRoles, typed: str,
                  password: str, address: str) -> Attempt:
    """Check `password` for the account `typed` names, unless the account or the address is
    blocked; count a failure, forget the account's on success, and record the events (the
    caller commits). A right password of a role `roles` refuses is refused only once checked:
    the answer tells a guesser nothing of the account's role."""
    target = find_login(session, typed)
    account = account_key(Door.login, target.id if target is not None else None, typed)
    keys = [account, address_key(Door.login, address)]
    throttle.hold(session, account)
    block = throttle.blocked(session, keys)
    if block is not None:
        return Attempt(None, block, checked=False)
    user = verify_password(target, password, cost)
    if user is not None and not roles.allows(user):
        why = roles.refusal(user)
        record(session, Event.refused, Via.web, user=user, address=address, detail=f"log in with a password: {why}")
        return Attempt(None, None, checked=True, refused=why)
    refused = password_refusal(session, user) if user is not None else None
    if user is not None and refused is not None:
        refused_use(session, user, "log in with the first password", refused, address)
        return Attempt(None, None, checked=True, refused=refused)
    if user is not None:
        throttle.succeeded(session, account)
        user.note_first_login()
        record(session, Event.login, Via.web, user=user, address=address)
        return Attempt(user, None, checked=True)
    started = failed(session, throttle, Event.login_failed, Via.web, keys, target=target, typed=typed,
                     address=address)
    return Attempt(None, started, checked=True)


def confirm_password(session: Session, throttle: Throttle, cost: Argon2Settings, user: User, password: str,
                     address: str) -> Attempt:
    """The current password a logged-in user gives to change it: a failure counts as a failed
    login of their account (a borrowed session cannot be used to guess it), and a blocked
    account is refused unchecked."""
    account = account_key(Door.login, user.id, "")
    throttle.hold(session, account)
    block = throttle.blocked(session, [account])
    if block is not None:
        return Attempt(None, block, checked=False)
    if verify_password(user, password, cost) is not None:
        return Attempt(user, None, checked=True)
    return Attempt(None, failed(session, throttle, Event.login_failed, Via.web, [account], target=user,
                                typed=user.username, address=address), checked=True)


class TokenDoor:
    """API tokens from one client address (the API's bearer token, the token upload form): an
    address blocked by its failures is refused before any token is looked up; each token that
    names no live token counts, in a transaction of its own (the refused request's is rolled
    back)."""

    def __init__(self, sessions: sessionmaker[Session], settings: ThrottleSettings, address: str, via: Via) -> None:
        self.sessions, self.throttle, self.address, self.via = sessions, Throttle(settings), address, via
        self.keys = [address_key(Door.token, address)]

    def check(self, session: Session, token: str) -> Principal | Block | None:
        """The live token's principal; else the block that refuses it (the address's, which
        this failure may have begun); None: an invalid token, counted, no block yet."""
        block = self.throttle.blocked(session, self.keys)
        if block is not None:
            return block
        principal = authenticate(session, token)
        if principal is not None:
            return principal
        with session_scope(self.sessions) as own:
            return failed(own, self.throttle, Event.token_failed, self.via, self.keys, target=None, typed="",
                          address=self.address)


def failed(session: Session, throttle: Throttle, event: Event, via: Via, keys: list[str], *,
           target: User | None, typed: str, address: str, detail: str = "") -> Block | None:
    """Count a failure on `keys` and record it (with `detail`), with each block it began; the
    longest of those."""
    record(session, event, via, user=target, login=typed or None, address=address, detail=detail)
    started = throttle.failed(session, keys)
    for block, failures in started:
        record(session, Event.locked if block.locked else Event.throttled, via, user=target, login=typed or None,
               address=address, detail=f"{block.key}: {failures} failures, refused until "
                                       f"{block.until:%Y-%m-%d %H:%M:%S} UTC")
    return max((block for block, _ in started), key=lambda b: b.until, default=None)
