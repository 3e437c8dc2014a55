"""The service's metrics in Prometheus' text format (GET /api/v1/metrics): runs by state, what
waits and for how long, runs whose worker stopped beating, how long recent runs took and how
they ended, per assignment (`health`, which the grading controls page shows too); the broker's
queue lengths and whether it answers. Every figure is read from the database (and the broker)
at scrape time, so any number of web processes report the same thing, and a restart loses
nothing. A fixed number of statements whatever the number of runs (the recent runs'
durations: one row per run finished in the window)."""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from grader.models import ACTIVE_STATES, FINAL_STATES, REDUCED_ISOLATION, Assignment, Run, RunState, Submission

RECENT = timedelta(hours=1)
QUANTILES = (0.5, 0.9)
Labels = tuple[tuple[str, str], ...]


@dataclass
class Metric:
    name: str
    kind: str  # gauge | summary
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)  # (suffix, labels, value)

    def add(self, value: float, suffix: str = "", **labels: str) -> None:
        self.samples.append((suffix, tuple(labels.items()), value))


@dataclass(frozen=True)
class Health:
    """One assignment's runs now and over the last hour (RECENT): the metrics' figures, and the
    grading controls page's."""

    by_state: dict[RunState, int]
    unsent: int  # queued, not sent: held by fair share or a pause, or waiting for the broker
    oldest_queued_s: float | None  # None: nothing queued
    stale: int  # active, with a heartbeat older than the reconciler's timeout
    ended: dict[RunState, int]  # final state -> runs that reached it in the last hour
    seconds: list[float]  # upload (or re-grade request) to final state of those runs, sorted
    # worker host -> what its sandbox lacked, where those runs were graded with reduced isolation
    reduced_isolation: dict[str, list[str]] = field(default_factory=dict)

    def quantile(self, q: float) -> float:
        return _quantile(self.seconds, q)


def health(session: Session, assignment_ids: list[int], now: datetime, stale_after: timedelta) -> dict[int, Health]:
    """assignment id -> its Health at `now`; an active run whose heartbeat is older than
    `stale_after` is stale. Five statements whatever the number of assignments."""
    ids = list(assignment_ids)
    counts = {(a, s): n for a, s, n in session.execute(
        select(Submission.assignment_id, Run.state, func.count(Run.id)).join(Submission)
        .where(Submission.assignment_id.in_(ids)).group_by(Submission.assignment_id, Run.state))}
    unsent = _per_assignment(session, ids, func.count(Run.id), Run.state == RunState.queued, Run.enqueued_at.is_(None))
    first = _per_assignment(session, ids, func.min(Run.created_at), Run.state == RunState.queued)
    silent = _per_assignment(session, ids, func.count(Run.id), Run.state.in_(ACTIVE_STATES),
                             or_(Run.heartbeat_at.is_(None), Run.heartbeat_at < now - stale_after))
    recent = session.execute(
        select(Submission.assignment_id, Run.state, Run.created_at, Run.finished_at, Run.worker_host, Run.toolchain)
        .join(Submission).where(and_(Submission.assignment_id.in_(ids), Run.finished_at >= now - RECENT))).all()
    ended: dict[int, list[tuple[RunState, float]]] = defaultdict(list)
    reduced: dict[int, dict[str, list[str]]] = defaultdict(dict)
    for aid, state, made, done, host, toolchain in recent:
        if done is not None:  # always, by the window's condition
            ended[aid].append((state, (done - made).total_seconds()))
        if (toolchain or {}).get(REDUCED_ISOLATION):
            reduced[aid][host or "an unnamed host"] = toolchain[REDUCED_ISOLATION]
    found: dict[int, Health] = {}
    for aid in ids:
        mine = ended[aid]
        found[aid] = Health(
            by_state={state: counts.get((aid, state), 0) for state in RunState},
            unsent=unsent.get(aid, 0),
            oldest_queued_s=max(0.0, (now - first[aid]).total_seconds()) if aid in first else None,
            stale=silent.get(aid, 0),
            ended={state: sum(1 for s, _ in mine if s is state) for state in RunState if state in FINAL_STATES},
            seconds=sorted(seconds for _, seconds in mine), reduced_isolation=reduced[aid])
    return found


