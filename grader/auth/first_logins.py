"""First-login links: how an instructor hands out (again) the way into the accounts of their
course that nobody has used yet (grader.auth.ownership decides which), one at a time from the
members page or the roster page, or for the whole course at once.

A first-login link is a one-time password reset link (grader.auth.password_reset): its person
chooses a password with it, and from then on the account is theirs. The whole course's
links replace first passwords lost before their download: each account that was never used
gets a new link, e-mailed to it where the service sends mail and the account has an address,
and listed in a CSV for the instructor otherwise (accounts they may not set up are listed with
why, and get nothing). Every link issued is recorded (grader.auth.audit).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.auth.ownership import refusals
from grader.auth.password_reset import issue_reset, reset_link
from grader.course.membership import members_of
from grader.models import Course, User
from grader.settings import Settings


def issue_first_login(session: Session, issuer: User, target: User, settings: Settings, where: str,
                      address: str | None) -> str:
    """A first-login link for `target` (the caller checked that `issuer` may), recorded with
    where it goes (`where`: shown on a page, e-mailed, in a CSV)."""
    token = issue_reset(session, target, settings.password_reset_max_age_s, issued_by=issuer)
    record(session, Event.reset_issued, Via.web, user=target, actor=issuer, address=address,
           detail=f"first-login link, {where}")
    return reset_link(settings.public_url, token)


def mails_links(settings: Settings) -> bool:
    """Whether links may go by e-mail: the service sends mail, and links are whole (built on
    KG_PUBLIC_URL; a path alone is no use in a mail)."""
    return bool(settings.smtp.host and settings.public_url)


@dataclass(frozen=True)
class FirstLogin:
    """One account of a course that was never used, and what the course's re-issue did for it."""

    login: str
    email: str | None  # where its link is to be e-mailed; None: not by mail
    link: str | None  # its new link; None: none issued
    note: str  # what happened, in words

    @property
    def mailed(self) -> bool:
        return self.email is not None and self.link is not None


def never_used(session: Session, course: Course) -> list[User]:
    """The members of `course` whose account was never used, by part then login."""
    return [user for user, _ in members_of(session, course) if user.first_login_at is None]


def reissue(session: Session, issuer: User, course: Course, settings: Settings,
            address: str | None) -> list[FirstLogin]:
    """A new first-login link for each account of `course` never used that `issuer` may set up
    (the caller mails those `mailed`); the others listed with why."""
    accounts = never_used(session, course)
    why_not = refusals(session, issuer, accounts)
    by_mail = mails_links(settings)
    done = []
    for user in accounts:
        refused = why_not[user.id]
        if refused is not None:
            done.append(FirstLogin(user.username, None, None, f"no link: {refused.words}"))
        elif by_mail and user.email:
            link = issue_first_login(session, issuer, user, settings, f"e-mailed to {user.email} ({course.slug})",
                                     address)
            done.append(FirstLogin(user.username, user.email, link, f"e-mailed to {user.email}"))
        else:
            link = issue_first_login(session, issuer, user, settings, f"in the CSV of {course.slug}", address)
            done.append(FirstLogin(user.username, None, link, "the link is in this file"))
    return done


def links_csv(done: list[FirstLogin]) -> str:
    """The re-issue as a CSV for the instructor: login, link (none where it was e-mailed), note."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["login", "link", "note"])
    writer.writerows([one.login, "" if one.mailed else one.link or "", one.note] for one in done)
    return out.getvalue()
