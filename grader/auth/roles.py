"""Roles: who a user is on the site and in one assignment (plain enums, stored on the rows)."""
from __future__ import annotations

import enum


class Role(str, enum.Enum):
    student = "student"
    instructor = "instructor"


class CourseRole(str, enum.Enum):
    """A user's part in one assignment (grader.course.membership): students submit and read their own
    work; staff read, re-grade and export everyone's."""

    student = "student"
    staff = "staff"