def _per_assignment(session: Session, ids: list[int], figure: Any, *where: ColumnElement[bool]) -> dict[int, Any]:
    """assignment id -> `figure` (an aggregate) over its runs that meet `where`."""
    return dict(session.execute(
        select(Submission.assignment_id, figure).join(Submission)
        .where(Submission.assignment_id.in_(ids), *where).group_by(Submission.assignment_id)).all())


def run_metrics(session: Session, assignment_ids: list[int], now: datetime, stale_after: timedelta) -> list[Metric]:
    """The run figures (Health) of the assignments `assignment_ids`, those the caller teaches."""
    slugs = dict(session.execute(select(Assignment.id, Assignment.slug).where(Assignment.id.in_(assignment_ids))
                                 .order_by(Assignment.slug)).all())
    paused = set(session.scalars(select(Assignment.id).where(Assignment.id.in_(slugs), Assignment.grading_paused)))
    metrics = {name: Metric(name, kind, text) for name, kind, text in (
        ("kg_runs", "gauge", "Runs in each state now (queued, building, running, checked: verdicts in, waiting for the GPU's "
                              "timing, timing; and every final state)."),
        ("kg_runs_unsent", "gauge", "Queued runs not yet sent to the broker: held by fair share (one run per "
                                    "student in flight) or a paused assignment, or waiting for the broker to come back."),
        ("kg_oldest_queued_seconds", "gauge", "Age of the oldest queued run (0: none queued)."),
        ("kg_runs_stale_heartbeat", "gauge",
         "Active runs whose worker stopped beating (dead or cut off); the reconciler queues them again."),
        ("kg_assignment_paused", "gauge", "1 while staff have paused the assignment's grading."),
        ("kg_runs_finished_last_hour", "gauge", "Runs that ended in the last hour, by final state."),
        ("kg_run_seconds_last_hour", "summary",
         "Upload (or re-grade request) to final state of the runs that ended in the last hour."),
    )}
    for aid, figures in health(session, list(slugs), now, stale_after).items():
        slug = slugs[aid]
        for state, n in figures.by_state.items():
            metrics["kg_runs"].add(n, assignment=slug, state=state.value)
        metrics["kg_runs_unsent"].add(figures.unsent, assignment=slug)
        metrics["kg_oldest_queued_seconds"].add(figures.oldest_queued_s or 0.0, assignment=slug)
        metrics["kg_runs_stale_heartbeat"].add(figures.stale, assignment=slug)
        metrics["kg_assignment_paused"].add(1 if aid in paused else 0, assignment=slug)
        for state, n in figures.ended.items():
            metrics["kg_runs_finished_last_hour"].add(n, assignment=slug, state=state.value)
        took = metrics["kg_run_seconds_last_hour"]
        for q in QUANTILES:
            took.add(figures.quantile(q), assignment=slug, quantile=f"{q:g}")
        took.add(sum(figures.seconds), "_sum", assignment=slug)
        took.add(len(figures.seconds), "_count", assignment=slug)
    return list(metrics.values())


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile of sorted `values` (inclusive method); NaN for none, as Prometheus expects."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def broker_metrics(queue_lengths: dict[str, int] | None) -> list[Metric]:
    """Whether the broker answers, and its queue lengths when it does. (The database answers
    whenever metrics are served: the caller's token is read from it.)"""
    up = Metric("kg_broker_up", "gauge", "1 when the broker answers and tells its queue lengths.")
    up.add(1 if queue_lengths is not None else 0)
    queued = Metric("kg_broker_queue_length", "gauge", "Tasks waiting in each broker queue, not yet taken by a worker.")
    for queue, length in sorted((queue_lengths or {}).items()):
        queued.add(length, queue=queue)
    return [up, queued]


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(metrics: list[Metric]) -> str:
    """The metrics in Prometheus' text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for metric in metrics:
        lines += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {metric.kind}"]
        for suffix, labels, value in metric.samples:
            inside = ",".join(f'{key}="{_label_value(val)}"' for key, val in labels)
            lines.append(f"{metric.name}{suffix}{{{inside}}} {_number(value)}" if inside
                         else f"{metric.name}{suffix} {_number(value)}")
    return "\n".join(lines) + "\n"
