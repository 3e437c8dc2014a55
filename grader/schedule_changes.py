"""Changing an assignment's schedule or policies without rewriting anyone's grade unseen: the
grades a change would alter are computed first (preview), the change is saved only once
they were shown and confirmed (the settings page, `grader schedule --yes`), and each saved
change is an audit event (grader.auth.audit) that holds the settings before and after, so it
can be undone (its `undo`, itself previewed the same way).

*Why a savepoint:* the preview computes the gradebook under the proposed settings with the
very code that saves them (update_schedule, then gradebook_reads.gradebook, which also reads
settings through SQL joins), inside a SAVEPOINT that is always rolled back; a copy of the
settings beside the stored ones would have to teach every read of the gradebook to take it.
Rolling back a savepoint undoes its writes on PostgreSQL and SQLite alike and leaves the
request's own transaction as it was."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.course.assignment_settings import ScheduleChange, change_of, settings_texts, update_schedule
from grader.models import AuditEvent, User
from grader.reads.grade_changes import GradeChange, grade_changes
from grader.reads.gradebook_reads import gradebook
from grader.service import get_assignment
from grader.settings import Settings

# How each setting is named in words (the preview, the saved notice, the command line)
SETTING_WORDS = {"release": "release", "due": "due", "grace": "grace", "late_window": "late window",
                 "penalty_per_day": "penalty per day", "score_policy": "score policy",
                 "students_choose": "students choose their counted run", "extra_credit": "extra credit",
                 "canvas_id": "Canvas id"}


def _shown(value: str) -> str:
    return {"": "none", "on": "yes"}.get(value, value)


def settings_text(changed: dict[str, tuple[str, str]], arrow: str = "→") -> list[str]:
    """Each changed setting in words: "Late window: 3d → 1d" (the command line's arrow is "->")."""
    return [f"{SETTING_WORDS[name].capitalize()}: {_shown(old)} {arrow} {_shown(new)}"
            for name, (old, new) in changed.items()]


@dataclass(frozen=True)
class SchedulePreview:
    """What a proposed change would do: the settings as typed before and after (settings_texts)
    and every grade it would change."""

    slug: str
    before: dict[str, str]
    after: dict[str, str]
    changes: list[GradeChange]

    @property
    def changed(self) -> dict[str, tuple[str, str]]:
        """setting -> (before, after), for the settings the change alters."""
        return {name: (old, self.after[name]) for name, old in self.before.items() if self.after[name] != old}

    @property
    def digest(self) -> str:
        """A fingerprint of the grade changes, which a confirmation carries back: a grade that
        came or moved in between shows the preview again instead of saving what nobody saw."""
        lines = "\n".join(f"{c.login}\t{c.before}\t{c.after}" for c in self.changes)
        return hashlib.sha256(lines.encode()).hexdigest()[:32]


def preview_schedule(session: Session, slug: str, change: ScheduleChange, settings: Settings) -> SchedulePreview:
    """The grades `change` would alter on `slug`, computed under the proposed settings inside a
    savepoint that is rolled back: nothing is saved. ScheduleError: the change is not valid
    (update_schedule's); NotFound: no such assignment."""
    zone = ZoneInfo(settings.course_timezone)
    row = get_assignment(session, slug)
    before_texts, before = settings_texts(row, zone), gradebook(session, row, tz=zone, search=settings.rubric_dirs)
    savepoint = session.begin_nested()
    try:
        row = update_schedule(session, slug, change, settings.course_timezone)
        after_texts, after = settings_texts(row, zone), gradebook(session, row, tz=zone, search=settings.rubric_dirs)
    finally:
        savepoint.rollback()
    return SchedulePreview(slug, before_texts, after_texts, grade_changes(before, after))


def apply_schedule(session: Session, shown: SchedulePreview, settings: Settings, via: Via,
                   actor: User | None) -> AuditEvent | None:
    """Save the settings `shown` proposes and record the change (who, the assignment, each
    setting before -> after, how many grades it changed); None when no setting changes. The
    caller commits."""
    update_schedule(session, shown.slug, change_of(shown.after), settings.course_timezone)
    if not shown.changed:
        return None
    detail = json.dumps({"assignment": shown.slug, "changed": shown.changed, "grades": len(shown.changes)},
                        separators=(",", ":"), ensure_ascii=False)
    event = record(session, Event.schedule_changed, via, user=actor, detail=detail)
    session.flush()
    return event


@dataclass(frozen=True)
class LoggedChange:
    """A saved schedule change, read back from its audit event."""

    event_id: int
    slug: str
    changed: dict[str, tuple[str, str]]
    grades: int  # how many grades it changed

    @property
    def restores(self) -> dict[str, str]:
        """What undoing it puts back: each setting it changed as it was before (settings_texts' names)."""
        return {name: old for name, (old, _new) in self.changed.items()}

    @property
    def text(self) -> str:
        grades = "no grade changed" if not self.grades else f"{self.grades} grade(s) changed"
        return f"{'; '.join(settings_text(self.changed))} ({grades})"


def logged_change(session: Session, event_id: int, slug: str) -> LoggedChange | None:
    """The schedule change of `slug` recorded as audit event `event_id`; None when that is no
    such event (or one whose detail cannot be read back)."""
    event = session.get(AuditEvent, event_id)
    if event is None or event.event != Event.schedule_changed.value:
        return None
    try:
        detail = json.loads(event.detail)
        changed = {str(name): (str(old), str(new)) for name, (old, new) in detail["changed"].items()
                   if name in SETTING_WORDS}
        found = LoggedChange(event_id, str(detail["assignment"]), changed, int(detail["grades"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return found if found.slug == slug and found.changed else None
