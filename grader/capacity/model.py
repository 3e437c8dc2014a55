"""The capacity model: how long students wait for their verdicts and scores around a deadline,
and how many GPUs keep the verdict wait under a target.

A seeded discrete-event simulation of the grading queue: uploads arrive at times drawn from the
deadline's shape, each grade's time (and the part of it that is timing) is drawn from the
measured ones, the broker hands runs out first come first served, and fair share
(grader/runs/fairshare.py) keeps at most one run per student in flight, so a student's next
upload is sent only when their previous run ends. Two schedules, side by side on the same
uploads:

- today's (`simulate`): each grade holds one worker (one GPU) from claim to result. Its verdict
  is taken as known when its checks end, as if a grade checked everything before timing
  anything (today Problem 3's checks follow the kernel problems' timings, so this flatters
  today's schedule by those timings);
- checks shared, timing alone (issue 55, grader/capacity/split.py): the checks of several runs
  share a GPU, a timing holds it alone when no check needs it, and a run superseded by its
  student's next upload before its timing starts is not timed.

A simulation rather than queueing formulas: the arrivals are not steady (they pile up before
the deadline), fair share couples a student's runs, and each answer can be checked by hand on a
small case (tests/unit/grader/capacity/test_capacity.py).

Pure (numpy and the standard library): grader/reads/grade_times.py supplies the measured grade
times and their timing part, `grader capacity` (grader/cli/capacity.py) prints the answer, and
the run page's queue ETA (grader/reads/runstatus.py) is `queue_eta`, today's schedule on the
same estimate, `service_estimate`.
"""
from __future__ import annotations

import enum
import heapq
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grader.capacity.split import Job, simulate_split

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
class Outcome:
    """Per job, in the order given to `simulate`."""

    starts: np.ndarray
    finishes: np.ndarray
    arrivals: np.ndarray
    verdicts: np.ndarray  # when its checks ended: start + checks (a grade checks first, then times)

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
    return Outcome(starts, finishes, np.array([j.arrival for j in jobs], dtype=float),
                   starts + np.array([j.checks for j in jobs], dtype=float))


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


def split_queue_eta(position: int, checking_remaining: Sequence[float], timings_waiting: int, checks_s: float,
                    timing_s: float, slots: int, timing_shared_s: float = 0.0) -> tuple[float, float]:
    """(verdicts, final score): seconds until the run at `position` in the broker's queue (1:
    next) has its correctness verdicts and its score under the two-piece schedule on one GPU with
    `slots` check slots: the runs in their checks end after their `checking_remaining` seconds
    and are timed too, `timings_waiting` runs wait for their timing, every run's checks take
    `checks_s` and its timing `timing_s`, `timing_shared_s` of it shared (capacity_split.simulate_split
    on this snapshot)."""
    t, shared = timing_s, min(timing_shared_s, timing_s)
    waiting = [Job(0.0, -1 - i, t, t, shared) for i in range(timings_waiting)]  # verdicts in: timing only
    busy = [Job(0.0, 10**6 + i, left + t, t, shared) for i, left in enumerate(checking_remaining)]
    queued = [Job(0.0, 2 * 10**6 + i, checks_s + t, t, shared) for i in range(position)]
    outcome = simulate_split([*waiting, *busy, *queued], gpus=1, check_slots=slots, fair_share=False)
    return float(outcome.verdicts[-1]), float(outcome.finals[-1])


def course_jobs(course: Course, grade_seconds: Sequence[float], rng: np.random.Generator,
                timing_seconds: Sequence[float] | None = None, timing_shared: Sequence[float] | None = None) -> list[Job]:
    """One deadline's uploads: each student's count (per_student, a fraction rounded up for that
    share of the students), each upload's time from the shape, each grade's time drawn from the
    measured ones (with its timing, `timing_seconds[k]` of `grade_seconds[k]`, and of that
    `timing_shared[k]` shared; none: 0)."""
    whole, extra = divmod(course.per_student, 1.0)
    counts = int(whole) + (rng.random(course.students) < extra)
    students = np.repeat(np.arange(course.students), counts)
    arrivals = course.shape.sample(rng, len(students))
    drawn = rng.choice(len(grade_seconds), size=len(students))
    timings = [0.0] * len(grade_seconds) if timing_seconds is None else timing_seconds
    shared = [0.0] * len(grade_seconds) if timing_shared is None else timing_shared
    return [Job(float(a), int(s), float(grade_seconds[k]), float(timings[k]), float(shared[k]))
            for a, s, k in zip(arrivals, students, drawn)]


@dataclass(frozen=True)
class Waits:
    """Today's schedule, pooled over the replications: seconds from upload to grade start and
    to result (what bench/capacity_check.py measures a real run by)."""

    workers: int
    wait_p50: float
    wait_p95: float
    result_p50: float
    result_p95: float


class Schedule(str, enum.Enum):
    today = "today"  # one piece: a grade holds its GPU from claim to result (`simulate`)
    shared = "checks shared, timing alone"  # two pieces (grader/capacity/split.py)


@dataclass(frozen=True)
class Spread:
    p50: float
    p95: float
    max: float

    @classmethod
    def of(cls, seconds: np.ndarray) -> Spread:
        p50, p95 = np.percentile(seconds, [50, 95])
        return cls(float(p50), float(p95), float(seconds.max()))


