"""Accepting work into the grading queue: one use case for an upload through any door (the
REST API, the form with an API token, the form of a logged-in user), and the admission of
a run whose rows are committed, with what the student is told.

`accept_upload` runs inside `receive_upload`'s `async with` (the blob is stored; a refusal
raised here removes it again): the same checks for every door, in this order: the file is
a zip (its magic bytes), the assignment exists, the upload repeats an earlier one (answered
with that one, not checked again), else the course's admission (schedule, quota, the student's storage); then the
rows are committed and the run is sent. A door only turns its input and its caller into the
arguments, and the `AcceptedUpload` or the `UploadError` into its answer."""
from __future__ import annotations

import logging
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from grader.context import AppContext
from grader.course.policies import admission, storage_refusal
from grader.db import session_scope
from grader.models import Run, RunState, Submission, User, utcnow
from grader.runs.fairshare import Admission, admit
from grader.service import (
    CommitUncertain,
    IdempotencyConflict,
    NotFound,
    commit_upload,
    get_assignment,
    record_upload,
)
from grader.storage.uploads import ReceivedUpload, UploadError, earlier_upload_message, maybe_stored_message
from worker.assignment import AssignmentError, assignment_of
from worker.rubric import RubricError, load_rubric
from worker.unpack import CUT_SHORT, HEAD_BYTES, damaged, looks_like_zip, not_a_zip

log = logging.getLogger(__name__)

QUEUED_MESSAGE = "Upload stored; grading is queued."
BROKER_DOWN_MESSAGE = (
    "Upload stored, but the grading queue is unreachable right now; "
    "the run stays queued and will be picked up automatically when the queue is back."
)
WAITING_MESSAGE = ("Upload stored; it is graded as soon as your earlier run finishes "
                   "(one run per student at a time, so everyone gets a fair share of the GPUs).")
PAUSED_MESSAGE = ("Upload stored; the course staff have paused grading of this assignment, "
                  "and your run is graded when they resume it.")
ADMISSION_MESSAGES = {Admission.sent: QUEUED_MESSAGE, Admission.waiting: WAITING_MESSAGE,
                      Admission.paused: PAUSED_MESSAGE, Admission.unreachable: BROKER_DOWN_MESSAGE}
# The rows are committed but the database failed while the run was being sent: it is stored,
# and the reconciler sends it (never "nothing was recorded", which made students upload twice).
NOT_YET_SENT_MESSAGE = ("Upload stored; grading will start shortly: the grading database failed while "
                        "the run was being queued, and it is sent automatically. Do not upload it again.")


def admit_committed(ctx: AppContext, run_id: int) -> Admission | None:
    """`admit` for a run whose rows are committed; None when the database failed meanwhile
    (the run is stored and queued; the reconciler sends it)."""
    try:
        return admit(ctx.celery, ctx.sessions, run_id, ctx.settings.task_queue)
    except SQLAlchemyError:
        log.warning("run %s is stored but the database failed while sending it; the reconciler sends it",
                    run_id, exc_info=True)
        return None


def in_queue(admitted: Admission | None) -> bool:
    """The run is in the broker's hands or held by the fair share (not: the broker was
    unreachable, or the database failed while sending it)."""
    return admitted is not None and admitted is not Admission.unreachable


def admission_message(admitted: Admission | None) -> str:
    return NOT_YET_SENT_MESSAGE if admitted is None else ADMISSION_MESSAGES[admitted]


@dataclass(frozen=True)
class AcceptedUpload:
    """An accepted upload: a new submission and its run, or the earlier one it repeats."""

    submission: Submission
    run: Run
    earlier: bool  # the same upload was stored before: nothing new was created
    sent_before: bool  # a repeat whose run was sent earlier: it was not sent again
    admitted: Admission | None  # admit's answer; None: sent before, or the database failed meanwhile

    @property
    def queued(self) -> bool:
        return self.sent_before or in_queue(self.admitted)

    @property
    def message(self) -> str:
        if self.sent_before:
            return earlier_upload_message(self.submission.id, self.run.id)
        sent = admission_message(self.admitted)
        return f"{earlier_upload_message(self.submission.id, self.run.id)} {sent}" if self.earlier else sent


