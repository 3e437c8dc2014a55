"""A course's set-up of an account nobody has used yet, and when it stops letting anyone in.

Until its person first uses an account (`users.first_login_at`), the way into it may come from
a course's staff: the first password of that course's roster import that made it, a first-login
link that course's instructor issued, an e-mail address that import or that instructor set (where
/forgot mails a link). Each records the course (`users.password_set_up_by_course_id`,
`users.email_set_up_by_course_id`, `password_resets.set_up_by_course_id`). Such a way in works
only while no other course holds the account: once another course enrolls it (which changes
nothing of the account), the staff who set it up would otherwise log in as the student and read
and submit in that other course. So the password login, the link and /forgot's mail are refused
then, each refusal in the audit log, and a site administrator gives the first login (a link, or
the person's own address for /forgot). The link of a course is also refused once the account
was used: it was for the first login.

What the operator's commands, a site administrator or the person set up is no course's, and
works as before (`set_up_course` gives None for them).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.models import Enrollment, PasswordReset, User


def set_up_course(session: Session, actor: User | None, target: User) -> int | None:
    """The course that `actor` sets `target` up for: None for the operator (`actor` None), a site
    administrator or the person; else the one course of the account (an instructor sets up only
    an account that is in one course, theirs: grader.auth.ownership)."""
    if actor is None or actor.site_admin or actor.id == target.id:
        return None
    return session.scalar(select(func.min(Enrollment.course_id)).where(Enrollment.user_id == target.id))


def held_elsewhere(session: Session, user: User, course_id: int | None) -> bool:
    """Whether a course other than `course_id` holds `user`, which a way in set up by that
    course's staff no longer opens (False for None: no course set it up)."""
    if course_id is None:
        return False
    return session.scalar(select(Enrollment.id).where(Enrollment.user_id == user.id,
                                                      Enrollment.course_id != course_id).limit(1)) is not None


def shut_set_ups(session: Session, users: Sequence[User]) -> dict[int, int]:
    """user id -> the course whose set-up of it no longer opens it (its first password or
    address; another course holds it too), for those of `users` nobody has used: what their
    courses' members pages show."""
    set_up = {user.id: {c for c in (user.password_set_up_by_course_id, user.email_set_up_by_course_id) if c}
              for user in users if user.first_login_at is None}
    held: dict[int, set[int]] = defaultdict(set)
    for user_id, course_id in session.execute(select(Enrollment.user_id, Enrollment.course_id)
                                              .where(Enrollment.user_id.in_([u for u, c in set_up.items() if c]))):
        held[user_id].add(course_id)
    return {user_id: shut[0] for user_id, courses in set_up.items()
            if (shut := sorted(c for c in courses if held[user_id] - {c}))}


def elsewhere_words(user: User) -> str:
    """Why a way in that a course set up is refused, and who gives the first login instead."""
    return (f"{user.username} was set up by one course's staff, nobody has used it yet and another course holds it "
            f"too, so that first password or link no longer opens it. {user.username} gets in through /forgot with "
            "an address of their own (a site administrator puts it on the account), or a site administrator gives "
            "them a first-login link.")


def password_refusal(session: Session, user: User) -> str | None:
    """Why the right password of `user` does not log in (None: it does)."""
    return elsewhere_words(user) if held_elsewhere(session, user, user.password_set_up_by_course_id) else None


def email_refused(session: Session, user: User) -> bool:
    """Whether /forgot must not mail `user`'s address: a course set it, and another holds the account."""
    return held_elsewhere(session, user, user.email_set_up_by_course_id)


def link_refusal(session: Session, reset: PasswordReset) -> str | None:
    """Why the live link `reset` does not set a password (None: it does)."""
    user, course_id = reset.user, reset.set_up_by_course_id
    if course_id is not None and user.first_login_at is not None:
        return (f"This link was for {user.username}'s first login, and the account has been used since. A new one "
                "comes from /forgot or a site administrator.")
    return elsewhere_words(user) if held_elsewhere(session, user, course_id) else None


def refused_use(session: Session, user: User, what: str, why: str, address: str) -> None:
    """Record that a way in `user`'s course set up was refused (whoever tried is not known)."""
    record(session, Event.refused, Via.web, user=user, address=address, detail=f"{what}: {why}")