@dataclass(frozen=True)
class Figures:
    """One schedule on `gpus` GPUs, pooled over the replications."""

    schedule: Schedule
    gpus: int
    verdict: Spread  # upload to the end of its checks: correctness and points known
    final: Spread  # upload to its final score, over the runs that count (an untimed one's is its verdict)
    busy: float  # the GPUs' share of time, from the window's start to the last result, with work running
    grades_per_gpu_hour: float  # uploads graded per GPU-hour of work running
    untimed: float  # the share of uploads not timed: their student uploaded again first


def _parts_within(parts: Sequence[float] | None, wholes: Sequence[float]) -> bool:
    """None, or as many seconds as `wholes`, each from 0 to its whole."""
    return parts is None or len(parts) == len(wholes) and all(0 <= p <= w for p, w in zip(parts, wholes))


class Planner:
    """`replications` seeded deadlines of one course, simulated for any number of GPUs (one
    worker each today) on the same uploads and grade times, so a difference between GPU counts
    or schedules is theirs alone. `timing_seconds[k]`: the timing part of `grade_seconds[k]`
    (none: all checks), which only the two-piece schedule runs apart, `timing_shared[k]` of that
    holding the GPU shared (none: 0); `check_slots`: its runs' checks at once per GPU."""

    def __init__(self, course: Course, grade_seconds: Sequence[float], seed: int = 0, replications: int = 20,
                 timing_seconds: Sequence[float] | None = None, check_slots: int = 2,
                 timing_shared: Sequence[float] | None = None) -> None:
        if not grade_seconds or any(not g > 0 for g in grade_seconds):
            raise ValueError("grade times must be seconds > 0")
        if not _parts_within(timing_seconds, grade_seconds):
            raise ValueError("each grade's timing must be seconds from 0 to its grade's time")
        if not _parts_within(timing_shared, timing_seconds or [0.0] * len(grade_seconds)):
            raise ValueError("each timing's shared part must be seconds from 0 to its timing's")
        if check_slots < 1:
            raise ValueError("at least one check slot per GPU")
        self.course, self.check_slots = course, check_slots
        rngs = np.random.default_rng(seed).spawn(max(1, replications))
        self.deadlines = [course_jobs(course, grade_seconds, rng, timing_seconds, timing_shared) for rng in rngs]
        self._memo: dict[int, Waits] = {}
        self._figures: dict[tuple[Schedule, int], Figures] = {}

    def waits(self, workers: int) -> Waits:
        if workers not in self._memo:
            outcomes = [simulate(jobs, workers) for jobs in self.deadlines]
            waits = np.concatenate([o.waits for o in outcomes])
            results = np.concatenate([o.results for o in outcomes])
            self._memo[workers] = Waits(workers, *map(float, np.percentile(waits, [50, 95])),
                                        *map(float, np.percentile(results, [50, 95])))
        return self._memo[workers]

    def figures(self, schedule: Schedule, gpus: int) -> Figures:
        key = (schedule, gpus)
        if key not in self._figures:
            self._figures[key] = (self._today(gpus) if schedule is Schedule.today else self._split(gpus))
        return self._figures[key]

    def _today(self, gpus: int) -> Figures:
        outcomes = [simulate(jobs, gpus) for jobs in self.deadlines]
        busy = [sum(j.service for j in jobs) for jobs in self.deadlines]
        return self._pool(Schedule.today, gpus, [o.arrivals for o in outcomes], [o.verdicts for o in outcomes],
                          [o.finishes for o in outcomes], [np.zeros(len(o.arrivals), dtype=bool) for o in outcomes],
                          busy)

    def _split(self, gpus: int) -> Figures:
        outcomes = [simulate_split(jobs, gpus, self.check_slots) for jobs in self.deadlines]
        return self._pool(Schedule.shared, gpus, [o.arrivals for o in outcomes], [o.verdicts for o in outcomes],
                          [o.finals for o in outcomes], [o.superseded for o in outcomes],
                          [o.busy_s for o in outcomes])

    @staticmethod
    def _pool(schedule: Schedule, gpus: int, arrivals: list[np.ndarray], verdicts: list[np.ndarray],
              finals: list[np.ndarray], superseded: list[np.ndarray], busy_s: list[float]) -> Figures:
        counted = np.concatenate([(f - a)[~s] for a, f, s in zip(arrivals, finals, superseded)])
        held = sum(gpus * float(f.max()) for f in finals)
        return Figures(schedule, gpus, Spread.of(np.concatenate([v - a for a, v in zip(arrivals, verdicts)])),
                       Spread.of(counted), sum(busy_s) / held,
                       sum(len(a) for a in arrivals) / (sum(busy_s) / HOUR), float(np.concatenate(superseded).mean()))

    def floor(self, schedule: Schedule) -> Figures:
        """A GPU for every upload: what is left is the grade's own time and, under fair share,
        waiting behind one's own runs."""
        return self.figures(schedule, max(1, max(len(jobs) for jobs in self.deadlines)))

    def fewest(self, schedule: Schedule, p95_verdict_s: float) -> Figures | None:
        """The fewest GPUs whose p95 verdict wait is at most `p95_verdict_s`; None when even a
        GPU per upload cannot. More GPUs never wait longer (tests/unit/grader/capacity/test_capacity.py checks
        it on both schedules), so a doubling then a bisection finds it."""
        def meets(gpus: int) -> bool:
            return self.figures(schedule, gpus).verdict.p95 <= p95_verdict_s

        if not meets(self.floor(schedule).gpus):
            return None
        low, high = 0, 1  # low misses the target (0: no GPU); high may meet it
        while not meets(high):
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if meets(middle) else (middle, high)
        return self.figures(schedule, high)
