"""The instructor's gradebook page: search, filters, sort and pages over the gradebook's rows
(from the query string, so every view is a link that works without JavaScript), the charts
of every row the filters select (all pages), and the bulk re-grade of exactly those rows."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from math import ceil
from urllib.parse import urlencode

from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import Assignment, RunState, Submission
from grader.pages import charts
from grader.reads.gradebook_reads import Gradebook, GradebookRow
from grader.reads.submission_reads import regrade_targets

NO_RUN = "none"  # state filter: students without any run
STATE_CHOICES: tuple[str, ...] = ("", *(s.value for s in RunState), NO_RUN)
FIXED_SORTS = ("student", "name", "section", "submissions", "state", "score")


@dataclass(frozen=True)
class View:
    """What the query string asks for; `errors` lists what was ignored and why."""

    assignment: str
    policy: str
    q: str = ""
    state: str = ""
    section: str = ""
    min_score: float | None = None
    max_score: float | None = None
    sort: str = "student"
    desc: bool = False
    page: int = 1
    errors: tuple[str, ...] = ()

    def params(self, **changes: object) -> dict[str, str]:
        chosen = replace(self, **changes)  # type: ignore[arg-type]
        values = {"assignment": chosen.assignment, "policy": chosen.policy, "q": chosen.q, "state": chosen.state,
                  "section": chosen.section,
                  "min_score": "" if chosen.min_score is None else f"{chosen.min_score:g}",
                  "max_score": "" if chosen.max_score is None else f"{chosen.max_score:g}",
                  "sort": chosen.sort, "dir": "desc" if chosen.desc else "asc",
                  "page": str(chosen.page) if chosen.page > 1 else ""}
        return {k: v for k, v in values.items() if v}

    def url(self, path: str = "/gradebook", **changes: object) -> str:
        """This view with `changes`; any change but the page's starts again at page 1."""
        changes.setdefault("page", 1 if changes else self.page)
        return f"{path}?{urlencode(self.params(**changes))}"

    def filter_params(self) -> dict[str, str]:
        """The fields that choose rows (not their order or page): what a bulk action acts on."""
        return {k: v for k, v in self.params().items() if k not in ("sort", "dir", "page")}

    def describe(self) -> str:
        """The filters in words, for a confirmation: "matching section B, newest run failed"."""
        parts = [f"search “{self.q}”" if self.q else "", f"section {self.section}" if self.section else "",
                 {"": "", NO_RUN: "no run yet"}.get(self.state, f"newest run {self.state}"),
                 "" if self.min_score is None else f"final score at least {self.min_score:g}",
                 "" if self.max_score is None else f"final score at most {self.max_score:g}"]
        chosen = [p for p in parts if p]
        return "matching " + ", ".join(chosen) if chosen else "(no filters: every student)"

    def sort_url(self, key: str) -> str:
        """Sort by `key`; the column already sorted on flips its direction."""
        return self.url(sort=key, desc=not self.desc if self.sort == key else key == "score")

    def aria_sort(self, key: str) -> str | None:
        if self.sort != key:
            return None
        return "descending" if self.desc else "ascending"


def _score(raw: str, name: str, errors: list[str]) -> float | None:
    if not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        errors.append(f"{name} “{raw}” is not a number; it was ignored.")
        return None


def parse_view(params: Mapping[str, str], assignment: str, policy: str, problem_ids: list[str]) -> View:
    errors: list[str] = []
    state = params.get("state", "")
    if state not in STATE_CHOICES:
        errors.append(f"Unknown state “{state}”; showing every state.")
        state = ""
    sort = params.get("sort", "student")
    if sort not in FIXED_SORTS and sort.removeprefix("p:") not in problem_ids:
        errors.append(f"Cannot sort by “{sort}”; sorted by student.")
        sort = "student"
    page = params.get("page", "1")
    if not (page.isascii() and page.isdigit() and 0 < int(page) < 10**6):
        errors.append(f"“{page}” is not a page number; showing page 1.")
        page = "1"
    return View(assignment=assignment, policy=policy, q=params.get("q", "").strip(), state=state,
                section=params.get("section", "").strip(),
                min_score=_score(params.get("min_score", ""), "Minimum score", errors),
                max_score=_score(params.get("max_score", ""), "Maximum score", errors),
                sort=sort, desc=params.get("dir", "asc") == "desc", page=int(page), errors=tuple(errors))


