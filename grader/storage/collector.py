"""The collector: removes what nothing will read again.

- Blobs no submission refers to (a refused upload whose clean-up met a database fault, say),
  once older than `upload_max_duration_s`, and temp files of uploads that never finished. Each
  blob is removed under the blob store's exclusive lock on its digest, after checking the
  database again under that lock: an upload of the same bytes holds the shared lock from
  moving its blob into place until its rows are committed, so it is either seen or it stores
  the bytes again after the removal.
- Job folders (`jobs/run-<id>-attempt-<n>`, grader/runs/lifecycle.py) of attempts that are over: the
  run is final (or gone), or the folder is not of the run's current attempt (a killed
  worker's). The current attempt of a run that is not final is kept: a worker may be in it.

`grader collect` runs it once; `grader reconcile --loop` every `collect_interval_s`.
"""
from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.models import FINAL_STATES, Run, RunState, Submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore, is_digest

log = logging.getLogger(__name__)

_JOB_FOLDER = re.compile(r"^run-(\d+)-attempt-(\d+)\Z")


@dataclass
class CollectReport:
    blobs: list[str] = field(default_factory=list)  # digests removed
    temp_files: list[str] = field(default_factory=list)  # names under the blob store's tmp/
    job_folders: list[str] = field(default_factory=list)  # folder names under jobs/

    def summary(self) -> str:
        return (f"removed {len(self.blobs)} orphan blob(s), {len(self.temp_files)} stale upload temp file(s), "
                f"{len(self.job_folders)} finished job folder(s)")


# ---- pure decisions ---------------------------------------------------------------------------


def is_old(mtime: float, now: float, max_age_s: float) -> bool:
    return now - mtime > max_age_s


def job_folder_attempt(name: str) -> tuple[int, int] | None:
    """(run id, attempt) of a job folder's name, or None for anything else."""
    match = _JOB_FOLDER.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def attempt_is_over(state: RunState | None, current_attempt: int, attempt: int) -> bool:
    """A job folder can go when its run is final or gone (None), or when it is not of the run's
    current attempt (the claim moved on to a later one; only the current attempt has a live claim)."""
    return state is None or state in FINAL_STATES or attempt != current_attempt


# ---- blobs ------------------------------------------------------------------------------------


def _old_blobs(store: BlobStore, now: float, max_age_s: float) -> list[str]:
    found = []
    for path in store.root.glob("??/??/*"):
        if path.is_file() and is_digest(path.name) and is_old(path.stat().st_mtime, now, max_age_s):
            found.append(path.name)
    return sorted(found)


def _referenced(session: Session, digests: Iterable[str]) -> set[str]:
    wanted = list(digests)
    if not wanted:
        return set()
    return set(session.scalars(select(Submission.sha256).where(Submission.sha256.in_(wanted)).distinct()))


def _remove_if_orphan(store: BlobStore, sessions: sessionmaker[Session], sha256: str, now: float,
                      max_age_s: float) -> bool:
    """Under the exclusive lock: still unreferenced and still old (not stored again since)."""
    with store.lock(sha256, exclusive=True):
        path = store.path(sha256)
        if not path.is_file() or not is_old(path.stat().st_mtime, now, max_age_s):
            return False
        with session_scope(sessions) as session:
            if _referenced(session, [sha256]):
                return False
        store.remove(sha256)
        return True


def collect_blobs(store: BlobStore, sessions: sessionmaker[Session], max_age_s: float,
                  now: float | None = None) -> list[str]:
    """Remove blobs no submission refers to that are older than `max_age_s`; their digests."""
    now = time.time() if now is None else now
    candidates = _old_blobs(store, now, max_age_s)
    with session_scope(sessions) as session:
        used = _referenced(session, candidates)
    removed = []
    for sha256 in candidates:
        if sha256 not in used and _remove_if_orphan(store, sessions, sha256, now, max_age_s):
            log.info("collector: removed orphan blob %s (no submission refers to it)", sha256)
            removed.append(sha256)
    return removed


def collect_temp_files(store: BlobStore, max_age_s: float, now: float | None = None) -> list[str]:
    """Remove upload temp files older than `max_age_s` (a web process killed mid-upload)."""
    now = time.time() if now is None else now
    removed = []
    for path in sorted(store.tmp_dir.glob("upload-*")) if store.tmp_dir.is_dir() else []:
        if path.is_file() and is_old(path.stat().st_mtime, now, max_age_s):
            path.unlink(missing_ok=True)
            log.info("collector: removed stale upload temp file %s", path.name)
            removed.append(path.name)
    return removed


# ---- job folders ------------------------------------------------------------------------------


def _job_folders(jobs_dir: Path) -> dict[Path, tuple[int, int]]:
    if not jobs_dir.is_dir():
        return {}
    return {path: parsed for path in sorted(jobs_dir.iterdir())
            if path.is_dir() and (parsed := job_folder_attempt(path.name)) is not None}


def collect_job_folders(jobs_dir: Path, sessions: sessionmaker[Session]) -> list[str]:
    """Remove the job folders of attempts that are over; their names. The folders are listed
    before the runs are read: a worker's claim (attempts + 1) commits before it makes the folder."""
    folders = _job_folders(jobs_dir)
    run_ids = sorted({run_id for run_id, _ in folders.values()})
    with session_scope(sessions) as session:
        runs = {row.id: (row.state, row.attempts)
                for row in session.execute(select(Run.id, Run.state, Run.attempts).where(Run.id.in_(run_ids)))}
    removed = []
    for path, (run_id, attempt) in folders.items():
        state, current = runs.get(run_id, (None, 0))
        if not attempt_is_over(state, current, attempt):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            log.warning("collector: could not remove job folder %s entirely", path.name)
            continue
        why = "its run is gone" if state is None else (
            f"its run is {state.value}" if state in FINAL_STATES else f"the run is on attempt {current}")
        log.info("collector: removed job folder %s (%s)", path.name, why)
        removed.append(path.name)
    return removed


def collect(settings: Settings, sessions: sessionmaker[Session], now: float | None = None) -> CollectReport:
    """One pass over the blob store and the job folders."""
    store = BlobStore(settings.blob_dir)
    max_age = settings.upload_max_duration_s
    return CollectReport(blobs=collect_blobs(store, sessions, max_age, now),
                         temp_files=collect_temp_files(store, max_age, now),
                         job_folders=collect_job_folders(settings.jobs_dir, sessions))
