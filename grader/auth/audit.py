"""The audit log (`audit_events`): a row per security event, never changed. Read it with
`grader audit` (grader/cli/accounts.py) or SQL.

What is recorded, and why not more: each failed login, /forgot request and unknown API token
that was checked (the throttle bounds how many there can be), each block the throttle starts
(`throttled`) and each lock (`locked`), unlocks, successful logins, reset links issued and
used, renamed logins, every change of an account's password, e-mail, staff mail or site role,
every enrollment of an existing account and every refusal of the ownership rules
(grader.auth.ownership: who tried what on whose account, and the sentence they got) and of a
course's set-up that no longer opens an account (grader.auth.set_up: the login, link or /forgot
refused), and every change of an assignment's schedule or policies (grader.schedule_changes: the
settings before and after, so it can be undone), and every change of a course's TA powers or run
quotas (grader.staff_settings: what, before and after), and every run scored again under a changed
rubric (grader.rescoring: its score and points before and after). A request refused while its key is blocked is not recorded: it was not checked, and a
guesser hammering a lock would otherwise fill the table.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import AuditEvent, User, utcnow


class Event(enum.StrEnum):
    login = "login"  # a right password
    login_failed = "login_failed"
    throttled = "throttled"  # a back-off wait began (key and seconds in the detail)
    locked = "locked"  # a lock began
    unlocked = "unlocked"
    token_failed = "token_failed"  # an API token that names no live token
    reset_asked = "reset_asked"  # /forgot, whether or not a link was sent
    reset_issued = "reset_issued"
    reset_used = "reset_used"
    renamed = "renamed"  # an account's login changed (grader user rename)
    password_changed = "password_changed"  # by its person (their password page) or the operator
    email_changed = "email_changed"  # the detail: before -> after
    staff_mail = "staff_mail"  # the person turned their courses' staff mail on or off
    site_admin = "site_admin"  # granted or revoked (grader user admin)
    enrolled = "enrolled"  # an existing account enrolled in a course, or its part there changed
    refused = "refused"  # an ownership rule refused the actor (the detail: what, and the sentence)
    identity_linked = "identity_linked"  # an LMS's or the SSO provider's identity tied to the account
    identity_refused = "identity_refused"  # a launch or SSO login whose identity is another account's, or
    # that would tie a second identity of one issuer to the account (the detail: issuer, subject, why)
    schedule_changed = "schedule_changed"  # an assignment's schedule or policies (the detail: JSON, before/after)
    settings_changed = "settings_changed"  # a course's TA powers or run quota, an assignment's run quota
    # (grader.staff_settings; the detail: what, before -> after)
    rescored = "rescored"  # a run's stored measurements scored again under the current rubric (grader.rescoring;
    # the detail: JSON, the run's score and its changed problems' points before and after; `user`: the student)


class Via(enum.StrEnum):
    web = "web"
    api = "api"
    cli = "cli"
    lti = "lti"  # an LMS launch or its services
    sso = "sso"  # the single sign-on login (OpenID Connect)
    saml = "saml"  # the SAML 2.0 single sign-on login


def record(session: Session, event: Event, via: Via, *, user: User | None = None, login: str | None = None,
           address: str | None = None, actor: User | None = None, detail: str = "") -> AuditEvent:
    """Add one event (the caller commits) and return it. `user` is the account concerned, `login`
    its name as typed when no account is known, `actor` who acted on someone else's account."""
    name = user.username if user is not None else login
    row = AuditEvent(
        at=utcnow(), event=event.value, via=via.value, user_id=user.id if user is not None else None,
        login=name[:256] if name else None, address=address[:64] if address else None,
        actor_id=actor.id if actor is not None else None, detail=detail[:512])
    session.add(row)
    return row


def recent(session: Session, limit: int = 50, since: datetime | None = None,
           login: str | None = None) -> Sequence[AuditEvent]:
    """The newest events first, optionally since an instant or about one login (as recorded)."""
    query = select(AuditEvent).order_by(AuditEvent.at.desc(), AuditEvent.id.desc()).limit(limit)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if login is not None:
        query = query.where(AuditEvent.login == login)
    return session.scalars(query).all()
