"""Every student's upload of one assignment as one zip, for staff who grade by hand (a GPU
outage, an audit): each student's counted submission (the gradebook's: staff's pin, else the
score policy's pick; the newest upload where no run is scored yet) or each one's newest, and
manifest.csv saying, per student of the gradebook, which upload it holds and why.

The archive is written to an unnamed temp file beside the blob store's (private to the
service), one blob streamed at a time, so its size never sits in memory; the caller streams
the file back and closes it."""
from __future__ import annotations

import csv
import io
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import IO, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.course.roster_csv import looks_like_formula
from grader.datadir import private_dir
from grader.models import Assignment, Submission
from grader.reads.gradebook_reads import Gradebook, GradebookRow
from grader.storage.blobstore import BlobStore

Which = Literal["counted", "latest"]
WHICH: tuple[str, ...] = ("counted", "latest")
MANIFEST = "manifest.csv"
MANIFEST_COLUMNS = ("login", "name", "submission_id", "run_id", "uploaded_at", "sha256", "rule", "file")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Picked:
    """The upload one student's line of the manifest names (None: they uploaded none)."""

    row: GradebookRow
    submission: Submission | None
    run_id: int | None  # the counted run, where that picked it
    rule: str


def _newest_uploads(session: Session, assignment: Assignment) -> dict[int, Submission]:
    """user id -> their newest submission to `assignment` (highest id); one statement."""
    newest = (select(func.max(Submission.id)).where(Submission.assignment_id == assignment.id)
              .group_by(Submission.user_id))
    return {s.user_id: s for s in session.scalars(select(Submission).where(Submission.id.in_(newest)))}


def pick(session: Session, assignment: Assignment, book: Gradebook, which: Which) -> list[Picked]:
    """Each gradebook row's upload under `which`, and the rule that picked it, in words."""
    newest = _newest_uploads(session, assignment)
    counted_ids = [r.graded.submission_id for r in book.rows if r.graded is not None]
    counted = {s.id: s for s in session.scalars(select(Submission).where(Submission.id.in_(counted_ids or [-1])))}
    picked = []
    for row in book.rows:
        latest = newest.get(row.user_id)
        if which == "counted" and row.graded is not None:
            rule = (f"counted: chosen by {row.pin.by}" if row.pin is not None
                    else f"counted: the {book.policy} scored run")
            picked.append(Picked(row, counted[row.graded.submission_id], row.graded.run_id, rule))
        elif latest is not None:
            rule = "latest upload" if which == "latest" else "latest upload (no scored run counts)"
            picked.append(Picked(row, latest, None, rule))
        else:
            picked.append(Picked(row, None, None, "no upload"))
    return picked


def _member_name(picked: Picked) -> str:
    """The archive's name of a student's upload: the login, the submission and the file's own name."""
    assert picked.submission is not None
    original = picked.submission.original_filename.replace("/", "_").replace("\\", "_")
    return f"{picked.row.username}/{picked.submission.id}-{original}"


def _text_cell(value: str) -> str:
    """A cell a spreadsheet would run as a formula (a roster's name) written as text."""
    return "'" + value if looks_like_formula(value) else value


def write_archive(picks: list[Picked], blobs: BlobStore) -> IO[bytes]:
    """The zip of `picks`' uploads and its manifest, in an unnamed temp file rewound to its start
    (the caller closes it). An upload whose stored file is gone is named so in the manifest."""
    out = tempfile.TemporaryFile(dir=private_dir(blobs.tmp_dir))
    manifest = io.StringIO()
    writer = csv.writer(manifest, lineterminator="\n")
    writer.writerow(MANIFEST_COLUMNS)
    # Uploads are zips already: stored, not compressed again
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for p in picks:
            sub, member, rule = p.submission, "", p.rule
            if sub is not None and blobs.exists(sub.sha256):
                member = _member_name(p)
                with blobs.path(sub.sha256).open("rb") as source, archive.open(member, "w", force_zip64=True) as dest:
                    shutil.copyfileobj(source, dest, CHUNK)
            elif sub is not None:
                rule += "; its stored file is missing"
            writer.writerow([p.row.username, _text_cell(p.row.full_name or ""), sub.id if sub else "", p.run_id or "",
                             sub.uploaded_at.replace(tzinfo=UTC).isoformat() if sub else "", sub.sha256 if sub else "",
                             rule, member])
        archive.writestr(MANIFEST, manifest.getvalue())
    out.seek(0)
    return out


def chunks(archive: IO[bytes]) -> Iterator[bytes]:
    """The archive's bytes, a chunk at a time; closes it at the end (or when the reader stops)."""
    try:
        while chunk := archive.read(CHUNK):
            yield chunk
    finally:
        archive.close()
