"""Staff entries on many students' grades at once, from a CSV (for an outage, when hundreds of
manual grades would otherwise be one form each): a header row naming the columns login, kind
(manual or adjust), points and reason, in any order (others ignored), then a line per entry.

Each line is entered as grader.course.adjustments.add_entry enters a form's (its checks, its
reasons, who and when, the open requests it answers), in file order, inside a savepoint: the
preview sees each line's effect on the student's grade (before -> after, a second line on the
same student building on the first) and rolls it all back; applying keeps it only when no line
is refused, so a file with one bad line changes nothing.
"""
from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.course.adjustments import WorkflowError, add_entry
from grader.course.grade_reads import counted_of
from grader.course.grades import ADJUST, MANUAL
from grader.course.roster_csv import LineError
from grader.models import Assignment, CourseRole, Enrollment, RegradeRequest, User

COLUMNS = ("login", "kind", "points", "reason")
KIND_NAMES = {"manual": MANUAL, "adjust": ADJUST}  # the file's word -> the entry's kind
MAX_BYTES = 512 * 1024  # of a file: some thousand lines, far beyond a course's students


@dataclass(frozen=True)
class EntryLine:
    """One line of the file as written (cells trimmed, the login lower-cased)."""

    line: int
    login: str
    kind: str  # the file's word: manual | adjust
    points: str
    reason: str


@dataclass(frozen=True)
class Effect:
    """What one accepted line does to its student's grade (None: no grade)."""

    entry: EntryLine
    before: float | None
    after: float | None


@dataclass(frozen=True)
class GradeImport:
    """A file's effects and refused lines (by line number); `applied`: its entries were kept."""

    effects: list[Effect]
    errors: list[LineError]
    applied: bool = False
    answered: list[RegradeRequest] = field(default_factory=list)  # requests the kept entries answered

    @property
    def digest(self) -> str:
        """A fingerprint of the effects shown, which a confirmation carries back: a grade that
        moved in between shows the preview again instead of applying what nobody saw."""
        text = "\n".join(f"{e.entry.line}\t{e.entry.login}\t{e.before}\t{e.after}" for e in self.effects)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _header(cells: list[str]) -> dict[str, int] | str:
    """Where each column is, or why the header row is not one this import reads."""
    names = [" ".join(c.lower().split()) for c in cells]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        found = ", ".join(f"“{c}”" for c in cells if c) or "none"
        return (f"the header row names the columns {found}; the file needs a header row naming "
                f"{', '.join(COLUMNS)} (missing: {', '.join(missing)})")
    return {c: names.index(c) for c in COLUMNS}


def parse_entries(text: str) -> tuple[list[EntryLine], list[LineError]]:
    """The file's lines (blank ones skipped) and the ones refused before any grade is read."""
    rows = [(n, [c.strip() for c in cells]) for n, cells in
            enumerate(csv.reader(io.StringIO(text.lstrip("\ufeff"))), 1) if any(c.strip() for c in cells)]
    if not rows:
        return [], [LineError(1, f"the file is empty; write a header row naming {', '.join(COLUMNS)}")]
    where = _header(rows[0][1])
    if isinstance(where, str):
        return [], [LineError(rows[0][0], where)]
    lines, errors = [], []
    for number, cells in rows[1:]:
        cell = {name: cells[i] if i < len(cells) else "" for name, i in where.items()}
        if cell["kind"].lower() not in KIND_NAMES:
            errors.append(LineError(number, f"the kind “{cell['kind']}” is neither manual nor adjust"))
        elif not cell["login"]:
            errors.append(LineError(number, "the login is empty"))
        else:
            lines.append(EntryLine(number, cell["login"].lower(), cell["kind"].lower(), cell["points"],
                                   cell["reason"]))
    return lines, errors


def _students(session: Session, assignment: Assignment, logins: set[str]) -> dict[str, User]:
    """login -> the student of `assignment`'s course by that login (compared lower-cased)."""
    enrolled = select(Enrollment.user_id).where(Enrollment.course_id == assignment.course_id,
                                                Enrollment.role == CourseRole.student)
    found = session.scalars(select(User).where(User.id.in_(enrolled), func.lower(User.username).in_(logins or {""})))
    return {user.username.lower(): user for user in found}


def _final(session: Session, assignment: Assignment, student: User) -> float | None:
    grade = counted_of(session, assignment, student.id).grade
    return grade.final if grade else None


def import_entries(session: Session, assignment: Assignment, staff: User, text: str,
                   apply: bool = False) -> GradeImport:
    """Enter each line of `text` as `staff`'s entry on its student's grade in `assignment`;
    kept (`apply`, the caller commits) only when no line is refused, else rolled back like
    a preview."""
    lines, errors = parse_entries(text)
    students = _students(session, assignment, {e.login for e in lines})
    effects, answered = [], []
    savepoint = session.begin_nested()
    try:
        for entry in lines:
            student = students.get(entry.login)
            if student is None:
                errors.append(LineError(entry.line, f"no student “{entry.login}” in the course of {assignment.slug}"))
                continue
            before = _final(session, assignment, student)
            try:
                row = add_entry(session, assignment, student, staff, KIND_NAMES[entry.kind], entry.points,
                                entry.reason)
            except WorkflowError as exc:
                errors.append(LineError(entry.line, str(exc)))
                continue
            answered += row.answers
            effects.append(Effect(entry, before, _final(session, assignment, student)))
    except BaseException:
        savepoint.rollback()
        raise
    keep = apply and not errors and bool(effects)
    savepoint.commit() if keep else savepoint.rollback()
    return GradeImport(effects, sorted(errors, key=lambda e: e.line), keep, answered if keep else [])
