"""Roster import: a CSV of students becomes student accounts enrolled in one course,
idempotently. Two forms are read:

- `email,name[,section]` per line (an optional `email,name,section` first line): the email,
  lower-cased, is the login;
- a header row naming the columns, in any order, others ignored: a Canvas gradebook export
  (Student, ID, SIS User ID, SIS Login ID, Section, then its assignments) or a generic one
  (username or login, name, email, section). The login column is the login (Canvas's SIS Login
  ID, which the gradebook's CSV export also writes), or the email where there is none.

A new account gets a first password, returned once so the instructor can hand it out (random,
or derived from a key the caller keeps: the web page's background import, grader.course.roster_jobs);
an existing student keeps theirs and is enrolled in the course too, and gets the roster's name
and section, and its email while nobody has used the account (an account another course
holds too is only enrolled: grader.auth.ownership). Every line that cannot be imported is reported with its line number
and why; the other lines are imported (running the corrected file again is safe)."""
from __future__ import annotations

import csv
import hmac
import io
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.course.membership import courses_besides, enroll, role_in_course
from grader.models import Course, CourseRole, Role, User, login_key
from grader.passwords import set_password
from grader.settings import Argon2Settings

EMAIL = re.compile(r"^[^@\s,;<>\"']+@[^@\s,;<>\"']+\.[^@\s,;<>\"'.]+$")
LOGIN = re.compile(r"^[a-z0-9][a-z0-9._@+-]*$")
MAX_LOGIN, MAX_EMAIL, MAX_NAME, MAX_SECTION = 128, 256, 256, 64  # the users table's column sizes
# A header row's column names (compared lower-cased, spaces collapsed), per field
COLUMNS = {
    "login": ("sis login id", "login id", "login", "username"),
    "name": ("student", "name", "full name", "student name"),
    "email": ("email", "e-mail", "email address"),
    "section": ("section", "sections"),
}
KNOWN_IGNORED = ("id", "sis user id")  # Canvas's own ids: a header, but not read
LEGACY_HEADER = ("email", "name")  # `email,name[,section]`, the form without a header's mapping
CANVAS_POINTS_ROW = "points possible"  # the line under a Canvas export's header


@dataclass(frozen=True)
class RosterLine:
    line: int
    email: str | None  # None: the roster gives no address
    name: str
    section: str | None
    login: str


@dataclass(frozen=True)
class LineError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class RosterReport:
    created: list[tuple[str, str]] = field(default_factory=list)  # (login, first password)
    updated: list[str] = field(default_factory=list)  # name, section, email or enrollment changed
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


def _column_name(cell: str) -> str:
    return " ".join(cell.lower().split())


@dataclass(frozen=True)
class Header:
    """Where each field is in a header row's columns (None: not there), and the login column's
    name as the file writes it (None: no login column, the email is the login)."""

    login: int | None
    name: int
    email: int | None
    section: int | None
    login_label: str | None

    @staticmethod
    def read(cells: list[str]) -> Header | str | None:
        """The header these cells name; None when they are no header (a student's line); the
        reason in words when they are one that lacks a column a roster needs."""
        names = [_column_name(c) for c in cells]
        known = {n for aliases in COLUMNS.values() for n in aliases} | set(KNOWN_IGNORED)
        if not known.intersection(names):
            return None
        where = {key: next((i for i, n in enumerate(names) if n in aliases), None) for key, aliases in COLUMNS.items()}
        login, name, email = where["login"], where["name"], where["email"]
        if name is None or (login is None and email is None):
            found = ", ".join(f"“{c}”" for c in cells if c) or "none"
            return (f"the header row names the columns {found}; a roster needs a login column (SIS Login ID, "
                    "login or username) or an email column, and a name column (Student or name); "
                    "section and email are optional, other columns are ignored")
        return Header(login, name, email, where["section"], cells[login] if login is not None else None)

    def fields(self, cells: list[str]) -> tuple[str, str | None, str, str]:
        """(login, email or None, name, section) of one line, lower-casing login and email."""
        def cell(index: int | None) -> str:
            return cells[index] if index is not None and index < len(cells) else ""
        email = cell(self.email).lower() or None
        login = cell(self.login).lower() if self.login is not None else (email or "")
        if email is None and EMAIL.match(login):
            email = login
        return login, email, cell(self.name), cell(self.section)


