"""A class's similarity report, computed once and kept (for the instructor's pages).

`compute_report` is what `grader similarity` and the similarity page both run: every
student's latest zip (grader.submission_sources), compared with the base's code left out
(grader.similarity; fingerprints cached under `KG_DATA_DIR/reports/fingerprints`). The page stores the result as JSON under
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
from grader.similarity import Match, PairResult, Sources, compare_class
from grader.similarity_cache import PrintCache
from grader.similarity_prints import Fingerprinting
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


def fingerprint_dir(data_dir: Path) -> Path:
    return data_dir / "reports" / "fingerprints"


def compute_report(session: Session, blobs: BlobStore, rubric: Rubric, limits: UnpackLimits, base: Sources,
                   cache_dir: Path | None = None) -> tuple[StoredReport, ClassSources]:
    """Compare every student's latest submission with every other's, `base` (the starter the
    students received, grader.similarity_base) left out; the report and the sources it was
    computed from. CPU-bound for seconds to minutes: keep it off an event loop."""
    found = class_sources(session, blobs, rubric, limits)
    config = Fingerprinting()
    pairs = compare_class(found.students, base, config, PrintCache(config, cache_dir))
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
    matches = tuple(Match(m["path_a"], m["function_a"], m["path_b"], m["function_b"], m["score"], m["share_a"],
                          m["share_b"], tuple(map(tuple, m["lines_a"])), tuple(map(tuple, m["lines_b"])))
                    for m in data["matches"])
    return PairResult(data["a"], data["b"], data["score"], matches)


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
