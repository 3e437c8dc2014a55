"""The Canvas CSV (grader.api.gradebook.canvas_csv): exactly Canvas's gradebook import format for
a course's assignments together: the five student columns, one column per assignment, the
Points Possible line, one row per student of any assignment, blank where there is no grade."""
from __future__ import annotations

import csv
import io
from dataclasses import replace
from datetime import UTC, datetime

from grader.api.gradebook import canvas_csv
from grader.course.deadlines import LatePolicy, evaluate
from grader.course.grades import final_grade
from grader.reads.gradebook_reads import Gradebook, GradebookRow, ScoredRun

AT = datetime(2026, 3, 20, tzinfo=UTC)


def row(user_id: int, login: str, score: float | None, name: str | None = None,
        section: str | None = None) -> GradebookRow:
    graded = None if score is None else ScoredRun(
        run_id=user_id * 10, submission_id=user_id, grade=final_grade(score, 100, evaluate(LatePolicy(), AT)),
        finished_at=AT, problems={})
    return GradebookRow(user_id=user_id, username=login, submissions=1, latest=graded, best=graded, graded=graded,
                        full_name=name, section=section, grade=graded.grade if graded else None)


def test_a_course_csv_has_canvas_columns_and_a_column_per_assignment() -> None:
    hw1 = Gradebook("hw1", "Homework 1, kernels", 50, "latest", [],
                    [row(1, "ann", 48.5, "Lee, Ann", "A"), row(2, "bob", None, "Bob")])
    hw2 = Gradebook("hw2", "Homework 2", 100, "best", [], [row(2, "bob", 97.25), row(3, "=cmd", 10)])
    table = list(csv.reader(io.StringIO(canvas_csv([hw1, hw2]))))
    assert table == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Homework 1, kernels", "Homework 2"],
        ["    Points Possible", "", "", "", "", "50", "100"],
        ["'=cmd", "", "", "'=cmd", "", "", "10"],  # a formula is text; not in hw1: blank
        ["Lee, Ann", "", "", "ann", "A", "48.5", ""],
        ["Bob", "", "", "bob", "", "", "97.25"],
    ]


def test_an_assignment_without_students_still_has_its_column() -> None:
    table = list(csv.reader(io.StringIO(canvas_csv([Gradebook("hw4", "HW4", 100, "latest", [])]))))
    assert table == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW4"],
                     ["    Points Possible", "", "", "", "", "100"]]


def test_canvas_ids_and_the_assignment_id_go_back_as_canvas_wrote_them() -> None:
    ada = replace(row(1, "ada@andrew.cmu.edu", 91, "Lovelace, Ada", "Lecture 1"), canvas_user_id="5001",
                  sis_user_id="2026001", sis_login_id="Ada@Andrew.cmu.edu")
    hw4 = Gradebook("hw4", "HW4: fused kernels", 100, "latest", [], [ada, row(2, "bo", 70)], canvas_id="88123")
    hw5 = Gradebook("hw5", "HW5", 50, "latest", [], [])
    assert list(csv.reader(io.StringIO(canvas_csv([hw4, hw5])))) == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW4: fused kernels (88123)", "HW5"],
        ["    Points Possible", "", "", "", "", "100", "50"],
        ["Lovelace, Ada", "5001", "2026001", "Ada@Andrew.cmu.edu", "Lecture 1", "91", ""],
        ["bo", "", "", "bo", "", "70", ""],  # no roster ids: the login, which Canvas matches last
    ]