def _problem(login: str, email: str | None, name: str, section: str | None, login_label: str | None) -> str | None:
    """What is wrong with one line's fields (None: nothing); `login_label` None: the email is the login."""
    if login_label is not None:
        if not login:
            return f"the {login_label} is empty"
        if len(login) > MAX_LOGIN:
            return f"the {login_label} is longer than {MAX_LOGIN} characters"
        if not LOGIN.match(login):
            return f"“{login}” is not a login (letters, digits and . _ @ + - only)"
    if email is not None or login_label is None:
        limit = MAX_LOGIN if login_label is None else MAX_EMAIL
        if not email or not EMAIL.match(email):
            return f"“{email or ''}” is not an email address"
        if len(email) > limit:
            return f"the email is longer than {limit} characters"
    if not name:
        return "the name is empty"
    if len(name) > MAX_NAME:
        return f"the name is longer than {MAX_NAME} characters"
    if section is not None and len(section) > MAX_SECTION:
        return f"the section is longer than {MAX_SECTION} characters"
    return None


def parse_roster(text: str) -> tuple[list[RosterLine], list[LineError]]:
    lines: list[RosterLine] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    header: Header | None = None
    first = True
    email: str | None
    label: str | None
    for number, cells in enumerate(csv.reader(io.StringIO(text.lstrip("\ufeff"))), 1):
        cells = [c.strip() for c in cells]
        if not any(cells):
            continue
        if first:
            first = False
            if [_column_name(c) for c in cells[:2]] == list(LEGACY_HEADER) and len(cells) <= 3:
                continue  # the old form's own header: its lines keep its column count
            read = Header.read(cells)
            if isinstance(read, str):
                return [], [LineError(number, read)]
            if read is not None:
                header = read
                continue
        if header is not None:
            login, email, name, section = header.fields(cells)
            if not login and name.lower() == CANVAS_POINTS_ROW:
                continue
            label = header.login_label
        elif len(cells) in (2, 3):
            login, name, section = cells[0].lower(), cells[1], cells[2] if len(cells) == 3 else ""
            email, label = login, None
        else:
            errors.append(LineError(number, f"expected 2 or 3 columns (email,name[,section]), found {len(cells)}"))
            continue
        problem = _problem(login, email, name, section or None, label)
        if problem is None and login_key(login) in seen:  # logins are case-insensitive
            problem = f"{login} is already on line {seen[login_key(login)]}"
        if problem:
            errors.append(LineError(number, problem))
            continue
        seen[login_key(login)] = number
        lines.append(RosterLine(number, email, name, section or None, login))
    return lines, errors


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


def import_roster(session: Session, text: str, course: Course, cost: Argon2Settings,
                  password: Callable[[str], str] = first_password, progress: Progress | None = None) -> RosterReport:
    """Create or update one student per valid line, enrolled in `course` (the caller commits;
    `progress`, called after each line, may commit too). A new account's first password is
    `password(login)`, hashed at `cost`."""
    lines, errors = parse_roster(text)
    report = RosterReport(errors=errors)
    # An existing account is found as grader.service.find_user finds it: its exact login, else
    # case-insensitively (login_key)
    logins = [ln.login for ln in lines]
    exact = {u.username: u for u in session.scalars(select(User).where(User.username.in_(logins)))}
    keyed = {u.login_key: u for u in session.scalars(
        select(User).where(User.login_key.in_([login_key(login) for login in logins])))}
    for done, line in enumerate(lines, 1):
        user = exact.get(line.login) or keyed.get(login_key(line.login))
        if user is None:
            user = User(username=line.login, role=Role.student, full_name=line.name, section=line.section,
                        email=line.email)
            first = password(line.login)
            set_password(user, first, cost)
            session.add(user)
            session.flush()
            enroll(session, user, course, CourseRole.student)
            report.created.append((line.login, first))
        elif user.role != Role.student:
            report.errors.append(LineError(line.line, f"{line.login} is an existing {user.role.value} account; not changed"))
        elif (role := role_in_course(session, user.id, course.id)) is not None and role.is_staff:
            report.errors.append(LineError(line.line, f"{line.login} is a {role.label} of {course.slug}; not changed"))
        else:
            newly_enrolled = enroll(session, user, course, CourseRole.student)
            # An account another course holds is only enrolled; the e-mail is its person's once they
            # used the account (grader.auth.ownership); a roster without an address keeps theirs
            fields: tuple[str | None, str | None, str | None] = (
                line.name, line.section, (line.email if user.first_login_at is None else None) or user.email)
            if courses_besides(session, user.id, course.id):
                fields = (user.full_name, user.section, user.email)
            if (user.full_name, user.section, user.email) == fields and not newly_enrolled:
                report.unchanged.append(line.login)
            else:
                user.full_name, user.section, user.email = fields
                report.updated.append(line.login)
        if progress is not None:
            session.flush()
            progress(done, len(lines), report)
    report.errors.sort(key=lambda e: e.line)
    session.flush()
    return report
