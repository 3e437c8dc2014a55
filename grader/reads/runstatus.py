"""What the live run page says about a run: queue position and ETA, the stage or problem the
worker is on, and the final state. Shared by the server-rendered page and its JSON poll."""
from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from grader.capacity.model import queue_eta, service_estimate, split_queue_eta
from grader.models import ACTIVE_STATES, FINAL_STATES, Run, RunState, Submission, utcnow
from grader.reads.gpu_info import gpu_notes
from grader.reads.gpu_phases import plugin_of
from grader.reads.grade_times import grade_seconds, grade_splits, graded_in_pieces, with_timing
from worker.rubric import RubricError, load_rubric

STAGE_WORDS = {
    "unpack": "unpacking your zip",
    "stage": "laying your files over the starter",
    "build": "compiling the kernels with nvcc",
    "run": "building the reference kit before the first problem",
}


CHECKED_TEXT = ("Correctness checked: your verdicts and correctness points are below. Speed is measured when "
                "the GPU is free (after every upload waiting for its checks); the score comes then.")
TIMING_TEXT = "Timing: your kernels' speed is being measured, the GPU held for this run alone."


class Waiting(str, enum.Enum):
    """Why a queued run is not in the broker's queue (only a run that is has a position)."""
    sent = "sent"  # in the broker: position and ETA apply
    paused = "paused"  # its assignment's grading is paused
    behind_own = "behind_own"  # fair share: behind the student's run in flight
    resend = "resend"  # its message was lost or could not be sent: the reconciler sends it


RESEND_TEXT = ("Waiting to be re-sent to the grading queue (its place in the queue was lost or the queue "
               "was unreachable); it is sent again automatically, so no estimate until it is back in the queue.")
BEHIND_OWN_TEXT = ("Waiting behind your earlier run: one run per student is in the queue at a time, and this one "
                   "joins it when that one ends; no estimate until then.")


def waiting_reason(session: Session, run: Run) -> Waiting:
    """Where a queued run stands: sent (enqueued_at set), or why it has not been (re-)sent."""
    if run.enqueued_at is not None:
        return Waiting.sent
    if run.submission.assignment.grading_paused:
        return Waiting.paused
    other, theirs = aliased(Run), aliased(Submission)
    in_flight = exists().where(
        other.submission_id == theirs.id, theirs.user_id == run.submission.user_id, other.id != run.id,
        or_(other.state.in_(ACTIVE_STATES), and_(other.state == RunState.queued, other.enqueued_at.is_not(None))))
    return Waiting.behind_own if session.scalar(select(in_flight)) else Waiting.resend


@dataclass(frozen=True)
class QueueEstimate:
    position: int  # 1: next to be taken
    eta_s: float | None  # until the run is final; None without finished runs to learn from
    verdict_eta_s: float | None = None  # with the two pieces: until its correctness verdicts


def busy_remaining(session: Session, service_s: float) -> list[float]:
    """For each run in progress, the seconds left of a `service_s` grade after its time so far."""
    now = utcnow()
    started = session.scalars(select(Run.started_at).where(Run.state.in_(ACTIVE_STATES)))
    return [max(0.0, service_s - ((now - at).total_seconds() if at else 0.0)) for at in started]


def split_estimate(session: Session, run: Run, position: int, sample: int, slots: int,
                   search: Sequence[Path]) -> QueueEstimate | None:
    """The two-piece schedule's estimate (grader.capacity.split_queue_eta) for the queued run at
    `position`: the runs in their checks, the timings waiting, and each piece's median seconds
    among the assignment's `sample` recent grades; None without any, or when the newest was a
    whole grade (the workers do not split)."""
    splits = grade_splits(session, sample, run.submission.assignment_id,
                          plugin=plugin_of(run.submission.assignment.slug, search))
    if not splits or not graded_in_pieces(session, sample, run.submission.assignment_id):
        return None
    timings = with_timing(splits)
    checks_s = statistics.median(s.held - timing for s, timing in zip(splits, timings))
    timing_s, shared_s = statistics.median(timings), statistics.median(s.timing_shared for s in splits)
    now = utcnow()
    started = session.scalars(select(Run.started_at).where(Run.state.in_((RunState.building, RunState.running))))
    checking = [max(0.0, checks_s - ((now - at).total_seconds() if at else 0.0)) for at in started]
    waiting = session.scalar(select(func.count(Run.id)).where(Run.state.in_((RunState.checked, RunState.timing)))) or 0
    verdict_s, final_s = split_queue_eta(position, checking, int(waiting), checks_s, timing_s, slots, shared_s)
    return QueueEstimate(position, final_s, verdict_s)


