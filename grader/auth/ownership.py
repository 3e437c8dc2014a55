"""Who may change an account's login, password and e-mail: the rules every page and command
asks, and the audit rows of each change and each refusal (grader.auth.audit).

An account belongs to its person. Its login, password and e-mail are changed only
- by that person (their account page, /settings/account; their password page; /forgot, which
  mails a link to the address on their account);
- by a site administrator (`users.site_admin`, a site role apart from every course role, given
  and taken by the operator's `grader user admin` alone): another person's account page,
  /accounts/<login>; the operator's commands (`grader user ...`) act with the same right;
- by the identity provider, once one is configured. None is yet; when one comes, it owns these
  fields for the accounts it signs in, and its rule goes into `may_change`, which every door
  that changes them asks.

Course staff own none of it. Until its person first uses it (`users.first_login_at`), an
account is still being set up, and an instructor of the one course it is in may set it up:
give it a first-login link and its e-mail address (`refusals`). So an instructor reaches no
account that another course holds nor one someone has used; enrolling an existing account in
a course adds the enrollment and nothing else. What a course set up stops opening the account
once another course holds it too (grader.auth.set_up).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.auth.set_up import set_up_course
from grader.course.membership import course_roles_of
from grader.course.roster_csv import EMAIL, MAX_EMAIL
from grader.models import Course, CourseRole, Enrollment, Role, User
from grader.roles import Refusal

ADMIN_ONLY = "Only a site administrator sees or changes another person's account; yours is at /settings/account."


def may_change(actor: User, target: User) -> bool:
    """Whether `actor` may change `target`'s login, password and e-mail whatever its state."""
    return actor.id == target.id or actor.site_admin


def who_can(target: User) -> str:
    """The sentence a refusal ends with: who may change the account instead."""
    return (f"Only {target.username} (on their account page, or on /forgot for a new password) or a site "
            "administrator can do that.")


def not_in_your_courses(login: str) -> Refusal:
    return Refusal(f"No account “{login}” in a course you instruct.", absent=True)


def _refusal(target: User, held: list[tuple[int, CourseRole]], instructed: set[int]) -> Refusal | None:
    """Why an instructor of the courses `instructed` may not set `target` up (None: they may);
    `held` is the account's enrollments (course id, part)."""
    if not any(course_id in instructed for course_id, _ in held):
        return not_in_your_courses(target.username)
    why = None
    if target.first_login_at is not None:
        why = f"{target.username} has logged in before, so the account is theirs."
    elif target.site_admin or target.role is not Role.student:
        why = f"{target.username} may make courses or administer the site."
    elif any(course_id not in instructed for course_id, _ in held):
        why = f"{target.username} is also enrolled in a course you do not instruct."
    elif len(held) > 1:  # what one course sets up would not open it (grader.auth.set_up)
        why = f"{target.username} is in more than one course, so a site administrator gives the first login."
    elif any(part is CourseRole.instructor for _, part in held):
        why = f"{target.username} is an instructor."
    return Refusal(f"{why} {who_can(target)}") if why else None


def refusals(session: Session, issuer: User, targets: Sequence[User]) -> dict[int, Refusal | None]:
    """For each of `targets`, why `issuer` may not give it a first-login link nor set its
    e-mail, or None where they may: a site administrator always may; an instructor, for an
    account never used, of a student's site role, that is a student or TA of one course they
    instruct and enrolled in no other."""
    if issuer.site_admin:
        return {target.id: None for target in targets}
    instructed = {cid for cid, part in course_roles_of(session, issuer.id).items() if part is CourseRole.instructor}
    held: dict[int, list[tuple[int, CourseRole]]] = defaultdict(list)
    rows = session.execute(select(Enrollment.user_id, Enrollment.course_id, Enrollment.role)
                           .where(Enrollment.user_id.in_([t.id for t in targets])))
    for user_id, course_id, part in rows:
        held[user_id].append((course_id, part))
    return {target.id: _refusal(target, held[target.id], instructed) for target in targets}


def refusal(session: Session, issuer: User, target: User) -> Refusal | None:
    """`refusals` for one account."""
    return refusals(session, issuer, [target])[target.id]


def may_set_up(session: Session, actor: User, target: User) -> bool:
    """Whether `actor` may change `target`'s e-mail: theirs, a site administrator's, or one the
    actor still sets up (`refusals`)."""
    return may_change(actor, target) or refusal(session, actor, target) is None


def refused(session: Session, actor: User, target: User | None, what: str, why: str, via: Via,
            address: str | None = None, login: str | None = None) -> None:
    """Record that `actor` was refused `what` on `target` (the caller commits, also when it answers the refusal)."""
    record(session, Event.refused, via, user=target, login=login, actor=actor, address=address,
           detail=f"{what}: {why}")


def email_problem(typed: str) -> str | None:
    """What is wrong with an e-mail address as typed (None: nothing; empty clears it)."""
    if typed and (len(typed) > MAX_EMAIL or not EMAIL.match(typed)):
        return f"“{typed[:80]}” is not an e-mail address (name@example.edu)."
    return None


def change_email(session: Session, actor: User | None, target: User, typed: str, via: Via,
                 address: str | None = None) -> str | None:
    """Set `target`'s e-mail to `typed` (stripped; empty removes it), recorded with who did it
    (`actor` None: the operator's command), and whose set-up it is (an instructor's is their
    course's: grader.auth.set_up); the reason it was refused, changing nothing. The caller
    checked that `actor` may (`may_set_up`)."""
    email = typed.strip()
    problem = email_problem(email)
    if problem is not None:
        return problem
    before, target.email = target.email, email or None
    target.email_set_up_by_course_id = set_up_course(session, actor, target) if target.email else None
    if before != target.email:
        record(session, Event.email_changed, via, user=target, actor=actor if actor is not target else None,
               address=address, detail=f"{before or '(none)'} -> {target.email or '(none)'}")
    return None


def set_staff_mail(session: Session, user: User, wanted: bool, address: str | None) -> None:
    """The person's choice of their courses' staff mail, recorded."""
    if user.staff_mail != wanted:
        user.staff_mail = wanted
        record(session, Event.staff_mail, Via.web, user=user, address=address, detail="on" if wanted else "off")


def set_site_admin(session: Session, user: User, admin: bool) -> bool:
    """Give or take the site administrator's role (the operator's command alone); True when that changed it."""
    if user.site_admin == admin:
        return False
    user.site_admin = admin
    record(session, Event.site_admin, Via.cli, user=user, detail="granted" if admin else "revoked")
    return True


def record_enrollment(session: Session, actor: User | None, target: User, course: Course, part: CourseRole,
                      via: Via, address: str | None = None) -> None:
    """An existing account enrolled in `course` (or its part there changed): the enrollment
    alone, nothing of the account; the courses it was in already are named."""
    others = session.scalars(select(Course.slug).join(Enrollment, Enrollment.course_id == Course.id)
                             .where(Enrollment.user_id == target.id, Course.id != course.id)).all()
    record(session, Event.enrolled, via, user=target, actor=actor, address=address,
           detail=f"{course.slug} as {part.label}" + (f"; also in {', '.join(sorted(others))}" if others else ""))
