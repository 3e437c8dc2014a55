"""What an upload or re-grade is told once its rows are committed: the run is admitted to the
queue (fair share) and the answer says where it stands. Shared by the API and the web forms."""
from __future__ import annotations

import logging

from sqlalchemy.exc import SQLAlchemyError

from grader.api.schemas import Accepted
from grader.context import AppContext
from grader.models import Run, RunState, Submission
from grader.runs.fairshare import Admission, admit
from grader.service import Recorded
from grader.uploads import earlier_upload_message

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


def admission_message(admitted: Admission | None) -> str:
    return NOT_YET_SENT_MESSAGE if admitted is None else ADMISSION_MESSAGES[admitted]


def run_url(run_id: int) -> str:
    return f"/api/v1/runs/{run_id}"


def acceptance(ctx: AppContext, submission: Submission, run: Run) -> Accepted:
    admitted = admit_committed(ctx, run.id)
    return Accepted(submission_id=submission.id, run_id=run.id,
                    queued=admitted is not None and admitted is not Admission.unreachable,
                    message=admission_message(admitted), run_url=run_url(run.id))


def earlier_acceptance(ctx: AppContext, recorded: Recorded) -> Accepted:
    """The answer to a repeat: the earlier submission and its run, sent now if it never was
    (the earlier request may have failed before sending it)."""
    submission, run = recorded.submission, recorded.run
    unsent = run.state is RunState.queued and run.enqueued_at is None
    body = acceptance(ctx, submission, run) if unsent else Accepted(
        submission_id=submission.id, run_id=run.id, queued=True, message="", run_url=run_url(run.id))
    message = f"{earlier_upload_message(submission.id, run.id)} {body.message}".strip()
    return body.model_copy(update={"message": message})
