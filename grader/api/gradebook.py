"""An assignment's gradebook as the API exports it (GradebookOut) and as two CSVs: the one
Canvas imports unchanged (canvas_csv: one column per assignment, for a course's assignments
together) and the detailed one (detailed_csv: how each grade was made). The instructor's web
page offers the same downloads.

Canvas's gradebook import, which canvas_csv writes for (its rules as Canvas's own importer,
app/models/gradebook_importer.rb in instructure/canvas-lms, reads them; the instructors' guides
say the same, e.g. Ohio State's "Import CSV File for Carmen Grades" and VCU's "Gradebook Action
Menu"): a header row whose first columns are Student and ID, then SIS User ID and SIS Login ID,
then Section as the last student column; every further column is an assignment, matched by
the id in a title that ends in " (<digits>)", else by its exact title, else created as a new
assignment; a row whose first cell says Points Possible gives the points; each student row is
matched by ID (Canvas's user id), else SIS User ID, else SIS Login ID (compared as written, case
included), else the name. A blank grade changes nothing."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from grader.api.schemas import GradebookOut, GradebookRowOut, GradeOut
from grader.course.roster_csv import looks_like_formula
from grader.reads.gradebook_reads import Gradebook, GradebookRow

# Canvas's gradebook export starts so, and its import reads a file of the same shape: these
# columns name the student, then one column per assignment, and the line under the header
# gives each assignment's points (Canvas's own export writes the label with four spaces).
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "    Points Possible"


def gradebook_out(book: Gradebook) -> GradebookOut:
    rows = [GradebookRowOut.of(row, problems=dict(row.graded.problems) if row.graded else {},
                               run_id=row.graded.run_id if row.graded else None,
                               grade=GradeOut.of(row.grade) if row.grade else None,
                               chosen_by=row.pin.by if row.pin else None,
                               chosen_reason=row.pin.reason if row.pin else None)
            for row in book.rows]
    return GradebookOut.of(book, rows=rows)


def _csv_cell(value: object) -> object:
    # A cell a spreadsheet would read as a formula is quoted as text.
    if isinstance(value, str) and looks_like_formula(value):
        return "'" + value
    return value


def _fmt(points: float | None) -> str:
    return "" if points is None else f"{points:g}"


def canvas_column(book: Gradebook) -> str:
    """An assignment's column title: `<title> (<Canvas id>)` where staff set its Canvas id (Canvas
    then grades that assignment whatever its title there), else its title (Canvas matches it by
    title, or makes a new assignment)."""
    return f"{book.title} ({book.canvas_id})" if book.canvas_id else book.title


def canvas_csv(books: Sequence[Gradebook]) -> str:
    """The gradebooks of `books` (a course's assignments, in order) as Canvas imports them (the
    module's docstring): Student (the course roster's name, else the login), ID, SIS User ID and
    SIS Login ID as the course's roster gave them (Canvas's own, the login in its own case; the
    login where the roster gave none), Section, then one column per assignment (canvas_column)
    holding the final grade (after a late penalty and the staff's adjustments); the Points
    Possible line gives each assignment's points. A student of any of the gradebooks has one
    row; a blank grade leaves Canvas's unchanged."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CANVAS_COLUMNS, *(_csv_cell(canvas_column(book)) for book in books)])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", *(_fmt(book.total_points) for book in books)])
    students: dict[int, GradebookRow] = {}
    for book in books:
        for row in book.rows:
            students.setdefault(row.user_id, row)
    totals = [{row.user_id: row.total for row in book.rows} for book in books]
    for user_id, row in sorted(students.items(), key=lambda item: item[1].username):
        writer.writerow([_csv_cell(row.full_name or row.username), row.canvas_user_id or "",
                         _csv_cell(row.sis_user_id or ""), _csv_cell(row.sis_login_id or row.username),
                         _csv_cell(row.section or ""), *(_fmt(total.get(user_id)) for total in totals)])
    return out.getvalue()


def detailed_csv(book: Gradebook) -> str:
    """How each grade of one assignment was made, for the staff's records (not for Canvas):
    Student (the roster's name where there is one) and SIS Login ID (as canvas_csv), the final
    grade (after a late penalty and the staff's adjustments); the raw total, the penalty, the
    lateness, the adjustments (their sum and their reasons) and the per-problem points (raw,
    before the penalty) follow, each labelled so."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    total = f"{book.total_points:g}"
    writer.writerow(
        ["Student", "SIS Login ID", f"{book.title} final ({total})", f"Raw score before late penalty ({total})",
         "Late penalty (points)", "Lateness", "Late days charged", "Adjustment (points)", "Adjustment reasons",
         "Grade reason"]
        + [f"{p.problem_id} {p.title} raw ({p.max_points:g})" for p in book.problems]
    )
    for row in book.rows:
        graded, final = row.graded, row.grade
        grade = [_fmt(final.final), _fmt(final.raw), _fmt(final.penalty), final.status, str(final.penalty_days),
                 _fmt(final.adjusted), _csv_cell("; ".join(f"{a.reason} ({a.what})" for a in final.adjustments)),
                 final.reason] if final else [""] * 8
        writer.writerow(
            [_csv_cell(row.full_name or row.username), _csv_cell(row.sis_login_id or row.username)] + grade
            + [_fmt(graded.problems.get(p.problem_id)) if graded else "" for p in book.problems]
        )
    return out.getvalue()
