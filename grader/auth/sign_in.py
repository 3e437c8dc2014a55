"""What both single sign-on doors share (OpenID Connect, grader.auth.sso; SAML 2.0,
grader.auth.saml): the refusal a sign-in that logs nobody in raises, the person a checked
answer names, the login their attribute or claim gives, and the account they log in to, by the
rules of grader.auth.identities."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from grader.auth.audit import Via
from grader.auth.identities import Identity, IdentityRefused, account_of, made_for, tie
from grader.course.roster_csv import EMAIL, LOGIN, MAX_EMAIL, MAX_LOGIN
from grader.models import User
from grader.roles import Role
from grader.service import find_user


class SsoRefused(Exception):
    """A sign-in that logs nobody in: the sentence the login page shows, with what the audit
    log keeps beside it (`detail`, the login claimed and the account concerned, when known)."""

    def __init__(self, sentence: str, *, detail: str = "", login: str | None = None,
                 user: User | None = None) -> None:
        super().__init__(sentence)
        self.detail, self.login, self.user = detail, login, user


@dataclass(frozen=True)
class Person:
    """Who the university says signed in: their identity, the login its claim or attribute
    gives (lower case) and, when it gave them, their name and e-mail address."""

    identity: Identity
    login: str
    name: str | None
    email: str | None


def checked_login(given: object, what: str, whose: str) -> str:
    """The login `given` names (stripped, lower case); SsoRefused when it is missing or no login
    here. `what` names the claim or attribute in the sentences, `whose` the person in the audit."""
    if not isinstance(given, str) or not given.strip():
        raise SsoRefused(f"The sign-in service did not say which account is yours (its answer has no “{what}”), "
                         "so nobody was logged in. Tell the operator of this service.",
                         detail=f"no {what} for {whose}")
    login = given.strip().lower()
    if len(login) > MAX_LOGIN or not LOGIN.match(login):
        raise SsoRefused(f"Your {what} at the university, “{given.strip()[:80]}”, cannot be a login here "
                         f"(letters, digits and . _ @ + - only, at most {MAX_LOGIN}), so nobody was logged in. Tell "
                         "the operator of this service.", detail=f"{what} {given[:200]!r} is no login", login=login)
    return login


def checked_email(given: object) -> str | None:
    """The e-mail address `given` is (stripped, lower case), or None when it is none."""
    email = given.strip().lower() if isinstance(given, str) else None
    return email if email and len(email) <= MAX_EMAIL and EMAIL.match(email) else None


def account_for(db: Session, person: Person, via: Via) -> User:
    """The account `person` logs in to: the one their identity is tied to; else the one their
    login names, tied to the identity now (its first sign-in); else a new student account with
    their name and address, no password and no course. SsoRefused (the refusal audited by
    grader.auth.identities) when the account their login names holds another person's identity
    of this provider."""
    user = account_of(db, person.identity)
    if user is not None:
        return user
    user = find_user(db, person.login)
    if user is None:
        return made_for(db, person.identity, lambda: User(username=person.login, role=Role.student,
                                                           full_name=person.name, email=person.email), via)
    try:
        tie(db, person.identity, user, via)
    except IdentityRefused as exc:
        raise SsoRefused(f"The account “{user.username}” here is tied to another person's university sign-in, so "
                         "nobody was logged in. If the account is yours, ask a site administrator of this service.",
                         detail=str(exc), login=person.login, user=user) from exc
    return user
