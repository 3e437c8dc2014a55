"""A class's similarity report, computed once and kept (for the instructor's pages).

`compute_report` is what `grader similarity` and the similarity job (grader.similarity.jobs)
both run: every student's latest zip (grader.similarity.sources), compared with the base's
code and the sources staff listed as common code left out (grader.similarity.compare; fingerprints
cached under `KG_DATA_DIR/reports/fingerprints`), and each against the known public solutions
staff listed (grader.similarity.public), named.
The job stores the result as JSON under `KG_DATA_DIR/reports/` (shared by every web process)
with the sha256 of each zip compared and the base it used (its files beside the report), so
a pair's side-by-side view re-reads exactly those two zips from the blob store, however the
students have uploaded since, and highlights against that same base.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from grader.datadir import private_dir
from grader.models import utcnow
from grader.similarity.base import Base, text_sha256
from grader.similarity.cache import PrintCache, Progress
from grader.similarity.clusters import Cluster, cluster_of, dated, find_clusters
from grader.similarity.compare import Match, PairResult, Sources, compare_all
from grader.similarity.prints import Fingerprinting
from grader.similarity.public import COMMON, SOLUTION, PublicSource
from grader.similarity.report import report_json
from grader.similarity.sources import ClassSources, blob_sources, class_sources, upload_history
from grader.storage.blobstore import BlobStore
from worker.rubric import Rubric
from worker.unpack import BadArchive, UnpackLimits


@dataclass(frozen=True)
class StoredReport:
    assignment: str
    generated_at: datetime
    submissions: dict[str, str]  # username -> sha256 of the zip compared
    skipped: dict[str, str]  # username -> why their zip was left out
    pairs: list[PairResult]  # most similar first
    base: str  # the base compared against, in words
    clusters: list[Cluster] = field(default_factory=list)  # most students first
    public: list[str] = field(default_factory=list)  # the known public solutions compared against, by label
    public_matches: list[PairResult] = field(default_factory=list)  # (student, public label), most similar first
    common: list[str] = field(default_factory=list)  # the sources left out as common code, by label

    def pair(self, a: str, b: str) -> PairResult | None:
        return next((p for p in self.pairs if {p.a, p.b} == {a, b}), None)


def fingerprint_dir(data_dir: Path) -> Path:
    return data_dir / "reports" / "fingerprints"


def compute_report(session: Session, blobs: BlobStore, rubric: Rubric, limits: UnpackLimits, base: Base,
                   cache_dir: Path | None = None, progress: Progress | None = None,
                   public: Sequence[PublicSource] = ()) -> tuple[StoredReport, ClassSources]:
    """Compare every student's latest submission with every other's and with each known public
    solution of `public`, `base` (the starter the students received, grader.similarity.base) left
    out; the report and the sources it was computed from. CPU-bound for seconds to minutes: keep
    it off an event loop. `progress`: told (files fingerprinted, files to fingerprint)."""
    found = class_sources(session, blobs, rubric, limits)
    config = Fingerprinting(literal_copies=base.received)
    prints = PrintCache(config, cache_dir)
    solutions = {p.label: p.sources for p in public if p.role == SOLUTION}
    common = [p for p in public if p.role == COMMON]
    compared = compare_all(found.students, base.sources, solutions, config, prints, progress,
                           [p.sources for p in common])
    clusters = find_clusters(found.students, base.sources, prints, [p.sources for p in common])
    clusters = dated(clusters, first_uploads(session, blobs, rubric, limits, clusters, prints))
    return StoredReport(rubric.slug, utcnow(), found.submissions, found.skipped, compared.pairs, base.label, clusters,
                        list(solutions), compared.sources, [p.label for p in common]), found


def first_uploads(session: Session, blobs: BlobStore, rubric: Rubric, limits: UnpackLimits,
                  clusters: list[Cluster], prints: PrintCache) -> dict[tuple[str, str], datetime]:
    """(student, normalized digest) -> when the student first uploaded a file of that content,
    for every holder of `clusters`: their submissions read oldest first until each is found (the
    latest, which was compared, always holds it; an unreadable older zip is passed over)."""
    wanted: dict[str, set[str]] = {}
    for cluster in clusters:
        for holder in cluster.holders:
            wanted.setdefault(holder.student, set()).add(holder.digest)
    since: dict[tuple[str, str], datetime] = {}
    with tempfile.TemporaryDirectory(prefix="kg-since-") as tmp:
        for student, digests in sorted(wanted.items()):
            for number, (sha256, uploaded_at) in enumerate(upload_history(session, rubric.slug, student)):
                try:
                    files = blob_sources(blobs, sha256, rubric, limits, Path(tmp) / student / str(number))
                except (BadArchive, FileNotFoundError):
                    continue
                for digest in digests & {prints.get(path, text).digest for path, text in files.items()}:
                    since.setdefault((student, digest), uploaded_at)
                if digests <= {d for s, d in since if s == student}:
                    break
    return since


def report_path(data_dir: Path, slug: str) -> Path:
    return data_dir / "reports" / f"similarity-{slug}.json"


def base_files_path(report: Path) -> Path:
    return report.with_suffix(".base.json")


def save_report(report: StoredReport, base: Sources, path: Path) -> None:
    """The report and its base's files, each written to a temporary file and renamed: a reader
    never sees half of either; the base goes first, so no report is seen without its own."""
    body = {**report_json(report.assignment, report.pairs, report.clusters, report.public, report.public_matches,
                          report.common),
            "generated_at": report.generated_at.isoformat(),
            "submissions": report.submissions, "skipped": report.skipped, "base": report.base,
            "base_files": {path: text_sha256(text) for path, text in sorted(base.items())}}
    _write_json(base, base_files_path(path))
    _write_json(body, path)


def _write_json(body: Any, path: Path) -> None:
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".similarity-")
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh)
    os.replace(tmp, path)


def load_base_files(path: Path) -> Sources:
    """The files of the base the report at `path` was computed against (none for an older report)."""
    try:
        return json.loads(base_files_path(path).read_text())
    except FileNotFoundError:
        return {}


def _pair(data: dict[str, Any]) -> PairResult:
    matches = tuple(Match(m["path_a"], m["function_a"], m["path_b"], m["function_b"], m["score"], m["share_a"],
                          m["share_b"], tuple(map(tuple, m["lines_a"])), tuple(map(tuple, m["lines_b"])),
                          m.get("identical", False))
                    for m in data["matches"])
    return PairResult(data["a"], data["b"], data["score"], matches)


def load_report(path: Path) -> StoredReport | None:
    """The stored report, or None when none was computed yet."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return StoredReport(data["assignment"], datetime.fromisoformat(data["generated_at"]), data["submissions"],
                        data["skipped"], [_pair(p) for p in data["pairs"]], data.get("base", "not recorded"),
                        [cluster_of(c) for c in data.get("clusters", [])], data.get("public_sources", []),
                        [_pair(p) for p in data.get("public_matches", [])], data.get("common_sources", []))


def pair_sources(blobs: BlobStore, report: StoredReport, pair: PairResult, rubric: Rubric,
                 limits: UnpackLimits) -> dict[str, Sources]:
    """The two students' files as they were compared (their zips, by sha256)."""
    with tempfile.TemporaryDirectory(prefix="kg-pair-") as tmp:
        return {name: blob_sources(blobs, report.submissions[name], rubric, limits, Path(tmp) / name)
                for name in (pair.a, pair.b)}
