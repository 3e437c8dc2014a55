"""Roster import: a roster CSV (read by grader.course.roster_csv) becomes student accounts
enrolled in one course, idempotently.

What the roster says of a student (the name as it gives it, section, e-mail for the course's
notices, Canvas's ID, SIS User ID and SIS Login ID) is kept on their enrollment in that course
(grader.course.roster_entries), never on the account: an import in one course never changes
what another course shows, nor the account's login, password or own e-mail address. An address,
Canvas ID or SIS id that the file does not give keeps the value the enrollment has.

A new account gets a first password, returned once so the instructor can hand it out (random,
or derived from a key the caller keeps: the web page's background import, grader.course.roster_jobs),
and the roster's name and address as its own display name and address; made by the course's
staff, these are the course's set-up, recorded on the account (grader.auth.set_up). An existing student keeps
theirs and is enrolled in the course too. An account that is not a student's, a member of the
course's staff, and a line whose Canvas ID another member of the course holds are left unchanged.
Every line that cannot be imported is reported with its line number and why; the other lines are
imported (running the corrected file again is safe). `preview_roster` says all of this before
anything is changed, for the confirmation page.
"""
from __future__ import annotations

import csv
import hmac
import io
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.course.membership import enroll
from grader.course.roster_csv import LineError, RosterLine, formula_warnings, parse_roster
from grader.course.roster_entries import entries_of, entry_of
from grader.models import Course, CourseRole, Enrollment, Role, User, login_key
from grader.passwords import set_password
from grader.settings import Argon2Settings