def queue_estimate(session: Session, run: Run, sample: int, search: Sequence[Path],
                   slots: int | None = None) -> QueueEstimate | None:
    """Position and ETA of a run in the broker's queue; None for any other run (a run not sent
    has no place in the queue to promise). The ETA is the capacity model's (grader/capacity/model.py)
    for the queue as it is now: the workers busy now (one when none is), each free when its run's
    grade would end, and every grade the median of the assignment's `sample` recent ones.

    With `slots` (the workers grade in two pieces, issue 55: that many checks share the GPU) the
    estimate is two, the verdicts' and the score's (`split_estimate`); a checked run's page gives
    its place among the timings instead (`timing_position`)."""
    if run.state != RunState.queued or run.enqueued_at is None:
        return None
    ahead = session.scalar(select(func.count(Run.id)).where(Run.state == RunState.queued, Run.id < run.id)) or 0
    position = int(ahead) + 1
    split = split_estimate(session, run, position, sample, slots, search) if slots is not None else None
    if split is not None:  # the two pieces: verdicts and the score, two waits
        return split
    recent = grade_seconds(session, sample, run.submission.assignment_id)
    if not recent:
        return QueueEstimate(position, None)
    service = service_estimate(recent)
    return QueueEstimate(position, queue_eta(position, busy_remaining(session, service), service))


def _problem_title(slug: str, problem_id: str, search: Sequence[Path]) -> str | None:
    try:
        return next((p.title for p in load_rubric(slug, search=search).problems if p.id == problem_id), None)
    except RubricError:
        return None


def checked_lines(run: Run, search: Sequence[Path] = ()) -> list[str]:
    """While a run is graded: one line per problem whose correctness verdict is already known
    (grader.runs.progress), e.g. "1.1 Softmax forward: correct, 14 of 14 correctness points;
    speed being measured"; [] otherwise."""
    if run.state in FINAL_STATES:
        return []
    lines = []
    for v in (run.progress or {}).get("checked") or []:
        pid = str(v.get("problem"))
        title = _problem_title(run.submission.assignment.slug, pid, search)
        verdict = "correct" if v.get("correct") else "a correctness case failed"
        lines.append(f"{pid}{' ' + title if title else ''}: {verdict}, {v.get('correctness_points'):g} of "
                     f"{v.get('correctness_max'):g} correctness points; speed {v.get('speed')}")
    return lines


def _problem_label(run: Run, progress: dict[str, Any], search: Sequence[Path]) -> str:
    """The problem a progress note names, with its title from the rubric: "2.1 LayerNorm forward"."""
    title = _problem_title(run.submission.assignment.slug, str(progress["problem"]), search)
    return f"{progress['problem']}" + (f" {title}" if title else "")


def describe_duration(seconds: float) -> str:
    if seconds < 90:
        return "under 2 minutes" if seconds >= 45 else "under a minute"
    minutes = round(seconds / 60)
    return f"about {minutes} minutes" if minutes < 90 else f"about {seconds / 3600:.1f} hours"


