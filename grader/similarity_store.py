"""A class's similarity report, computed once and kept (for the instructor's pages).

`compute_report` is what `grader similarity` and the similarity page both run: every
student's latest zip (grader.submission_sources), compared pairwise with the student
starter's code left out (grader.similarity). The page stores the result as JSON under
`KG_DATA_DIR/reports/` (shared by every web process) with the sha256 of each zip compared,
so a pair's side-by-side view re-reads exactly those two zips from the blob store, however
the students have uploaded since.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from grader.blobstore import BlobStore
from grader.models import utcnow
from grader.similarity import FileMatch, PairResult, Sources, compare_class, starter_sources
from grader.similarity_report import report_json
from grader.submission_sources import ClassSources, blob_sources, class_sources
from worker.rubric import Rubric
from worker.unpack import UnpackLimits


@dataclass(frozen=True)
class StoredReport:
    assignment: str
    generated_at: datetime
    submissions: dict[str, str]  # username -> sha256 of the zip compared
    skipped: dict[str, str]  # username -> why their zip was left out
    pairs: list[PairResult]  # most similar first

    def pair(self, a: str, b: str) -> PairResult | None:
        return next((p for p in self.pairs if {p.a, p.b} == {a, b}), None)


def compute_report(session: Session, blobs: BlobStore, rubric: Rubric,
                   limits: UnpackLimits) -> tuple[StoredReport, ClassSources]:
    """Compare every student's latest submission with every other's; the report and the
    sources it was computed from. CPU-bound for seconds to minutes: keep it off an event loop."""
    found = class_sources(session, blobs, rubric, limits)
    pairs = compare_class(found.students, starter_sources(rubric))
    return StoredReport(rubric.slug, utcnow(), found.submissions, found.skipped, pairs), found


def report_path(data_dir: Path, slug: str) -> Path:
    return data_dir / "reports" / f"similarity-{slug}.json"


def save_report(report: StoredReport, path: Path) -> None:
    """Written to a temporary file and renamed: a reader never sees half a report."""
    body = {**report_json(report.assignment, report.pairs), "generated_at": report.generated_at.isoformat(),
            "submissions": report.submissions, "skipped": report.skipped}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".similarity-")
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh)
    os.replace(tmp, path)


def _pair(data: dict[str, Any]) -> PairResult:
    files = tuple(FileMatch(f["path"], f["share_a"], f["share_b"], tuple(map(tuple, f["lines_a"])),
                            tuple(map(tuple, f["lines_b"]))) for f in data["files"])
    return PairResult(data["a"], data["b"], data["score"], files)


def load_report(path: Path) -> StoredReport | None:
    """The stored report, or None when none was computed yet."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return StoredReport(data["assignment"], datetime.fromisoformat(data["generated_at"]), data["submissions"],
                        data["skipped"], [_pair(p) for p in data["pairs"]])


def pair_sources(blobs: BlobStore, report: StoredReport, pair: PairResult, rubric: Rubric,
                 limits: UnpackLimits) -> dict[str, Sources]:
    """The two students' files as they were compared (their zips, by sha256)."""
    with tempfile.TemporaryDirectory(prefix="kg-pair-") as tmp:
        return {name: blob_sources(blobs, report.submissions[name], rubric, limits, Path(tmp) / name)
                for name in (pair.a, pair.b)}
