"""A course's settings its instructors change outside the schedule: what its TAs may do besides
viewing and grading (grader.roles.TA_GRANTABLE), the graded-run quota of its assignments that
set none, an assignment's own quota and the sources its similarity check lists (known solutions it matches, common code it leaves out)
students against (grader.similarity.public). One function per change, called by the course and
settings pages, the API (grader/api/course_settings.py) and `grader course ta-powers`,
`grader course quota`, `grader quota`; each change is one audit row (Event.settings_changed:
what, before -> after), so who widened a TA's powers or a quota can be read back."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.course.quotas import parse_runs
from grader.models import Assignment, Course, User
from grader.roles import TA_GRANTABLE, Power, granted_powers, powers_text


def parse_powers(names: Iterable[str]) -> frozenset[Power]:
    """TA powers by name (grader.roles.TA_GRANTABLE); ValueError naming the one that is not."""
    grantable = {p.value: p for p in TA_GRANTABLE}
    wrong = [name for name in names if name not in grantable]
    if wrong:
        raise ValueError(f"“{wrong[0]}” is not a power a course gives its TAs: choose among "
                         f"{', '.join(grantable)}")
    return frozenset(grantable[name] for name in names)


def powers_words(powers: frozenset[Power]) -> str:
    return powers_text(powers).replace(",", ", ") or "none"


def _runs_words(runs: int | None) -> str:
    return "default" if runs is None else str(runs)


def set_ta_powers(session: Session, course: Course, powers: frozenset[Power], via: Via,
                  actor: User | None = None, address: str | None = None) -> bool:
    """Give the course's TAs exactly `powers` (those not TA_GRANTABLE give nothing); True when
    that changed anything (then audited)."""
    before, after = course.ta_granted, granted_powers(powers_text(powers))
    if before == after:
        return False
    course.ta_powers = powers_text(after)
    record(session, Event.settings_changed, via, user=actor, address=address,
           detail=f"course {course.slug}: TA powers {powers_words(before)} -> {powers_words(after)}")
    return True


def set_course_run_quota(session: Session, course: Course, typed: str, via: Via, actor: User | None = None,
                         address: str | None = None) -> int | None:
    """The course's run quota as a form types it (grader.course.quotas.parse_runs: a number, 0
    for no quota, "" for the service's); ValueError saying what to type."""
    return _set_run_quota(session, course, f"course {course.slug}", typed, via, actor, address)


def set_assignment_run_quota(session: Session, assignment: Assignment, typed: str, via: Via,
                             actor: User | None = None, address: str | None = None) -> int | None:
    """The assignment's own run quota as a form types it ("" for its course's); ValueError
    saying what to type."""
    return _set_run_quota(session, assignment, f"assignment {assignment.slug}", typed, via, actor, address)


def _set_run_quota(session: Session, row: Course | Assignment, label: str, typed: str, via: Via,
                   actor: User | None, address: str | None) -> int | None:
    """`row`'s quota_runs set from the typed text, audited under `label` when it changed."""
    runs, before = parse_runs(typed), row.quota_runs
    row.quota_runs = runs
    if runs != before:
        record(session, Event.settings_changed, via, user=actor, address=address,
               detail=f"{label}: run quota {_runs_words(before)} -> {_runs_words(runs)}")
    return runs


def add_similarity_source(session: Session, assignment: Assignment, entry: dict[str, Any], via: Via,
                          actor: User | None = None, address: str | None = None) -> bool:
    """List `entry` (a known solution or common code, grader.similarity.public) among the
    assignment's; False when it is listed already."""
    # imported here: grader.similarity loads copydetect, which the CLIs importing this need not
    from grader.similarity.public import entry_key, entry_role_words

    listed = list(assignment.similarity_sources or [])
    if any(entry_key(e) == entry_key(entry) for e in listed):
        return False
    assignment.similarity_sources = [*listed, entry]
    record(session, Event.settings_changed, via, user=actor, address=address,
           detail=f"assignment {assignment.slug}: similarity source listed: {entry_role_words(entry)}")
    return True


def remove_similarity_source(session: Session, assignment: Assignment, key: str, via: Via,
                             actor: User | None = None, address: str | None = None) -> str | None:
    """Take the listed source of `key` off the assignment's; its words, or None when none is listed so."""
    from grader.similarity.public import entry_key, entry_role_words

    listed = list(assignment.similarity_sources or [])
    gone = next((e for e in listed if entry_key(e) == key), None)
    if gone is None:
        return None
    assignment.similarity_sources = [e for e in listed if e is not gone] or None
    record(session, Event.settings_changed, via, user=actor, address=address,
           detail=f"assignment {assignment.slug}: similarity source removed: {entry_role_words(gone)}")
    return entry_role_words(gone)