def timing_position(session: Session, run: Run) -> int | None:
    """A `checked` run's place among the timings sent and waiting (timings go in the order their
    checks ended, behind every check: grader.celery_app); None for any other run or one not sent."""
    if run.state != RunState.checked or run.enqueued_at is None:
        return None
    ahead = session.scalar(select(func.count(Run.id)).where(
        Run.state == RunState.checked, Run.enqueued_at.is_not(None), Run.enqueued_at < run.enqueued_at)) or 0
    return int(ahead) + 1


def progress_text(run: Run, queue: QueueEstimate | None, waiting: Waiting = Waiting.sent,
                  search: Sequence[Path] = (), timing_position: int | None = None) -> str:
    """One sentence for the page: where the run is now ("" once it is final); the problem's title
    from the rubric found along `search` (the settings' rubric_dirs) after rubrics/."""
    if run.state in FINAL_STATES:
        return ""
    if run.state == RunState.queued:
        if waiting is Waiting.paused:
            return "Waiting: the instructor has paused grading of this assignment; it is graded when they resume."
        if waiting is Waiting.behind_own:
            return BEHIND_OWN_TEXT
        if waiting is Waiting.resend:
            return RESEND_TEXT
        if queue is None:
            return "Waiting in the queue."
        text = f"Position {queue.position} in the queue"
        if queue.eta_s is None:
            return text + "; no estimate yet (no finished runs to learn from)."
        if queue.verdict_eta_s is not None:
            return text + (f"; estimated correctness verdicts in {describe_duration(queue.verdict_eta_s)}, "
                           f"the score (speed measured) in {describe_duration(queue.eta_s)} (from recent runs).")
        return text + f"; estimated result in {describe_duration(queue.eta_s)} (from recent runs)."
    if run.state == RunState.checked:
        return CHECKED_TEXT + (f" Position {timing_position} among the timings waiting." if timing_position else "")
    progress = run.progress or {}
    if run.state == RunState.timing:
        return TIMING_TEXT + (f" Now: {_problem_label(run, progress, search)}." if progress.get("problem") else "")
    if run.state == RunState.running and progress.get("problem"):
        label = _problem_label(run, progress, search)
        if progress.get("index") and progress.get("total"):
            return f"Running problem {progress['index']} of {progress['total']}: {label}."
        return f"Running problem {label}."
    stage = STAGE_WORDS.get(str(progress.get("stage") or ""))
    word = "Building" if run.state == RunState.building else "Running"
    return f"{word}: {stage}." if stage else f"{word}."


def run_status(session: Session, run: Run, eta_sample: int, search: Sequence[Path],
               slots: int | None = None) -> dict[str, Any]:
    """The JSON the run page polls (and renders from at first); `search`: the settings' rubric_dirs;
    `slots`: the check slots per GPU when the workers grade in two pieces (None: whole grades)."""
    queue = queue_estimate(session, run, eta_sample, search, slots)
    waiting = waiting_reason(session, run) if run.state == RunState.queued else None
    active = run.state in ACTIVE_STATES or run.state == RunState.checked  # a checked run's notes hold its verdicts
    gpu = gpu_notes(session, run.submission.assignment_id, [run.id]).get(run.id)
    return {
        "id": run.id,
        "state": run.state.value,
        "final": run.state in FINAL_STATES,
        "score": run.score,
        "message": run.message,
        "error_class": run.error_class.value if run.error_class else None,
        "queue_position": queue.position if queue else None,
        "eta_s": round(queue.eta_s) if queue and queue.eta_s is not None else None,
        "verdict_eta_s": round(queue.verdict_eta_s) if queue and queue.verdict_eta_s is not None else None,
        "progress": run.progress if active else None,
        "progress_text": progress_text(run, queue, waiting or Waiting.sent, search, timing_position(session, run)),
        "checked": checked_lines(run, search),  # the two-step result: verdicts known while speed is measured
        "waiting": waiting.value if waiting else None,  # why a queued run has no position (or "sent")
        "gpu_model": gpu.model if gpu else None,  # from the run's telemetry; None: not run on a GPU
        "gpu_calibrated": gpu.calibrated if gpu else None,
    }
