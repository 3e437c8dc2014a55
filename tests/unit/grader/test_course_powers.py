"""grader.roles.refused: the one rule the pages and the API answer a course's things by: someone
outside the course is told nothing exists (404), someone inside it who lacks the power is told
who may (403), and a power the instructors granted the course's TAs is a TA's there."""
from __future__ import annotations

from grader.roles import CourseRole, Power, Refusal, refused


def test_outside_the_course_it_is_absent() -> None:
    assert refused(None, Power.view, "cmu-11868") == Refusal("", absent=True)
    assert refused(CourseRole.instructor, Power.view, None) == Refusal("", absent=True)


def test_inside_the_course_a_missing_power_says_who_may() -> None:
    denied = refused(CourseRole.student, Power.grade, "cmu-11868")
    assert denied is not None and not denied.absent
    assert "in cmu-11868; you are a" in denied.words
    assert refused(CourseRole.instructor, Power.grade, "cmu-11868") is None


def test_a_power_granted_to_the_courses_tas_is_theirs_there_only() -> None:
    ta_denied = refused(CourseRole.ta, Power.extend, "cmu-11868")
    assert ta_denied is not None and "An instructor of the course may grant" in ta_denied.words
    assert refused(CourseRole.ta, Power.extend, "cmu-11868", frozenset({Power.extend})) is None
    assert refused(CourseRole.student, Power.extend, "cmu-11868", frozenset({Power.extend})) is not None


def test_any_of_several_powers_will_do() -> None:
    assert refused(CourseRole.ta, Power.extend, "cmu-11868", also=(Power.view,)) is None
