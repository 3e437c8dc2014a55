"""One-time password reset links: a site administrator (the account's page) or the server's
operator (`grader user reset-link`) issues a link and hands it to the user; where the service
sends e-mail (KG_SMTP_HOST and KG_PUBLIC_URL set), anyone also asks for one on /forgot and it
is e-mailed to the address on their account (`self_service_target`). An instructor issues one
only as a first-login link, to an account they still set up (grader.auth.ownership,
grader.auth.first_logins); it opens the account only while no other course holds it
(grader.auth.set_up), as /forgot mails an address that a course set.

The link carries a random 256-bit token; `password_resets` keeps only its sha256. A link works
once, until KG_PASSWORD_RESET_MAX_AGE_S after it was issued; using it sets the new password,
ends every browser session of the user (websession.change_password), voids the user's other
unused links, and makes the account its person's (User.note_first_login).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.auth.credentials import hash_token
from grader.auth.logins import failed, find_login
from grader.auth.password_roles import PasswordRoles
from grader.auth.sessions import change_password
from grader.auth.set_up import elsewhere_words, email_refused, link_refusal, refused_use, set_up_course
from grader.auth.throttle import Block, Door, Throttle, account_key, address_key
from grader.models import PasswordReset, User, utcnow
from grader.passwords import check_new_password
from grader.settings import Argon2Settings

RESET_PATH = "/reset/"


def issue_reset(session: Session, user: User, max_age_s: int, issued_by: User | None = None) -> str:
    """A new reset token for `user` (the caller builds the link with RESET_PATH); shown once.
    An instructor's is tied to the course they set the account up for (grader.auth.set_up)."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    session.add(PasswordReset(user_id=user.id, token_hash=hash_token(token), created_at=now,
                              expires_at=now + timedelta(seconds=max_age_s),
                              issued_by_id=issued_by.id if issued_by is not None else None,
                              set_up_by_course_id=set_up_course(session, issued_by, user)))
    session.flush()
    return token


def reset_link(public_url: str, token: str) -> str:
    """The link of a reset token on the service at `public_url` (KG_PUBLIC_URL); its path alone
    when that is empty."""
    return public_url.rstrip("/") + RESET_PATH + token


# A link e-mailed on request at most this often per account: the form cannot be used to flood
# a student's mailbox.
SELF_SERVICE_INTERVAL = timedelta(minutes=5)


def self_service_target(session: Session, user: User | None, roles: PasswordRoles, address: str) -> User | None:
    """The account a reset link asked for on /forgot is e-mailed to: `user` (the account the
    login typed names, grader.auth.logins.find_login), when its site role may log in with a
    password (`roles`, KG_PASSWORD_LOGIN_ROLES) and it has an e-mail address (which
    only its person, a site administrator or, before its first use, its instructor set:
    grader.auth.ownership) that is not one a course set for an account another course holds
    too (grader.auth.set_up; refused and recorded), and was issued no link in the last
    SELF_SERVICE_INTERVAL; else None. The page answers the same either way, so it tells no one
    whether the login exists."""
    if user is None or not user.email or not roles.allows(user):
        return None
    if email_refused(session, user):
        refused_use(session, user, "e-mail a reset link on /forgot", elsewhere_words(user), address)
        return None
    recent = session.scalar(select(PasswordReset.id).where(
        PasswordReset.user_id == user.id, PasswordReset.created_at > utcnow() - SELF_SERVICE_INTERVAL).limit(1))
    return None if recent is not None else user


@dataclass(frozen=True)
class Asked:
    """What a request on /forgot did: refused by the throttle (`block`), or counted, and a link
    issued to `target` (`token`, to be e-mailed) when self_service_target allows one."""

    block: Block | None
    target: User | None = None
    token: str | None = None


def ask_for_reset(session: Session, throttle: Throttle, roles: PasswordRoles, asked: str, address: str,
                  max_age_s: int) -> Asked:
    """A reset link asked for on /forgot by the login (or e-mail) `asked` from `address`: every
    request counts towards the throttle of the account and of the address, a blocked one does
    nothing else; the events are recorded (the caller commits)."""
    account = find_login(session, asked)
    keys = [account_key(Door.forgot, account.id if account else None, asked), address_key(Door.forgot, address)]
    block = throttle.blocked(session, keys)
    if block is not None:
        return Asked(block)
    failed(session, throttle, Event.reset_asked, Via.web, keys, target=account, typed=asked, address=address)
    target = self_service_target(session, account, roles, address)
    if target is None:
        return Asked(None)
    token = issue_reset(session, target, max_age_s)
    record(session, Event.reset_issued, Via.web, user=target, address=address, detail="e-mailed on /forgot")
    return Asked(None, target, token)


def _live(token: str, now: datetime) -> tuple[ColumnElement[bool], ...]:
    """The conditions of an unused, unexpired reset named by `token`."""
    return (PasswordReset.token_hash == hash_token(token), PasswordReset.used_at.is_(None),
            PasswordReset.expires_at > now)


def live_reset(session: Session, token: str) -> PasswordReset | None:
    """The unused, unexpired reset the token names, or None."""
    return session.scalar(select(PasswordReset).where(*_live(token, utcnow())))


class LinkRefused(Exception):
    """A live link that does not set a password now (grader.auth.set_up.link_refusal), in a
    sentence saying who can instead; the refusal is recorded."""


def usable_reset(session: Session, token: str, address: str) -> PasswordReset | None:
    """The live reset the token names (None: unknown, used or expired); LinkRefused, recorded,
    when a course's staff issued it for an account it no longer opens."""
    reset = live_reset(session, token)
    why = link_refusal(session, reset) if reset is not None else None
    if reset is not None and why is not None:
        refused_use(session, reset.user, "use a first-login link", why, address)
        raise LinkRefused(why)
    return reset


def redeem_reset(session: Session, token: str, password: str, cost: Argon2Settings, min_length: int,
                 address: str) -> User | None:
    """Set the password of the user the live token names, using the token up; None (nothing
    changed) when the token is unknown, used or expired; ValueError when the password is too
    short (the link stays usable), LinkRefused when it may not be used (usable_reset). The
    single use holds under concurrent requests: the token is marked used by one conditional
    UPDATE."""
    usable_reset(session, token, address)
    check_new_password(password, min_length)
    now = utcnow()
    used = session.execute(
        update(PasswordReset)
        .where(*_live(token, now))
        .values(used_at=now)
        .returning(PasswordReset.user_id)
    ).scalar_one_or_none()
    if used is None:
        return None
    user = session.get(User, used)
    assert user is not None  # the row's foreign key cascades
    change_password(session, user, password, cost, min_length)
    user.note_first_login()  # a password they chose: the account is theirs from now on
    session.execute(update(PasswordReset).where(PasswordReset.user_id == user.id, PasswordReset.used_at.is_(None))
                    .values(used_at=now))
    return user
