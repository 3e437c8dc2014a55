"""What the API tells a client whose upload or re-grade is committed: the run is admitted to
the queue (fair share, grader.accepting) and the answer says where it stands."""
from __future__ import annotations

from grader.accepting import AcceptedUpload, admission_message, admit_committed, in_queue
from grader.api.schemas import Accepted, SubmissionCreated
from grader.context import AppContext
from grader.models import Run, Submission


def run_url(run_id: int) -> str:
    return f"/api/v1/runs/{run_id}"


def acceptance(ctx: AppContext, submission: Submission, run: Run) -> Accepted:
    admitted = admit_committed(ctx, run.id)
    return Accepted(submission_id=submission.id, run_id=run.id,
                    queued=in_queue(admitted),
                    message=admission_message(admitted), run_url=run_url(run.id))


def upload_acceptance(accepted: AcceptedUpload) -> SubmissionCreated:
    """The body of the answer to an accepted upload (201, or 200 for a repeat)."""
    submission, run = accepted.submission, accepted.run
    return SubmissionCreated(submission_id=submission.id, run_id=run.id, queued=accepted.queued,
                             message=accepted.message, run_url=run_url(run.id), sha256=submission.sha256,
                             size_bytes=submission.size_bytes, earlier_upload=accepted.earlier)
