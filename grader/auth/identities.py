"""Identities at university systems (external_identities): an LMS's LTI 1.3 user or the single
sign-on provider's, each an (issuer, subject) pair tied to one account for good.

The rules every door follows (grader.lti.launch, grader.auth.sso, grader.auth.saml):
- an account is found through its pair only, never through a name or an e-mail address, which
  an LMS lets its users edit and two systems may give to different people;
- a pair names one account: once tied, it never moves to another account, and a launch or login
  that would tie it elsewhere is refused and audited;
- an account holds at most one subject per issuer: a second one of the same issuer (another LMS
  user, or another person at the provider) is refused and audited too.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.models import ExternalIdentity, User, utcnow


@dataclass(frozen=True)
class Identity:
    issuer: str
    subject: str
    kind: str  # "lti" | "sso" | "saml"

    def describe(self) -> str:
        return f"{self.issuer} user {self.subject}"


class IdentityRefused(Exception):
    """The identity is tied to another account, or the account already has one of that issuer."""


def account_of(db: Session, identity: Identity) -> User | None:
    """The account the identity is tied to (its last use noted), or None."""
    row = db.scalar(select(ExternalIdentity).where(ExternalIdentity.issuer == identity.issuer,
                                                   ExternalIdentity.subject == identity.subject))
    if row is None:
        return None
    row.last_seen_at = utcnow()
    return row.user


def tie(db: Session, identity: Identity, user: User, via: Via) -> None:
    """Tie the identity to `user` (nothing to do when it already is); IdentityRefused, audited,
    when it is another account's or `user` holds another subject of the same issuer."""
    if _tied_to(db, identity, user, via):
        return
    try:
        with db.begin_nested():
            db.add(ExternalIdentity(issuer=identity.issuer, subject=identity.subject, kind=identity.kind, user_id=user.id))
    except IntegrityError:
        # Tied at the same instant by the person's other launch or a roster sync: read it again
        # (ours then, or another account's: refused as above).
        if _tied_to(db, identity, user, via):
            return
        raise
    record(db, Event.identity_linked, via, user=user, detail=identity.describe())


def _tied_to(db: Session, identity: Identity, user: User, via: Via) -> bool:
    """Whether the identity is already `user`'s; IdentityRefused, audited, where a tie would break
    a rule; False where it is no one's and `user` holds no other of its issuer."""
    rows = db.scalars(select(ExternalIdentity).where(ExternalIdentity.issuer == identity.issuer)
                      .where((ExternalIdentity.subject == identity.subject) | (ExternalIdentity.user_id == user.id))).all()
    for row in rows:
        if row.subject == identity.subject and row.user_id == user.id:
            return True
        why = (f"{identity.describe()} is tied to another account" if row.subject == identity.subject
               else f"this account is tied to another {identity.issuer} user")
        held = "" if row.subject == identity.subject else f" ({row.subject})"  # for the audit, not the page
        record(db, Event.identity_refused, via, user=user, detail=f"{identity.describe()}: {why}{held}")
        raise IdentityRefused(why)
    return False


def made_for(db: Session, identity: Identity, make: Callable[[], User], via: Via) -> User:
    """A new account (`make`'s) tied to `identity`; or, where the same person's other sign-in or
    launch made theirs at the same instant (ours meets its unique keys, or finds the identity
    tied meanwhile), that account: one person, one account, and no error page for either."""
    try:
        with db.begin_nested():  # what a race undoes: our account and the refusal it would audit
            user = make()
            db.add(user)
            db.flush()
            tie(db, identity, user, via)
            return user
    except (IntegrityError, IdentityRefused):
        found = account_of(db, identity)
        if found is None:
            raise
        return found
