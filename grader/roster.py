"""Roster import: a CSV of students (`email,name[,section]`, an optional header line) becomes
student accounts enrolled in one assignment, idempotently. The email (lower-cased) is the
login. A new account gets a random first password, returned once so the instructor can hand
it out; an existing student keeps theirs, gets the roster's name and section, and is
enrolled in the assignment too. Every line that cannot be imported is
reported with its line number and why; the other lines are imported (running the corrected
file again is safe)."""
from __future__ import annotations

import csv
import io
import re
import secrets
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.auth import set_password
from grader.membership import enroll, role_in
from grader.models import Assignment, CourseRole, Role, User

EMAIL = re.compile(r"^[^@\s,;<>\"']+@[^@\s,;<>\"']+\.[^@\s,;<>\"'.]+$")
MAX_EMAIL, MAX_NAME, MAX_SECTION = 128, 256, 64  # the users table's column sizes
HEADER = ("email", "name")


@dataclass(frozen=True)
class RosterLine:
    line: int
    email: str
    name: str
    section: str | None


@dataclass(frozen=True)
class LineError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class RosterReport:
    created: list[tuple[str, str]] = field(default_factory=list)  # (email, first password)
    updated: list[str] = field(default_factory=list)  # name, section or enrollment changed
    unchanged: list[str] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.created)} created, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
                f"{len(self.errors)} line(s) with errors")


def parse_roster(text: str) -> tuple[list[RosterLine], list[LineError]]:
    lines: list[RosterLine] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    for number, cells in enumerate(csv.reader(io.StringIO(text.lstrip("\ufeff"))), 1):
        cells = [c.strip() for c in cells]
        if not any(cells):
            continue
        if number == 1 and tuple(c.lower() for c in cells[:2]) == HEADER:
            continue
        if len(cells) not in (2, 3):
            errors.append(LineError(number, f"expected 2 or 3 columns (email,name[,section]), found {len(cells)}"))
            continue
        email, name = cells[0].lower(), cells[1]
        section = cells[2] if len(cells) == 3 and cells[2] else None
        problem = None
        if not EMAIL.match(email):
            problem = f"“{cells[0]}” is not an email address"
        elif len(email) > MAX_EMAIL:
            problem = f"the email is longer than {MAX_EMAIL} characters"
        elif not name:
            problem = "the name is empty"
        elif len(name) > MAX_NAME:
            problem = f"the name is longer than {MAX_NAME} characters"
        elif section is not None and len(section) > MAX_SECTION:
            problem = f"the section is longer than {MAX_SECTION} characters"
        elif email in seen:
            problem = f"{email} is already on line {seen[email]}"
        if problem:
            errors.append(LineError(number, problem))
            continue
        seen[email] = number
        lines.append(RosterLine(number, email, name, section))
    return lines, errors


def import_roster(session: Session, text: str, assignment: Assignment) -> RosterReport:
    """Create or update one student per valid line, enrolled in `assignment` (the caller commits)."""
    lines, errors = parse_roster(text)
    report = RosterReport(errors=errors)
    existing = {u.username: u for u in session.scalars(select(User).where(User.username.in_([ln.email for ln in lines])))}
    for line in lines:
        user = existing.get(line.email)
        if user is None:
            user = User(username=line.email, role=Role.student, full_name=line.name, section=line.section)
            password = secrets.token_urlsafe(9)
            set_password(user, password)
            session.add(user)
            session.flush()
            enroll(session, user, assignment, CourseRole.student)
            report.created.append((line.email, password))
        elif user.role != Role.student:
            report.errors.append(LineError(line.line, f"{line.email} is an existing {user.role.value} account; not changed"))
        elif role_in(session, user.id, assignment.id) is CourseRole.staff:
            report.errors.append(LineError(line.line, f"{line.email} is staff of {assignment.slug}; not changed"))
        else:
            newly_enrolled = enroll(session, user, assignment, CourseRole.student)
            if (user.full_name, user.section) == (line.name, line.section) and not newly_enrolled:
                report.unchanged.append(line.email)
            else:
                user.full_name, user.section = line.name, line.section
                report.updated.append(line.email)
    report.errors.sort(key=lambda e: e.line)
    session.flush()
    return report
