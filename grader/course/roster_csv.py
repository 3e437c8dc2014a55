"""Reading a roster CSV into lines, each checked, for the import (grader.course.roster). Two forms:

- `email,name[,section]` per line (an optional `email,name,section` first line): the email,
  lower-cased, is the login;
- a header row naming the columns, in any order, others ignored: a Canvas gradebook export
  (Student, ID, SIS User ID, SIS Login ID, Section, then its assignments) or a generic one
  (username or login, name, email, section). The login column is the login (Canvas's SIS Login
  ID, which the Canvas CSV writes back), or the email where there is none.

Logins and addresses are compared lower-cased; every other cell is kept as the file writes it
(surrounding spaces trimmed), Canvas's SIS Login ID too, so that the Canvas CSV gives Canvas
back its own ids in their own case. A name, section or SIS user id that a spreadsheet would
take for a formula is kept as written (every export writes it as text) and flagged
(formula_warnings), for the confirmation page to show.

Canvas's own lines under its header that name no student (Points Possible, and the line that
marks muted or manually posted assignments) are skipped; every other line that cannot be
imported is reported with its number and why.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

EMAIL = re.compile(r"^[^@\s,;<>\"']+@[^@\s,;<>\"']+\.[^@\s,;<>\"'.]+$")
LOGIN = re.compile(r"^[a-z0-9][a-z0-9._@+-]*$")
CANVAS_ID = re.compile(r"^[0-9]{1,32}$")  # Canvas's user and assignment ids are numbers
MAX_LOGIN, MAX_EMAIL, MAX_NAME, MAX_SECTION, MAX_SIS_ID = 128, 256, 256, 64, 256  # the tables' column sizes
# A header row's column names (compared lower-cased, spaces collapsed), per field
COLUMNS = {
    "login": ("sis login id", "login id", "login", "username"),
    "name": ("student", "name", "full name", "student name"),
    "email": ("email", "e-mail", "email address"),
    "section": ("section", "sections"),
    "canvas_id": ("id",),
    "sis_user_id": ("sis user id",),
}
SIS_LOGIN = "sis login id"  # the login column whose cells are also kept as written
LEGACY_HEADER = ("email", "name")  # `email,name[,section]`, the form without a header's mapping
CANVAS_POINTS_ROW = "points possible"  # the line under a Canvas export's header
CANVAS_POSTING_CELL = re.compile(r"^(muted|manual posting.*)$", re.IGNORECASE)  # Canvas's posting-policy line
# What a spreadsheet takes for the start of a formula (in a CSV cell as it opens it)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def looks_like_formula(text: str) -> bool:
    return text[:1] in FORMULA_START


@dataclass(frozen=True)
class RosterLine:
    line: int
    email: str | None  # None: the roster gives no address
    name: str
    section: str | None
    login: str  # lower-cased: the account's login
    canvas_id: str | None = None  # Canvas's `ID`
    sis_user_id: str | None = None
    sis_login_id: str | None = None  # Canvas's `SIS Login ID` as the file writes it


@dataclass(frozen=True)
class LineError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


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
    canvas_id: int | None
    sis_user_id: int | None
    login_label: str | None

    @staticmethod
    def read(cells: list[str]) -> Header | str | None:
        """The header these cells name; None when they are no header (a student's line); the
        reason in words when they are one that lacks a column a roster needs."""
        names = [_column_name(c) for c in cells]
        if not {n for aliases in COLUMNS.values() for n in aliases}.intersection(names):
            return None
        where = {key: next((i for i, n in enumerate(names) if n in aliases), None) for key, aliases in COLUMNS.items()}
        login, name, email = where["login"], where["name"], where["email"]
        if name is None or (login is None and email is None):
            found = ", ".join(f"“{c}”" for c in cells if c) or "none"
            return (f"the header row names the columns {found}; a roster needs a login column (SIS Login ID, "
                    "login or username) or an email column, and a name column (Student or name); "
                    "section, email, ID and SIS User ID are optional, other columns are ignored")
        return Header(login, name, email, where["section"], where["canvas_id"], where["sis_user_id"],
                      cells[login] if login is not None else None)

    def line(self, number: int, cells: list[str]) -> RosterLine:
        """Line `number`'s fields as the file gives them (not checked yet), login and email lower-cased."""
        def cell(index: int | None) -> str:
            return cells[index] if index is not None and index < len(cells) else ""
        email = cell(self.email).lower() or None
        given_login = cell(self.login) if self.login is not None else ""
        login = given_login.lower() if self.login is not None else (email or "")
        if email is None and EMAIL.match(login):
            email = login
        sis_login = (given_login or None) if _column_name(self.login_label or "") == SIS_LOGIN else None
        return RosterLine(number, email, cell(self.name), cell(self.section) or None, login,
                          cell(self.canvas_id) or None, cell(self.sis_user_id) or None, sis_login)

    def is_canvas_note(self, cells: list[str]) -> bool:
        """Whether the line is one Canvas writes under its header that names no student."""
        if self.login is not None and self.login < len(cells) and cells[self.login]:
            return False
        return (_column_name(cells[0]) == CANVAS_POINTS_ROW
                or all(not c or CANVAS_POSTING_CELL.match(c) for c in cells))


def _problem(line: RosterLine, login_label: str | None) -> str | None:
    """What is wrong with one line's fields (None: nothing); `login_label` None: the email is the login."""
    login, email = line.login, line.email
    if login_label is not None:
        if not login:
            return f"the {login_label} is empty"
        if len(login) > MAX_LOGIN:
            return f"the {login_label} is longer than {MAX_LOGIN} characters"
        if not LOGIN.match(login):
            return f"“{line.sis_login_id or login}” is not a login (letters, digits and . _ @ + - only)"
    if email is not None or login_label is None:
        limit = MAX_LOGIN if login_label is None else MAX_EMAIL
        if not email or not EMAIL.match(email):
            return f"“{email or ''}” is not an email address"
        if len(email) > limit:
            return f"the email is longer than {limit} characters"
    if not line.name:
        return "the name is empty"
    for value, what, limit in ((line.name, "name", MAX_NAME), (line.section, "section", MAX_SECTION),
                               (line.sis_user_id, "SIS User ID", MAX_SIS_ID)):
        if value is not None and len(value) > limit:
            return f"the {what} is longer than {limit} characters"
    if line.canvas_id is not None and not CANVAS_ID.match(line.canvas_id):
        return (f"the ID “{line.canvas_id}” is not a Canvas user id (digits only); if that column holds "
                "something else, rename or remove it")
    return None


def _duplicate(line: RosterLine, seen: dict[tuple[str, str], int]) -> str | None:
    """Whether an earlier line has the same login (case-insensitive) or the same Canvas ID;
    records this line's otherwise."""
    keys = [("login", line.login.casefold())] + ([("canvas", line.canvas_id)] if line.canvas_id else [])
    for kind, key in keys:
        if (kind, key) in seen:
            what = line.login if kind == "login" else f"Canvas ID {key}"
            return f"{what} is already on line {seen[(kind, key)]}"
    seen.update({key: line.line for key in keys})
    return None


def parse_roster(text: str) -> tuple[list[RosterLine], list[LineError]]:
    lines: list[RosterLine] = []
    errors: list[LineError] = []
    seen: dict[tuple[str, str], int] = {}
    header: Header | None = None
    first = True
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
            if header.is_canvas_note(cells):
                continue
            line, label = header.line(number, cells), header.login_label
        elif len(cells) in (2, 3):
            login = cells[0].lower()
            section = cells[2] if len(cells) == 3 else ""
            line, label = RosterLine(number, login, cells[1], section or None, login), None
        else:
            errors.append(LineError(number, f"expected 2 or 3 columns (email,name[,section]), found {len(cells)}"))
            continue
        problem = _problem(line, label) or _duplicate(line, seen)
        if problem:
            errors.append(LineError(number, problem))
            continue
        lines.append(line)
    return lines, errors


FLAGGED_FIELDS = (("name", "name"), ("section", "section"), ("sis_user_id", "SIS User ID"))
SHOWN_CHARS = 40  # of a flagged cell, on the confirmation page


def formula_warnings(lines: list[RosterLine]) -> list[str]:
    """A warning per line whose name, section or SIS User ID a spreadsheet would take for a
    formula (the import keeps it as written, and every export writes it as text): which cells,
    and the character each starts with."""
    warnings = []
    for line in lines:
        flagged = [(what, value) for name, what in FLAGGED_FIELDS
                   if (value := getattr(line, name)) is not None and looks_like_formula(value)]
        if flagged:
            said = "; ".join(f"the {what} “{value[:SHOWN_CHARS]}{'…' if len(value) > SHOWN_CHARS else ''}” "
                             f"starts with “{value[0]}”" for what, value in flagged)
            warnings.append(f"line {line.line} ({line.login}): {said}")
    return warnings