def _matches(row: GradebookRow, view: View) -> bool:
    if view.q:
        needle = view.q.casefold()
        if needle not in row.username.casefold() and needle not in (row.full_name or "").casefold():
            return False
    if view.state:
        state = row.newest.state.value if row.newest else NO_RUN
        if state != view.state:
            return False
    if view.section and (row.section or "") != view.section:
        return False
    if view.min_score is not None and (row.total is None or row.total < view.min_score):
        return False
    if view.max_score is not None and (row.total is None or row.total > view.max_score):
        return False
    return True


def _sort_key(sort: str) -> Callable[[GradebookRow], object]:
    if sort.startswith("p:"):
        pid = sort[2:]
        return lambda r: r.graded.problems.get(pid) if r.graded else None
    keys: dict[str, Callable[[GradebookRow], object]] = {
        "student": lambda r: r.username.casefold(),
        "name": lambda r: (r.full_name or "").casefold() or None,
        "section": lambda r: r.section or None,
        "submissions": lambda r: r.submissions,
        "state": lambda r: r.newest.state.value if r.newest else None,
        "score": lambda r: r.total,
    }
    return keys[sort]


def select_rows(book: Gradebook, view: View) -> list[GradebookRow]:
    """The rows the view asks for, sorted; rows without a value for the sort key go last in
    either direction, and ties keep the login order."""
    rows = [r for r in book.rows if _matches(r, view)]
    key = _sort_key(view.sort)
    present = [r for r in rows if key(r) is not None]
    absent = [r for r in rows if key(r) is None]
    present.sort(key=lambda r: key(r), reverse=view.desc)  # type: ignore[arg-type,return-value]
    return present + absent


@dataclass(frozen=True)
class Pagination:
    """One page of the selected rows: `rows` are rows `first` to `last` (from 1) of `total`."""

    rows: list[GradebookRow]
    page: int
    pages: int
    first: int
    last: int
    total: int

    def links(self, around: int = 2) -> list[int | None]:
        """Page numbers to link: the first, the last and `around` either side of this one;
        None where two or more pages are left out (a gap of one shows that page)."""
        near = range(max(1, self.page - around), min(self.pages, self.page + around) + 1)
        links: list[int | None] = []
        previous = 0
        for number in sorted({1, self.pages, *near}):
            if previous and number > previous + 1:
                links.append(previous + 1 if number == previous + 2 else None)
            links.append(number)
            previous = number
        return links


def paginate(rows: list[GradebookRow], page: int, page_size: int) -> Pagination:
    """The asked page of `rows`; past the end, the last page."""
    pages = max(1, ceil(len(rows) / page_size))
    page = min(max(page, 1), pages)
    start = (page - 1) * page_size
    shown = rows[start:start + page_size]
    return Pagination(shown, page, pages, start + 1 if shown else 0, start + len(shown), len(rows))


def uncalibrated_models(rows: list[GradebookRow]) -> list[str]:
    """The GPU models without a stored calibration that graded any of `rows` (one banner names them)."""
    return sorted({r.graded.gpu.model for r in rows if r.graded and r.graded.gpu and not r.graded.gpu.calibrated})


def score_histogram(book: Gradebook, rows: list[GradebookRow]) -> Markup:
    totals = [r.total for r in rows if r.total is not None]
    return charts.histogram(totals, book.total_points, bins=10,
                            label="Total scores of the students the filters select")


def speedup_distributions(book: Gradebook, rows: list[GradebookRow]) -> Markup:
    return charts.distributions([
        charts.Distribution(f"{p.problem_id}", [r.graded.speedups[p.problem_id] for r in rows
                                                if r.graded and p.problem_id in r.graded.speedups], p.target)
        for p in book.problems
    ])


