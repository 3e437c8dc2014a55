"""An assignment's settings as an instructor types them (the `grader schedule` / `grader extend`
options and the settings page's form): parsed, validated with grader.course.deadlines' rules, and
stored through grader.course.policies. The CLI and the page call the same function for each change.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.course.deadlines import Extension, LatePolicy
from grader.course.policies import SCORE_POLICIES, grant_extension, late_policy, set_schedule
from grader.models import Assignment, User
from grader.models import Extension as ExtensionRow
from grader.service import NotFound, find_user, get_assignment

T = TypeVar("T")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(d|h|m|s)\s*$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> timedelta:
    """`3d`, `2h`, `90m`, `30s` or `0`; ValueError says how to write one."""
    if text.strip() == "0":
        return timedelta(0)
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"“{text}” is not a duration: write one like 3d, 2h, 90m or 30s")
    return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})


def parse_instant(text: str, zone: str) -> datetime:
    """ISO 8601 (`2026-03-19T23:59:59`, also an HTML date-time field's value); without an
    offset, in the course's time zone `zone`. ValueError says how to write one."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"“{text}” is not a date and time: write one like 2026-03-19T23:59:59") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=ZoneInfo(zone))


def parse_extra_credit(text: str) -> float:
    """Points of extra credit: a number, 0 or more (`10`, `2.5`)."""
    try:
        points = float(text.strip())
    except ValueError:
        raise ValueError(f"“{text}” is not a number of points: write one like 10, or 0 for no extra credit") from None
    if not points >= 0 or points == float("inf"):
        raise ValueError("Extra credit is a number of points, 0 or more.")
    return points


# The assignment's number in Canvas, alone or in its Canvas address (…/assignments/<id>)
_CANVAS_ASSIGNMENT = re.compile(r"^\s*(?:\S*/assignments/)?(\d{1,32})/?\s*$")


def parse_canvas_id(text: str) -> str:
    """An assignment's Canvas id: its number (`88123`), or its Canvas address, whose number it takes."""
    match = _CANVAS_ASSIGNMENT.match(text)
    if match is None:
        raise ValueError(f"“{text}” is not a Canvas assignment id: give the number at the end of the assignment's "
                         "Canvas address (…/assignments/88123), or leave it empty")
    return match.group(1)


def parse_penalty(text: str) -> float:
    """A share of the score per started day: `0.1` or `10%` (the range is LatePolicy's rule)."""
    cleaned = text.strip()
    try:
        number = float(cleaned.removesuffix("%"))
    except ValueError:
        raise ValueError(f"“{text}” is not a penalty: write a share like 0.1 or a percentage like 10%") from None
    return number / 100 if cleaned.endswith("%") else number


@dataclass(frozen=True)
class ScheduleChange:
    """A schedule as typed. None: keep the current value; "" (blank): none at all (no release
    or due date, no grace, no late window, no penalty)."""

    release: str | None = None
    due: str | None = None
    grace: str | None = None
    late_window: str | None = None
    penalty_per_day: str | None = None
    score_policy: str | None = None
    students_choose: bool | None = None  # whether students may choose which of their runs counts
    extra_credit: str | None = None  # points a grade may reach above the total through the staff's entries
    canvas_id: str | None = None  # the assignment's id in Canvas, for the Canvas CSV's column title


# The settings update_schedule changes, by their typed names (ScheduleChange's fields)
SETTING_NAMES = ("release", "due", "grace", "late_window", "penalty_per_day", "score_policy", "students_choose",
                 "extra_credit", "canvas_id")


def duration_field(delta: timedelta) -> str:
    """A duration as parse_duration reads it back: `3d`, `2h`, `90m`, `45s`; "" for none."""
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s" if seconds else ""


def _number(value: float) -> str:
    """A number as typed, to 9 decimals, without trailing zeros (`:g` would round to 6 digits)."""
    return f"{value:.9f}".rstrip("0").rstrip(".")


def settings_texts(assignment: Assignment, zone: ZoneInfo) -> dict[str, str]:
    """The assignment's settings as typed, by SETTING_NAMES: what change_of turns back into the
    same settings (instants in `zone` with their offset, so they read back exactly wherever
    they are read; students_choose "on" or "")."""
    policy = late_policy(assignment)

    def instant(at: datetime | None) -> str:
        return at.astimezone(zone).isoformat() if at else ""

    return {"release": instant(policy.release_at), "due": instant(policy.due_at),
            "grace": duration_field(policy.grace), "late_window": duration_field(policy.late_window),
            "penalty_per_day": f"{_number(policy.penalty_per_day * 100)}%" if policy.penalty_per_day else "",
            "score_policy": assignment.score_policy,
            "students_choose": "on" if assignment.students_choose_counted_run else "",
            "extra_credit": _number(assignment.extra_credit_points), "canvas_id": assignment.canvas_assignment_id or ""}


def change_of(texts: Mapping[str, str]) -> ScheduleChange:
    """The ScheduleChange that sets what `texts` (settings_texts' names) give and keeps the rest."""
    choose = texts.get("students_choose")
    return ScheduleChange(**{name: texts.get(name) for name in SETTING_NAMES if name != "students_choose"},
                          students_choose=None if choose is None else choose == "on")


class ScheduleError(ValueError):
    """What is wrong with a ScheduleChange: field name -> message; the key "" holds a problem
    of the schedule as a whole (the due date before the release, say)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = errors


# LatePolicy's own messages, said in the form's words.
_WHOLE_SCHEDULE = {
    "release_at is after due_at": "The due date is before the release date.",
    "the late window includes the grace and cannot be shorter than it":
        "The late window counts from the due date and includes the grace, so it cannot be shorter than the grace.",
    "penalty_per_day is a fraction of the score between 0 and 1":
        "The penalty per day is a share of the score between 0 and 1 (0% to 100%).",
    "grace must not be negative": "The grace cannot be negative.",
}


def _field(errors: dict[str, str], name: str, text: str | None, parse: Callable[[str], T],
           current: T, blank: T) -> T:
    if text is None:
        return current
    if not text.strip():
        return blank
    try:
        return parse(text)
    except ValueError as exc:
        errors[name] = str(exc)
        return current


def update_schedule(session: Session, slug: str, change: ScheduleChange, zone: str) -> Assignment:
    """Apply `change` to the assignment's schedule, score policy, whether students choose
    which of their runs counts (grader.course.counted_choice), its extra credit (how far above
    its points the staff's entries may take a grade: grader.course.grades) and its Canvas id
    (grader.api.gradebook.canvas_column), all or nothing.
    ScheduleError names every field that is wrong; NotFound: no such assignment."""
    row = get_assignment(session, slug)
    current = late_policy(row)
    errors: dict[str, str] = {}
    release = _field(errors, "release", change.release, lambda t: parse_instant(t, zone), current.release_at, None)
    due = _field(errors, "due", change.due, lambda t: parse_instant(t, zone), current.due_at, None)
    grace = _field(errors, "grace", change.grace, parse_duration, current.grace, timedelta(0))
    window = _field(errors, "late_window", change.late_window, parse_duration, current.late_window, timedelta(0))
    penalty = _field(errors, "penalty_per_day", change.penalty_per_day, parse_penalty, current.penalty_per_day, 0.0)
    extra = _field(errors, "extra_credit", change.extra_credit, parse_extra_credit, row.extra_credit_points, 0.0)
    canvas_id = _field(errors, "canvas_id", change.canvas_id, parse_canvas_id, row.canvas_assignment_id, None)
    score_policy = change.score_policy or row.score_policy
    if score_policy not in SCORE_POLICIES:
        errors["score_policy"] = f"The score policy is one of: {', '.join(SCORE_POLICIES)}."
    if errors:
        raise ScheduleError(errors)
    try:
        policy = LatePolicy(release_at=release, due_at=due, grace=grace, late_window=window, penalty_per_day=penalty)
    except ValueError as exc:
        raise ScheduleError({"": _WHOLE_SCHEDULE.get(str(exc), str(exc))}) from None
    row = set_schedule(session, slug, policy, score_policy)
    if change.students_choose is not None:
        row.students_choose_counted_run = change.students_choose
    row.extra_credit_points, row.canvas_assignment_id = extra, canvas_id
    session.flush()
    return row


def extend_student(session: Session, slug: str, username: str, extra: str, reason: str = "") -> ExtensionRow | None:
    """Give the student `username` `extra` time on `slug` (replacing an earlier extension);
    `0` removes their extension (None). NotFound: no such user or assignment; ValueError: a
    bad duration."""
    user = find_user(session, username.strip())
    if user is None:
        raise NotFound(f"no user “{username.strip()}”")
    extension = Extension(parse_duration(extra), reason.strip())
    if extension.extra:
        return grant_extension(session, slug, user, extension)
    assignment = get_assignment(session, slug)
    row = session.scalar(select(ExtensionRow).where(ExtensionRow.assignment_id == assignment.id,
                                                    ExtensionRow.user_id == user.id))
    if row is not None:
        session.delete(row)
        session.flush()
    return None


def extensions_of(session: Session, assignment: Assignment) -> list[tuple[User, ExtensionRow]]:
    """The assignment's extensions with their students, by login."""
    rows = session.execute(
        select(User, ExtensionRow).join(ExtensionRow, ExtensionRow.user_id == User.id)
        .where(ExtensionRow.assignment_id == assignment.id).order_by(User.username)
    )
    return [(user, row) for user, row in rows]
