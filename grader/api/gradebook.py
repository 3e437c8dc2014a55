"""An assignment's gradebook as the API exports it (GradebookOut) and as a Canvas-ready CSV;
the instructor's web page offers both downloads too."""
from __future__ import annotations

import csv
import io

from grader import queries
from grader.api.schemas import GradebookOut, GradebookRowOut


def gradebook_out(book: queries.Gradebook) -> GradebookOut:
    rows = [GradebookRowOut.of(row, problems=dict(row.graded.problems) if row.graded else {},
                               run_id=row.graded.run_id if row.graded else None)
            for row in book.rows]
    return GradebookOut.of(book, rows=rows)


def _csv_cell(value: object) -> object:
    # A cell a spreadsheet would read as a formula is quoted as text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _fmt(points: float | None) -> str:
    return "" if points is None else f"{points:g}"


def gradebook_csv(book: queries.Gradebook) -> str:
    """Canvas's import matches rows on `SIS Login ID` (the login); `Student` is the roster's
    name where there is one. A blank score leaves Canvas unchanged."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["Student", "SIS Login ID", f"{book.title} ({book.total_points:g})"]
        + [f"{p.problem_id} {p.title} ({p.max_points:g})" for p in book.problems]
    )
    for row in book.rows:
        problems = row.graded.problems if row.graded else {}
        writer.writerow(
            [_csv_cell(row.full_name or row.username), _csv_cell(row.username), _fmt(row.total)]
            + [_fmt(problems.get(p.problem_id)) if row.graded else "" for p in book.problems]
        )
    return out.getvalue()