# ---- bulk re-grade ----------------------------------------------------------------------

BULK_CHOICES = ("selected", "latest", "all")


def newest_submissions(session: Session, assignment: Assignment) -> dict[int, int]:
    """Each student's most recently uploaded submission id (by user id)."""
    newest: dict[int, int] = {}
    for user_id, sub_id in session.execute(
        select(Submission.user_id, Submission.id).where(Submission.assignment_id == assignment.id)
        .order_by(Submission.user_id, Submission.uploaded_at.desc(), Submission.id.desc())
    ):
        newest.setdefault(user_id, sub_id)
    return newest


def row_regrades(row: GradebookRow, newest: dict[int, int]) -> list[tuple[int, str]]:
    """The one-row Re-grade buttons, (submission id, "graded" or "newest"). A TA re-grading a
    row usually means "recompute the grade that counts" (a rubric fix, a doubtful timing), so
    the graded submission comes first; but when the student has uploaded since (not scored yet,
    or failed on infrastructure) the newest is what they want graded, so it gets its own button.
    Both name the submission id: no button re-runs a submission the TA did not mean."""
    graded = row.graded.submission_id if row.graded else None
    latest = newest.get(row.user_id)
    return [(sub, label) for sub, label in ((graded, "graded"), (latest, "newest"))
            if sub is not None and not (label == "newest" and sub == graded)]


@dataclass(frozen=True)
class BulkRegrade:
    """What a bulk re-grade of the rows `view` selects would queue: `targets` in queue order
    (round-robin over students, submission_reads.regrade_targets). `token` names that exact set: the
    confirmation page sends it back, and the re-grade runs only while the set is the same."""

    which: str
    view: View
    targets: list[Submission]

    @property
    def students(self) -> int:
        return len({s.user_id for s in self.targets})

    @property
    def token(self) -> str:
        ids = ",".join(str(i) for i in sorted(s.id for s in self.targets))
        return hashlib.sha256(f"{self.which}:{ids}".encode()).hexdigest()[:20]

    def summary(self) -> str:
        """The confirmation's question, with the count and the filters."""
        kind = {"selected": "ticked", "latest": "newest", "all": ""}[self.which]
        what = f"{len(self.targets)} {kind + ' ' if kind else ''}submission{'' if len(self.targets) == 1 else 's'}"
        return (f"Re-grade {what} of {self.students} student{'' if self.students == 1 else 's'} "
                f"{self.view.describe()}? This queues {len(self.targets)} "
                f"run{'' if len(self.targets) == 1 else 's'}.")


def bulk_regrade(session: Session, assignment: Assignment, book: Gradebook, view: View, which: str,
                 ticked: list[int]) -> BulkRegrade:
    """The submissions of the rows `view` selects (every page) that `which` asks for: the
    ticked ones among them, each student's newest, or every one of theirs. A ticked id outside
    the selected rows is a LookupError (the rows shown changed, or the form was not this page's)."""
    users = {r.user_id for r in select_rows(book, view)}
    if which == "selected":
        owners = {sub: user for sub, user in session.execute(select(Submission.id, Submission.user_id).where(
            Submission.assignment_id == assignment.id, Submission.id.in_(ticked)))}
        outside = sorted(i for i in ticked if owners.get(i) not in users)
        if outside:
            raise LookupError(f"submissions {outside} among the rows the gradebook shows")
        ids = ticked
    elif which == "latest":
        ids = [sub for user, sub in newest_submissions(session, assignment).items() if user in users]
    elif which == "all":
        ids = list(session.scalars(select(Submission.id).where(Submission.assignment_id == assignment.id,
                                                               Submission.user_id.in_(users))))
    else:
        raise LookupError(f"re-grade choice {which!r}")
    return BulkRegrade(which, view, regrade_targets(session, assignment, ids) if ids else [])
