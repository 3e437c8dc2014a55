"""The capacity model: how long students wait for a grade around a deadline, and how many GPU
workers keep that wait under a target.

A seeded discrete-event simulation of the grading queue as the service runs it: uploads arrive
at times drawn from the deadline's shape, each grade holds one worker (one GPU) for a time drawn
from the measured grade times, the broker hands runs out first come first served, and fair share
(grader/runs/fairshare.py) keeps at most one run per student in flight, so a student's next upload
is sent only when their previous run ends. A simulation rather than queueing formulas: the
arrivals are not steady (they pile up before the deadline), fair share couples a student's runs,
and each answer can be checked by hand on a small case (tests/unit/test_capacity.py).

Pure (numpy and the standard library): grader/reads/grade_times.py supplies the measured grade
times, `grader capacity` (grader/capacity_cli.py) prints the answer, and the run page's queue ETA
(grader/reads/runstatus.py) is `queue_eta` on the same estimate, `service_estimate`.
"""
from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HOUR = 3600.0
# The default deadline shape: over the window, the upload rate doubles every this many hours
# towards the deadline, so about half of the uploads come in its last 4 hours and a quarter in the
# 4 before. Autograder logs show uploads piling up before a deadline; the exact curve is a
# course's own, which `--shape` gives.
DOUBLING_H = 4.0