@dataclass
class RosterReport:
    created: list[tuple[str, str]] = field(default_factory=list)  # (login, first password)
    updated: list[str] = field(default_factory=list)  # enrolled, or the course's roster fields changed
    unchanged: list[str] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)

    def passwords_csv(self) -> str:
        """The new accounts' first passwords as a CSV file (login,password), for the one download."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["login", "password"])
        writer.writerows(self.created)
        return out.getvalue()

    def summary(self) -> str:
        return (f"{len(self.created)} created, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
                f"{len(self.errors)} line(s) with errors")


@dataclass(frozen=True)
class Planned:
    """What the import does with one valid line: the account it names (None: a new one), its
    enrollment in the course (None: not enrolled yet), or why it changes nothing."""

    line: RosterLine
    user: User | None
    entry: Enrollment | None
    refused: str | None = None

    def values(self) -> dict[str, str | None]:
        """The enrollment's roster fields after the import: the name and section the file gives,
        and its address and ids where it gives them (else those the enrollment has)."""
        line, entry = self.line, self.entry

        def given_or_kept(name: str, given: str | None) -> str | None:
            return given if given is not None or entry is None else getattr(entry, name)

        return {"full_name": line.name, "section": line.section, "email": given_or_kept("email", line.email),
                "canvas_user_id": given_or_kept("canvas_user_id", line.canvas_id),
                "sis_user_id": given_or_kept("sis_user_id", line.sis_user_id),
                "sis_login_id": given_or_kept("sis_login_id", line.sis_login_id)}

    def changes(self) -> dict[str, tuple[str | None, str | None]]:
        """Field -> (now, after) for each roster field of an existing enrollment the import changes."""
        if self.entry is None:
            return {}
        return {name: (getattr(self.entry, name), value) for name, value in self.values().items()
                if getattr(self.entry, name) != value}


def _accounts(session: Session, lines: list[RosterLine]) -> Callable[[str], User | None]:
    """The existing account of a login, found as grader.service.find_user finds it: its exact
    login, else case-insensitively (login_key); two statements for the whole file."""
    logins = [ln.login for ln in lines]
    exact = {u.username: u for u in session.scalars(select(User).where(User.username.in_(logins)))}
    keyed = {u.login_key: u for u in session.scalars(
        select(User).where(User.login_key.in_([login_key(login) for login in logins])))}
    return lambda login: exact.get(login) or keyed.get(login_key(login))


def plan_roster(session: Session, lines: list[RosterLine], course: Course) -> list[Planned]:
    """What importing `lines` into `course` does with each, read from the database as it is."""
    account = _accounts(session, lines)
    users = {ln.line: account(ln.login) for ln in lines}
    entries = entries_of(session, course.id, [u.id for u in users.values() if u is not None])
    canvas_ids = {canvas_id: login for canvas_id, login in session.execute(
        select(Enrollment.canvas_user_id, User.username).join(User, User.id == Enrollment.user_id)
        .where(Enrollment.course_id == course.id, Enrollment.canvas_user_id.is_not(None)))}
    plans = []
    for line in lines:
        user = users[line.line]
        entry = entries.get(user.id) if user is not None else None
        holder = canvas_ids.get(line.canvas_id) if line.canvas_id else None
        refused = None
        if user is not None and user.role is not Role.student:
            refused = f"{line.login} is an existing {user.role.value} account; not changed"
        elif entry is not None and entry.role.is_staff:
            refused = f"{line.login} is a {entry.role.label} of {course.slug}; not changed"
        elif holder is not None and (user is None or holder != user.username):
            refused = f"Canvas ID {line.canvas_id} is {holder}'s in {course.slug}; {line.login} not changed"
        plans.append(Planned(line, user, entry, refused))
    return plans


@dataclass(frozen=True)
class RosterPreview:
    """What an import would do, for the confirmation page: the lines it imports, how many make
    a new account, what it changes of the enrolled students' roster fields, the lines it skips
    and why, and the cells a spreadsheet would take for formulas."""

    importing: int
    new: int
    changes: dict[str, list[tuple[str, str | None, str | None]]]  # field -> (login, now, after) per student
    skipped: list[LineError]
    warnings: list[str]


def preview_roster(session: Session, text: str, course: Course) -> RosterPreview:
    lines, errors = parse_roster(text)
    plans = plan_roster(session, lines, course)
    taken = [p for p in plans if p.refused is None]
    changes: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for plan in taken:
        for name, (now, after) in plan.changes().items():
            changes.setdefault(name, []).append((plan.line.login, now, after))
    skipped = sorted(errors + [LineError(p.line.line, p.refused) for p in plans if p.refused], key=lambda e: e.line)
    return RosterPreview(len(taken), sum(1 for p in taken if p.user is None), changes, skipped,
                         formula_warnings([p.line for p in taken]))


# Letters and digits without look-alikes (0/O, 1/l/I): read out or copied by hand, and never a
# leading "-" or "=" that a spreadsheet opening the passwords' CSV would take for a formula
PASSWORD_ALPHABET = "".join(c for c in string.ascii_letters + string.digits if c not in "0O1lI")


PASSWORD_LENGTH = 12  # about 70 bits


def first_password(login: str = "") -> str:
    """A random first password; `login` is not used (it is there to fit `import_roster`'s
    `password`)."""
    return "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(PASSWORD_LENGTH))


def derived_password(key: bytes, login: str) -> str:
    """The first password of `login` derived from a secret `key` (HMAC-SHA256, its 256 bits read
    as PASSWORD_LENGTH digits in the alphabet's base): the same key and login always give the
    same password, and whoever lacks the key cannot compute it. A background import derives
    the passwords from a key that it then forgets, so that they are never stored (grader.course.roster_jobs)."""
    number = int.from_bytes(hmac.digest(key, login.encode(), "sha256"), "big")
    chars = []
    for _ in range(PASSWORD_LENGTH):
        number, digit = divmod(number, len(PASSWORD_ALPHABET))
        chars.append(PASSWORD_ALPHABET[digit])
    return "".join(chars)


Progress = Callable[[int, int, RosterReport], None]  # (lines applied, lines to apply, the report so far)


def _enrolled(session: Session, plan: Planned, user: User, course: Course) -> bool:
    """Enroll `user` as a student of `course` with the line's roster fields; True when that
    changed anything."""
    newly = enroll(session, user, course, CourseRole.student)
    entry = plan.entry or entry_of(session, user.id, course.id)
    assert entry is not None  # enrolled just above
    changed = {name: value for name, value in plan.values().items() if getattr(entry, name) != value}
    for name, value in changed.items():
        setattr(entry, name, value)
    return newly or bool(changed)


def import_roster(session: Session, text: str, course: Course, cost: Argon2Settings,
                  password: Callable[[str], str] = first_password, progress: Progress | None = None,
                  staff_set_up: bool = False) -> RosterReport:
    """Create or update one student per valid line, enrolled in `course` (the caller commits;
    `progress`, called after each line, may commit too). A new account's first password is
    `password(login)`, hashed at `cost`; `staff_set_up`: the course's staff import it (not the
    operator nor a site administrator), so its first password and address are the course's
    set-up, which opens it only while no other course holds it (grader.auth.set_up)."""
    lines, errors = parse_roster(text)
    report = RosterReport(errors=errors)
    plans = plan_roster(session, lines, course)
    for done, plan in enumerate(plans, 1):
        line = plan.line
        if plan.refused is not None:
            report.errors.append(LineError(line.line, plan.refused))
        elif plan.user is None:
            set_up_by = course.id if staff_set_up else None
            user = User(username=line.login, role=Role.student, full_name=line.name, email=line.email,
                        password_set_up_by_course_id=set_up_by,
                        email_set_up_by_course_id=set_up_by if line.email else None)
            first = password(line.login)
            set_password(user, first, cost)
            session.add(user)
            session.flush()
            _enrolled(session, plan, user, course)
            report.created.append((line.login, first))
        elif _enrolled(session, plan, plan.user, course):
            report.updated.append(line.login)
        else:
            report.unchanged.append(line.login)
        if progress is not None:
            session.flush()
            progress(done, len(plans), report)
    report.errors.sort(key=lambda e: e.line)
    session.flush()
    return report