def accept_upload(ctx: AppContext, user_id: int, upload: ReceivedUpload, key: str | None = None, *,
                  keyed: bool = False) -> AcceptedUpload:
    """Check, record and send the stored `upload` of the user `user_id` (blocking: call it off
    the event loop). `key`: the client's Idempotency-Key; `keyed`: the door takes one (the
    API; a browser form cannot), so the answer to a failed commit offers it.
    Raises UploadError for a refusal, with the API's error code and Retry-After where one
    applies; a database failure before the commit propagates (nothing was recorded)."""
    slug = upload.fields.get("assignment", ctx.default_assignment)
    _refuse_non_zip(ctx, upload, slug)
    window_s = ctx.settings.upload_dedup_window_s
    with session_scope(ctx.sessions) as session:
        try:
            assignment = get_assignment(session, slug)
        except NotFound as exc:
            raise UploadError(404, str(exc)) from exc
        user = session.get(User, user_id)
        assert user is not None, "the door authenticated an existing user"

        def check_admission() -> None:  # a refused upload records nothing; receive_upload removes the blob
            refusal = admission(session, ctx.settings, user, assignment, utcnow()) or storage_refusal(
                session, ctx.settings, user, assignment, upload.blob.sha256, upload.blob.size)
            if refusal is not None:
                raise UploadError(refusal.status_code, refusal.message, refusal.code, refusal.retry_after_s)

        try:
            recorded = record_upload(session, user, assignment, upload.filename, upload.blob, key, window_s,
                                     check_admission)
        except IdempotencyConflict as exc:
            raise UploadError(422, str(exc), "idempotency_key_reused") from exc
        try:
            commit_upload(session)  # durable before the run is sent and before the client hears of it
        except CommitUncertain as exc:
            raise UploadError(503, maybe_stored_message(window_s, keyed),
                              "outcome_unknown", 10) from exc
    # From here on the upload is stored (its rows stay loaded: expire_on_commit=False): no
    # answer may say otherwise.
    run = recorded.run
    sent_before = recorded.earlier and not (run.state is RunState.queued and run.enqueued_at is None)
    admitted = None if sent_before else admit_committed(ctx, run.id)
    return AcceptedUpload(recorded.submission, run, recorded.earlier, sent_before, admitted)


def _refuse_non_zip(ctx: AppContext, upload: ReceivedUpload, slug: str) -> None:
    """A file that is not a zip (415 `not_a_zip`), a zip whose list of files cannot be read (422
    `damaged_zip`: cut short, by an interrupted upload or copy) or a zip that holds no file (422
    `empty_zip`: folders at most) is refused before anything is recorded. A zip whose names
    cannot be decoded is left to the unpack step, which says what is wrong with it."""
    path = ctx.blobs.path(upload.blob.sha256)
    with path.open("rb") as fh:
        head = fh.read(HEAD_BYTES)
    if not looks_like_zip(head):
        raise UploadError(415, f"“{upload.filename}” {not_a_zip(head)}. {_zip_hint(slug, ctx.settings.rubric_dirs)}", "not_a_zip")
    try:
        with zipfile.ZipFile(path) as archive:
            empty = all(entry.is_dir() for entry in archive.infolist())
    except UnicodeDecodeError:
        return
    except (zipfile.BadZipFile, ValueError, EOFError):
        raise UploadError(422, f"“{upload.filename}”: {damaged(CUT_SHORT)}.", "damaged_zip") from None
    if empty:
        raise UploadError(422, f"“{upload.filename}” is an empty zip: it holds no files, so nothing was stored. "
                          f"{_zip_hint(slug, ctx.settings.rubric_dirs)}", "empty_zip")


def _zip_hint(slug: str, search: Sequence[Path]) -> str:
    """How to make the zip, with the folder name of the assignment's starter where it has one
    (its rubric found along `search`, the settings' rubric_dirs, after rubrics/)."""
    try:
        folder = assignment_of(load_rubric(slug, search=search)).zip_folder
    except (RubricError, AssignmentError):
        return "Zip your assignment folder and upload the .zip file."
    return f"Zip your assignment folder (for example: zip -r {folder}.zip {folder}) and upload the .zip file."
