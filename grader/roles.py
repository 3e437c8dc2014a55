"""Roles: who a user is on the site and in one course (plain enums, stored on the rows), and
what each course role may do there (pure: no database)."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(str, enum.Enum):
    """The account's site role. `instructor` may make courses (and so becomes their first
    instructor) and may hold staff scopes on its API tokens; what anyone may do in a course
    is their CourseRole there."""

    student = "student"
    instructor = "instructor"


class CourseRole(str, enum.Enum):
    """A user's part in one course (grader.course.membership), for every assignment it holds."""

    instructor = "instructor"
    ta = "ta"
    student = "student"

    @property
    def is_staff(self) -> bool:
        return self is not CourseRole.student

    @property
    def label(self) -> str:
        """How pages name the role."""
        return "TA" if self is CourseRole.ta else self.value


STAFF = (CourseRole.instructor, CourseRole.ta)


class Power(str, enum.Enum):
    """What a course's staff may do there, beyond a student's own work."""

    view = "view"  # read every submission, run, grade, report and request of the course
    grade = "grade"  # re-grade, adjust a grade, answer a regrade request, choose the run that counts, similarity
    manage = "manage"  # policies and quotas, roster, members, assignments, TA powers; removals
    # What a course's instructors may also let its TAs do there (TA_GRANTABLE, set on the course page):
    extend = "extend"  # grant and remove students' extensions
    queue = "queue"  # the grading controls: see the queue, pause and resume grading
    schedule = "schedule"  # change the schedule and late policy, undo such a change


POWERS: dict[CourseRole, frozenset[Power]] = {
    CourseRole.instructor: frozenset(Power),
    CourseRole.ta: frozenset({Power.view, Power.grade}),
    CourseRole.student: frozenset(),
}

TA_GRANTABLE = (Power.extend, Power.queue, Power.schedule)
TA_POWER_WORDS = {Power.extend: "grant and remove extensions", Power.queue: "see the grading queue and pause or "
                  "resume grading", Power.schedule: "change the schedule and late policy"}


def granted_powers(text: str) -> frozenset[Power]:
    """The powers a course's stored `ta_powers` (names, comma-separated) give its TAs; names
    that are not TA_GRANTABLE give nothing."""
    return frozenset(p for p in TA_GRANTABLE if p.value in text.split(","))


def powers_text(powers: frozenset[Power]) -> str:
    """How a course stores the powers it gives its TAs (granted_powers reads it back)."""
    return ",".join(p.value for p in TA_GRANTABLE if p in powers)


def may(role: CourseRole | None, power: Power, granted: frozenset[Power] = frozenset()) -> bool:
    """Whether someone of `role` in a course (None: not in it) has `power` there; `granted`:
    what the course's instructors let its TAs do besides (granted_powers)."""
    if role is None:
        return False
    return power in POWERS[role] or (role is CourseRole.ta and power in TA_GRANTABLE and power in granted)


def held_powers(role: CourseRole, granted: frozenset[Power] = frozenset()) -> frozenset[Power]:
    """Every power someone of `role` holds in a course that gives its TAs `granted`."""
    return frozenset(power for power in Power if may(role, power, granted))


# The sentence a refusal ends with: who may, for each power.
WHO_MAY = {
    Power.view: "Only the course's staff (its instructors and TAs) see this",
    Power.grade: "Only the course's staff (its instructors and TAs) grade",
    Power.manage: "Only the course's instructors change its policies, quotas, roster or members, or remove "
                  "anything",
    Power.extend: "Only the course's instructors, and the TAs they allow, grant or remove extensions",
    Power.queue: "Only the course's instructors, and the TAs they allow, see the grading queue and pause or "
                 "resume grading",
    Power.schedule: "Only the course's instructors, and the TAs they allow, change the schedule",
}


def refusal(power: Power, role: CourseRole, course: str) -> str:
    """Why someone of `role` in `course` is refused something that needs `power`, in words (a TA
    is told who may let them)."""
    said = f"{WHO_MAY[power]} in {course}; you are a {role.label} there."
    if role is CourseRole.ta and power in TA_GRANTABLE:
        said += " An instructor of the course may grant its TAs this on the course's page."
    return said


@dataclass(frozen=True)
class Refusal:
    """Why something is not given, in `words`; `absent`: to someone outside the course it is
    answered as if it did not exist (404, so a course's contents do not leak; the caller words
    that), else with `words` (403)."""

    words: str
    absent: bool = False


def refused(role: CourseRole | None, power: Power, course: str | None, granted: frozenset[Power] = frozenset(),
            also: tuple[Power, ...] = ()) -> Refusal | None:
    """The one rule the pages and the API answer by: None when someone of `role` in the course
    named `course` (None: no course) has `power`, or one of `also`, there (`granted`: what its
    instructors let its TAs do); else the refusal."""
    if role is None or course is None:
        return Refusal("", absent=True)
    if any(may(role, held, granted) for held in (power, *also)):
        return None
    return Refusal(refusal(power, role, course))
