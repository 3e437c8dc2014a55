"""Courses: making one and giving it assignments (the `grader course` commands and the course
pages call these).

A course holds assignments and one roster and staff list (grader.course.membership). An
assignment is a rubric of the service (grader.service.sync_assignments makes its row, in no
course); a course takes it once, and it stays there: its submissions, grades and extensions
are the course's students'. Every refusal is a CourseError with a sentence that says what to do.
"""
from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.course.membership import enroll
from grader.models import Assignment, Course, CourseRole, User

SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MAX_TITLE = 256


class CourseError(ValueError):
    """A course change refused, with why."""


def find_course(session: Session, slug: str) -> Course | None:
    return session.scalar(select(Course).where(Course.slug == slug))


def create_course(session: Session, slug: str, title: str, instructor: User | None = None) -> Course:
    """A new course `slug` (its instructor `instructor`, when given)."""
    slug, title = slug.strip(), " ".join(title.split())
    if not SLUG.match(slug):
        raise CourseError(f"“{slug}” is not a course name: use 1 to 64 lower-case letters, digits, dots, dashes "
                          "or underscores, starting with a letter or digit (e.g. 11868-f26).")
    if not title or len(title) > MAX_TITLE:
        raise CourseError(f"Give the course a title of 1 to {MAX_TITLE} characters.")
    if find_course(session, slug) is not None:
        raise CourseError(f"There is already a course {slug}; choose another name.")
    course = Course(slug=slug, title=title)
    session.add(course)
    session.flush()
    if instructor is not None:
        enroll(session, instructor, course, CourseRole.instructor)
    return course


def course_of_free_assignments(session: Session, slug: str, title: str) -> Course:
    """The course `slug` (made, titled `title`, when there is none), holding every assignment no
    course held yet: the embedded service's one course (`grader dev`)."""
    course = find_course(session, slug) or create_course(session, slug, title)
    for assignment in free_assignments(session):
        assignment.course = course
    session.flush()
    return course


def course_holding(session: Session, slug: str) -> Course | None:
    """The course of the assignment `slug` (None: no such assignment, or in no course)."""
    return session.scalar(select(Course).join(Assignment, Assignment.course_id == Course.id)
                          .where(Assignment.slug == slug))


def free_assignments(session: Session) -> list[Assignment]:
    """The service's assignments that no course holds yet, by slug."""
    return list(session.scalars(select(Assignment).where(Assignment.course_id.is_(None)).order_by(Assignment.slug)))


def add_assignment(session: Session, course: Course, slug: str) -> Assignment:
    """Put the assignment `slug`, which no course holds yet, into `course`."""
    assignment = session.scalar(select(Assignment).where(Assignment.slug == slug))
    if assignment is None:
        raise CourseError(f"There is no assignment {slug}: an assignment is a rubric the service grades "
                          "(KG_RUBRICS), loaded by `grader migrate`.")
    if assignment.course_id == course.id:
        return assignment
    if assignment.course_id is not None:
        raise CourseError(f"{slug} is already an assignment of another course; an assignment belongs to one course.")
    assignment.course = course
    session.flush()
    return assignment