@dataclass(frozen=True)
class Shape:
    """How uploads spread over the `window_s` seconds before the deadline: the relative upload
    rates of equal slices of the window, oldest first (the last slice ends at the deadline), the
    rate constant within a slice."""

    weights: tuple[float, ...]
    window_s: float

    def __post_init__(self) -> None:
        if not self.weights or any(not math.isfinite(w) or w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError("a deadline shape needs relative rates that are numbers >= 0, not all 0, e.g. 1,1,2,4")
        if not self.window_s > 0:
            raise ValueError("the window before the deadline must be longer than 0")

    @classmethod
    def default(cls, window_s: float = 24 * HOUR) -> Shape:
        """Hour slices whose rate doubles every DOUBLING_H hours towards the deadline."""
        hours = max(1, round(window_s / HOUR))
        return cls(tuple(2 ** (h / DOUBLING_H) for h in range(hours)), window_s)

    @classmethod
    def parse(cls, text: str, window_s: float) -> Shape:
        """`1,1,2,4`: the rates of equal slices of the window, oldest first."""
        try:
            weights = tuple(float(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"“{text}” is not a deadline shape: give relative upload rates of equal slices of the "
                             "window, oldest first, e.g. 1,1,2,4 (the last slice ends at the deadline)") from None
        return cls(weights, window_s)

    def shares(self) -> np.ndarray:
        w = np.asarray(self.weights, dtype=float)
        return w / w.sum()

    def peak_share_per_hour(self) -> float:
        """The share of all uploads that arrives per hour at the busiest slice's rate."""
        return float(self.shares().max() * HOUR * len(self.weights) / self.window_s)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` upload times, seconds from the window's start."""
        slice_s = self.window_s / len(self.weights)
        slices = rng.choice(len(self.weights), size=n, p=self.shares())
        return (slices + rng.random(n)) * slice_s


@dataclass(frozen=True)
class Course:
    students: int
    per_student: float  # uploads per student over the window (a fraction: some students one more)
    shape: Shape

    def __post_init__(self) -> None:
        if self.students < 1 or not self.per_student > 0:
            raise ValueError("a course needs at least one student and more than 0 uploads per student")

    @property
    def uploads(self) -> float:
        return self.students * self.per_student


@dataclass(frozen=True)
class Job:
    arrival: float  # seconds: when it was uploaded
    student: int
    service: float  # seconds it holds a worker


@dataclass(frozen=True)
class Outcome:
    """Per job, in the order given to `simulate`."""

    starts: np.ndarray
    finishes: np.ndarray
    arrivals: np.ndarray

    @property
    def waits(self) -> np.ndarray:
        """Upload to the start of its grade: the queue, and behind the student's own earlier run."""
        return self.starts - self.arrivals

    @property
    def results(self) -> np.ndarray:
        """Upload to its result."""
        return self.finishes - self.arrivals


def simulate(jobs: Sequence[Job], workers: int = 1, fair_share: bool = True,
             busy_for: Sequence[float] = ()) -> Outcome:
    """Start and finish times of `jobs` on `workers` identical workers, `busy_for` of them busy at
    time 0 for the seconds given (the rest idle).

    The broker's queue is first come first served by the time a run is sent: its upload time, or
    under fair share the end of the student's previous run when that is later. Each run taken
    starts on the worker free first. Runs start in the order they are sent, so each one is placed
    once: pop the earliest sent, start it at max(sent, first free worker); its start fixes when
    the student's next run is sent, which is later than anything still waiting was sent."""
    if workers < 1:
        raise ValueError("at least one worker")
    if len(busy_for) > workers:
        raise ValueError("more busy workers than workers")
    free = [*map(float, busy_for), *([0.0] * (workers - len(busy_for)))]
    heapq.heapify(free)
    later: dict[int, list[int]] = {}  # student -> their jobs not yet sent, latest first
    ready: list[tuple[float, int]] = []  # (sent at, job index): the broker's queue
    for i in sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, i)):
        if fair_share and jobs[i].student in later:
            later[jobs[i].student].insert(0, i)
        else:
            ready.append((jobs[i].arrival, i))
            later.setdefault(jobs[i].student, [])
    heapq.heapify(ready)
    starts, finishes = np.zeros(len(jobs)), np.zeros(len(jobs))
    while ready:
        sent, i = heapq.heappop(ready)
        starts[i] = max(sent, heapq.heappop(free))
        finishes[i] = starts[i] + jobs[i].service
        heapq.heappush(free, finishes[i])
        waiting = later.get(jobs[i].student) if fair_share else None
        if waiting:
            following = waiting.pop()
            heapq.heappush(ready, (max(jobs[following].arrival, finishes[i]), following))
    return Outcome(starts, finishes, np.array([j.arrival for j in jobs], dtype=float))


def service_estimate(grade_seconds: Sequence[float]) -> float:
    """The one figure of a grade's time where a single one is needed (the run page's ETA): the
    median of the measured times, which a few runs cut short or held up do not move."""
    return float(statistics.median(grade_seconds))


def queue_eta(position: int, busy_remaining: Sequence[float], service_s: float) -> float:
    """Seconds until the run at `position` in the broker's queue (1: next) has its result, when
    each busy worker is free after its `busy_remaining` seconds (none busy: one idle worker is
    assumed) and every grade takes `service_s`: `simulate` on this snapshot of the queue."""
    remaining = list(busy_remaining) or [0.0]
    jobs = [Job(0.0, i, service_s) for i in range(position)]
    return float(simulate(jobs, len(remaining), fair_share=False, busy_for=remaining).finishes[-1])


def course_jobs(course: Course, grade_seconds: Sequence[float], rng: np.random.Generator) -> list[Job]:
    """One deadline's uploads: each student's count (per_student, a fraction rounded up for that
    share of the students), each upload's time from the shape, each grade's time drawn from the
    measured ones."""
    whole, extra = divmod(course.per_student, 1.0)
    counts = int(whole) + (rng.random(course.students) < extra)
    students = np.repeat(np.arange(course.students), counts)
    arrivals = course.shape.sample(rng, len(students))
    services = rng.choice(np.asarray(grade_seconds, dtype=float), size=len(students))
    return [Job(float(a), int(s), float(g)) for a, s, g in zip(arrivals, students, services)]


@dataclass(frozen=True)
class Waits:
    """Pooled over the replications: seconds from upload to grade start and to result."""

    workers: int
    wait_p50: float
    wait_p95: float
    result_p50: float
    result_p95: float


class Planner:
    """`replications` seeded deadlines of one course, simulated for any number of workers on the
    same uploads and grade times (so a difference between worker counts is theirs alone)."""

    def __init__(self, course: Course, grade_seconds: Sequence[float], seed: int = 0, replications: int = 20) -> None:
        if not grade_seconds or any(not g > 0 for g in grade_seconds):
            raise ValueError("grade times must be seconds > 0")
        self.course = course
        rngs = np.random.default_rng(seed).spawn(max(1, replications))
        self.deadlines = [course_jobs(course, grade_seconds, rng) for rng in rngs]
        self._memo: dict[int, Waits] = {}

    def waits(self, workers: int) -> Waits:
        if workers not in self._memo:
            outcomes = [simulate(jobs, workers) for jobs in self.deadlines]
            waits = np.concatenate([o.waits for o in outcomes])
            results = np.concatenate([o.results for o in outcomes])
            self._memo[workers] = Waits(workers, *map(float, np.percentile(waits, [50, 95])),
                                        *map(float, np.percentile(results, [50, 95])))
        return self._memo[workers]

    def floor(self) -> Waits:
        """The waits with a worker for every upload: what is left is waiting behind one's own runs."""
        return self.waits(max(1, max(len(jobs) for jobs in self.deadlines)))

    def workers_for(self, p95_wait_s: float) -> Waits | None:
        """The fewest workers whose p95 wait is at most `p95_wait_s`; None when even a worker per
        upload cannot (fair share: the student's own earlier runs). More workers never wait
        longer, so a doubling then a bisection finds it."""
        if self.floor().wait_p95 > p95_wait_s:
            return None
        low, high = 0, 1  # waits(low) misses the target (0: no worker); waits(high) may meet it
        while self.waits(high).wait_p95 > p95_wait_s:
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if self.waits(middle).wait_p95 <= p95_wait_s else (middle, high)
        return self.waits(high)
