"""A roster import run by a Celery worker in the background, and its first passwords downloaded
once.

Staff post a roster on the roster page: a `RosterJob` row in `queued` holding the CSV, and a
message to the worker. The worker claims it (`queued` -> `running`), imports the students
(grader.course.roster), committing what it did with the lines done every PROGRESS_EVERY_S (a worker
that dies leaves the students imported so far; the same file again is safe), and ends `done`
with the result, or `failed` with the reason. The roster text is cleared when the job ends.

Queue: the similarity queue (`KG_SIMILARITY_QUEUE`), the service's queue for CPU work. An
import is CPU-bound on hashing passwords (Argon2id, about 0.2 s each: a minute for 300 new
students), so it must neither hold a GPU worker of the run queue nor wait there behind runs.
`grader dev` runs it like a similarity job: its one worker consumes that queue too.

First passwords are never stored, in clear or otherwise. The page makes a random key per job;
only its SHA-256 is kept on the row. The key goes to the worker in the job's message (masked in
the message's argument summary, gone once the message is consumed), which derives each new
account's password from it (grader.course.roster.derived_password) and hashes it; and to the
requester's browser in an HttpOnly cookie limited to /roster. The download recomputes the
passwords from the cookie's key, marks the job's passwords taken (once: a second download is
refused) and deletes the cookie. A database dump or backup thus holds no password and no key;
staff who lose the cookie (another browser, cleared cookies) cannot download, and re-issue the
first logins as links instead (on the course's members page). A job still queued or running past
the task's hard time limit counts as failed when staff look again (its worker is gone, or no
worker consumes the queue).
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import Celery, shared_task
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.course.roster import RosterReport, derived_password, import_roster
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Course, RosterJob, User, utcnow
from grader.settings import Argon2Settings, Settings, get_settings

TASK_ROSTER = "kernelgrade.roster_import"
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATE_WORDS = {QUEUED: "waiting for a worker", RUNNING: "importing", DONE: "done", FAILED: "failed"}
PROGRESS_EVERY_S = 0.5  # how often the students imported so far are committed with the progress
KEY_COOKIE = "kg_roster_key_{}"  # per job id: a second import does not lose the first one's key
KEY_PATH = "/roster"
KEY_MAX_AGE_S = 7 * 24 * 3600


class RosterJobError(Exception):
    """Why a job cannot be started or its passwords downloaded, in a sentence for staff."""


@dataclass(frozen=True)
class JobView:
    """What the roster page and its status endpoint show of a job."""

    id: int
    state: str
    lines_done: int
    lines_total: int
    error: str | None
    result: dict[str, Any] | None  # summary, created, updated, errors ([line, message]): see job_result
    passwords_taken_at: datetime | None

    @property
    def final(self) -> bool:
        return self.state in (DONE, FAILED)

    @property
    def label(self) -> str:
        return STATE_WORDS.get(self.state, self.state)

    @property
    def passwords_waiting(self) -> bool:
        return bool(self.result and self.result["created"]) and self.passwords_taken_at is None

    def as_json(self) -> dict[str, object]:
        return {"id": self.id, "state": self.state, "label": self.label, "final": self.final,
                "lines_done": self.lines_done, "lines_total": self.lines_total, "error": self.error}


def view(job: RosterJob) -> JobView:
    return JobView(job.id, job.state, job.lines_done, job.lines_total, job.error, job.result, job.passwords_taken_at)


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def latest_job(session: Session, user: User, settings: Settings) -> RosterJob | None:
    """The user's newest import; one queued or running past the task's hard time limit is failed here."""
    job = session.scalar(select(RosterJob).where(RosterJob.requested_by == user.id)
                         .order_by(RosterJob.id.desc()).limit(1))
    if job is None or job.state not in (QUEUED, RUNNING):
        return job
    since = job.started_at if job.state == RUNNING else job.created_at
    if since is not None and utcnow() - since > timedelta(seconds=settings.task_time_limit_s):
        job.error = (f"The worker stopped: no result {settings.task_time_limit_s} s after it started; "
                     "the students imported until then are kept, so import the same file again."
                     if job.state == RUNNING else
                     f"No worker took it in {settings.task_time_limit_s} s: start one that consumes the queue "
                     f"{settings.similarity_queue} (grader worker --similarity), then import the file again.")
        job.state, job.finished_at, job.roster = FAILED, utcnow(), None
    return job


def start_job(session: Session, celery_app: Celery, settings: Settings, course: Course, user: User,
              text: str, held_keys: set[int]) -> tuple[RosterJob, str]:
    """A new job for `text` sent to the worker, and its key (for the requester's cookie).
    Refused while the user's last import is under way, or while its passwords wait for a
    download from this browser (`held_keys`: the jobs whose key the browser holds). Committed
    before it is sent, so the worker finds the row; a broker that refuses the message fails the
    job with the reason."""
    current = latest_job(session, user, settings)
    if current is not None and not view(current).final:
        raise RosterJobError(f"Import {current.id} is still {current.state}; wait for it to end before "
                             "importing another file.")
    if current is not None and view(current).passwords_waiting and current.id in held_keys:
        raise RosterJobError(f"Download the first passwords of import {current.id} first: they can be "
                             "downloaded once, and only until you start another import.")
    key = secrets.token_hex(32)
    job = RosterJob(course_id=course.id, requested_by=user.id, state=QUEUED, roster=text,
                    key_digest=digest_of(key))
    session.add(job)
    session.commit()
    try:
        celery_app.send_task(TASK_ROSTER, args=[job.id, key], queue=settings.similarity_queue,
                             argsrepr=f"({job.id}, <key>)")
    except Exception as exc:  # the broker is down or refuses: the job must not stay queued forever
        job.state, job.finished_at, job.roster = FAILED, utcnow(), None
        job.error = f"Could not queue the import: {exc}."
        session.commit()
    return job, key


def take_passwords(session: Session, job: RosterJob, key: str | None) -> str:
    """The job's new accounts' first passwords as a login,password CSV, once: the job is marked
    taken (in one UPDATE, so two downloads at once cannot both win). A failed job gives those of
    the accounts it created before it stopped. RosterJobError says why not."""
    result = job.result or {}
    if job.state in (QUEUED, RUNNING):
        raise RosterJobError(f"Import {job.id} is {job.state}: wait for it to end, then download its passwords.")
    if not result.get("created"):
        raise RosterJobError(f"Import {job.id} created no account, so it has no first passwords.")
    if job.passwords_taken_at is not None:
        raise RosterJobError(f"The first passwords of import {job.id} were already downloaded and are not kept. "
                             "Re-issue first logins as links on the course's members page instead.")
    if key is None or not hmac.compare_digest(digest_of(key), job.key_digest):
        raise RosterJobError(f"This browser does not hold the key of import {job.id}: only the browser that "
                             "started it can download its passwords. Re-issue first logins as links on the "
                             "course's members page instead.")
    taken = session.execute(update(RosterJob).where(RosterJob.id == job.id, RosterJob.passwords_taken_at.is_(None))
                            .values(passwords_taken_at=utcnow())).rowcount  # type: ignore[attr-defined]
    session.commit()
    session.refresh(job)
    if not taken:
        raise RosterJobError(f"The first passwords of import {job.id} were just downloaded, and are not kept.")
    secret = bytes.fromhex(key)
    return RosterReport(created=[(login, derived_password(secret, login)) for login in result["created"]]
                        ).passwords_csv()


def job_result(report: RosterReport) -> dict[str, Any]:
    """A report as the job keeps it: logins and messages, no password."""
    errors = sorted(report.errors, key=lambda e: e.line)
    return {"summary": report.summary(), "created": [login for login, _ in report.created],
            "updated": report.updated, "errors": [[e.line, e.message] for e in errors]}


def run_job(sessions: sessionmaker[Session], cost: Argon2Settings, job_id: int, key: str) -> str:
    """Claims and runs job `job_id`, hashing first passwords at `cost`; its final state (or why it was not run)."""
    with session_scope(sessions) as session:
        claimed = session.execute(update(RosterJob).where(RosterJob.id == job_id, RosterJob.state == QUEUED)
                                  .values(state=RUNNING, started_at=utcnow())).rowcount  # type: ignore[attr-defined]
    with session_scope(sessions) as session:
        job = session.get(RosterJob, job_id)
        if not claimed or job is None:
            return f"not run: import {job_id} is {job.state if job else 'gone'}"
        try:
            if not hmac.compare_digest(digest_of(key), job.key_digest):
                raise ValueError("the message's key is not the job's")
            course = session.get(Course, job.course_id)
            if course is None:
                raise LookupError("its course is gone")
            secret, last = bytes.fromhex(key), float("-inf")

            def progress(done: int, total: int, report: RosterReport) -> None:
                nonlocal last
                if done == total or time.monotonic() - last >= PROGRESS_EVERY_S:
                    last = time.monotonic()
                    job.lines_done, job.lines_total, job.result = done, total, job_result(report)
                    session.commit()  # the students so far, with the progress that counts them

            requester = session.get(User, job.requested_by)
            report = import_roster(session, job.roster or "", course, cost,
                                   password=lambda login: derived_password(secret, login), progress=progress,
                                   staff_set_up=requester is None or not requester.site_admin)
            job.lines_done, job.result = job.lines_total, job_result(report)
            job.state, job.finished_at, job.roster = DONE, utcnow(), None
            session.commit()
        except Exception as exc:  # any failure ends the job with its reason; what was committed stays
            session.rollback()
            job.state, job.finished_at, job.roster = FAILED, utcnow(), None
            job.error = (f"The import stopped ({type(exc).__name__}: {exc}); the students imported until "
                         "then are kept, so import the same file again once it is fixed.")
        return job.state


@functools.cache
def _sessions() -> sessionmaker[Session]:
    """One connection pool per worker process, made after the fork."""
    return make_session_factory(make_engine(get_settings()))


@shared_task(name=TASK_ROSTER)
def roster_import_task(job_id: int, key: str) -> str:
    return run_job(_sessions(), get_settings().argon2, job_id, key)  # what Celery logs: the state, never the key
