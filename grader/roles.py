"""Roles: who a user is on the site and in one course (plain enums, stored on the rows), and
what each course role may do there (pure: no database)."""
from __future__ import annotations

import enum


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
    manage = "manage"  # schedule, policies, extensions, roster, members, grading pauses, assignments; removals


POWERS: dict[CourseRole, frozenset[Power]] = {
    CourseRole.instructor: frozenset(Power),
    CourseRole.ta: frozenset({Power.view, Power.grade}),
    CourseRole.student: frozenset(),
}


def may(role: CourseRole | None, power: Power) -> bool:
    """Whether someone of `role` in a course (None: not in it) has `power` there."""
    return role is not None and power in POWERS[role]


# The sentence a refusal ends with: who may, for each power.
WHO_MAY = {
    Power.view: "Only the course's staff (its instructors and TAs) see this",
    Power.grade: "Only the course's staff (its instructors and TAs) grade",
    Power.manage: "Only the course's instructors change its schedule, policies, roster or members, pause grading "
                  "or remove anything",
}


def refusal(power: Power, role: CourseRole, course: str) -> str:
    """Why someone of `role` in `course` is refused something that needs `power`, in words."""
    return f"{WHO_MAY[power]} in {course}; you are a {role.label} there."
