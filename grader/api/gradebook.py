"""An assignment's gradebook as the API exports it (GradebookOut) and as a Canvas-ready CSV;
the instructor's web page offers both downloads too."""
from __future__ import annotations

import csv
import io

from grader.api.schemas import GradebookOut, GradebookRowOut, GradeOut
from grader.course.grades import signed_points
from grader.reads.gradebook_reads import Gradebook


def gradebook_out(book: Gradebook) -> GradebookOut:
    rows = [GradebookRowOut.of(row, problems=dict(row.graded.problems) if row.graded else {},
                               run_id=row.graded.run_id if row.graded else None,
                               grade=GradeOut.of(row.graded.grade) if row.graded else None,
                               chosen_by=row.pin.by if row.pin else None,
                               chosen_reason=row.pin.reason if row.pin else None)
            for row in book.rows]
    return GradebookOut.of(book, rows=rows)


def _csv_cell(value: object) -> object:
    # A cell a spreadsheet would read as a formula is quoted as text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _fmt(points: float | None) -> str:
    return "" if points is None else f"{points:g}"


def gradebook_csv(book: Gradebook) -> str:
    """Canvas's import matches rows on `SIS Login ID` (the login); `Student` is the roster's
    name where there is one. A blank score leaves Canvas unchanged. The assignment's column
    is the final grade (after a late penalty and the staff's adjustments); the raw total, the
    penalty, the lateness, the adjustments (their sum and their reasons) and the per-problem
    points (raw, before the penalty) follow, each labelled so."""
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
        graded = row.graded
        grade = [_fmt(graded.grade.final), _fmt(graded.grade.raw), _fmt(graded.grade.penalty), graded.grade.status,
                 str(graded.grade.lateness.penalty_days), _fmt(graded.grade.adjusted),
                 _csv_cell("; ".join(f"{a.reason} ({signed_points(a.points)})" for a in graded.grade.adjustments)),
                 graded.grade.reason] if graded else [""] * 8
        writer.writerow(
            [_csv_cell(row.full_name or row.username), _csv_cell(row.username)] + grade
            + [_fmt(graded.problems.get(p.problem_id)) if graded else "" for p in book.problems]
        )
    return out.getvalue()
