"""The capacity model's second schedule (issue 55), beside today's one piece per run
(grader/capacity/model.py `simulate`): a run is two pieces of work on a GPU.

1. Its checks (every problem's correctness cases, Problem 3's checked steps, everything else
   the grade does but its timing). The checks of up to `check_slots` runs share one GPU at
   once, each taking the seconds it takes alone: the GPU is mostly idle during checks
   (docs/benchmarks/grade-time.md, "GPU busy"), and the number of slots is chosen so that this holds. When they
   end, the run's verdict (correctness and points) is known.
2. Its timing, which holds the GPU alone: while a timing window runs no checks run on that GPU,
   and a timing starts only on a GPU with no checks running (none waiting either: a waiting
   check takes any GPU with a free slot first): speed when the GPU is free. When it ends, the
   final score is known. Timings wait in the order their verdicts came. A timing may first hold
   the GPU shared for a while (`timing_shared`: its children's start and the checks between its
   timed windows, measured as worker.gpu.gpu_lock.GpuTurns' shared seconds): that part takes a
   check slot beside other shared work once no check waits, and none starts while a timing
   waits to hold a GPU alone (the lock lets no new reader in before a waiting writer); then the
   timing waits for its GPU alone.

A run whose student uploaded again before its timing started is not timed: its verdict stands
and the newer upload's run is timed instead (so many uploads per student cost their checks
only). A run with no timing (every problem failed its checks) is final at its verdict.

Fair share as today, on the checks: one run per student in the checks at a time, so a
student's next upload is sent when their previous run's checks end. Checks go to the
lowest-numbered GPU with a free slot and timings to the highest-numbered idle one, which leaves
GPUs free of checks for timing when the checks do not need them all.

Pure (numpy and the standard library). A `Job` is `service - timing` seconds of checks, then
`timing` seconds of timing; grader/capacity/model.py, which runs both schedules, imports this module.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_END, _ARRIVE = 0, 1  # at one instant, ends are applied before arrivals, then the GPUs are handed out
_CHECKS, _SHARED, _ALONE = 0, 1, 2  # what a job's next end event ends


@dataclass(frozen=True)
class Job:
    """One upload's grade, for either schedule (grader/capacity/model.py re-exports it)."""

    arrival: float  # seconds: when it was uploaded
    student: int
    service: float  # seconds it holds a worker: its checks, then its timing
    timing: float = 0.0  # of which its timing (the two-piece schedule runs the two apart)
    timing_shared: float = 0.0  # of the timing, the seconds it holds the GPU shared, before the rest alone

    @property
    def checks(self) -> float:
        return self.service - self.timing

    @property
    def alone(self) -> float:
        return self.timing - self.timing_shared


@dataclass(frozen=True)
class SplitOutcome:
    """Per job, in the order given to `simulate_split`; a job not timed has NaN timing times
    and its final time is its verdict."""

    arrivals: np.ndarray
    check_starts: np.ndarray
    verdicts: np.ndarray  # when its checks ended
    timing_starts: np.ndarray
    finals: np.ndarray  # when its final score was known
    superseded: np.ndarray  # bool: not timed because its student uploaded again first
    check_gpus: np.ndarray  # the GPU its checks ran on
    timing_gpus: np.ndarray  # the GPU that timed it (-1: not timed)
    busy_s: float  # GPU-seconds with a check or a timing running, all GPUs together


class _SplitSchedule:
    """The state of one simulation: what each GPU runs, the queues, and each job's times."""

    def __init__(self, jobs: Sequence[Job], gpus: int, check_slots: int, fair_share: bool) -> None:
        n = len(jobs)
        self.jobs, self.check_slots, self.fair_share = jobs, check_slots, fair_share
        self.check_starts, self.verdicts = np.full(n, np.nan), np.full(n, np.nan)
        self.timing_starts, self.finals = np.full(n, np.nan), np.full(n, np.nan)
        self.superseded = np.zeros(n, dtype=bool)
        self.check_gpus, self.timing_gpus = np.full(n, -1), np.full(n, -1)
        self.events: list[tuple[float, int, int, int]] = [(j.arrival, _ARRIVE, i, -1) for i, j in enumerate(jobs)]
        heapq.heapify(self.events)
        self.checks_queue: list[tuple[float, int]] = []  # (sent at, job): first come first served
        self.shared_queue: list[tuple[float, int]] = []  # (verdict at, job): a timing's shared part to run
        self.timing_queue: list[tuple[float, int]] = []  # (verdict or shared part's end at, job): alone to run
        self.phase = np.full(n, _CHECKS)
        self.own: dict[int, deque[int]] = {}  # student -> uploads held back by fair share, oldest first
        self.latest: dict[int, int] = {}  # student -> their newest upload so far
        self.in_checks: set[int] = set()  # students with a run sent to or in the checks
        self.running = [0] * gpus  # checks running per GPU
        self.timing = [False] * gpus
        self.room = list(range(gpus))  # GPUs with a free check slot, lowest first (stale entries skipped)
        self.idle = [-g for g in range(gpus)]  # GPUs with nothing running, highest first (stale entries skipped)
        self.busy_since: list[float | None] = [None] * gpus
        self.busy_s = 0.0

    def occupy(self, g: int, now: float) -> None:
        if self.busy_since[g] is None:
            self.busy_since[g] = now

    def release(self, g: int, now: float) -> None:
        since = self.busy_since[g]
        if since is not None and self.running[g] == 0 and not self.timing[g]:
            self.busy_s += now - since
            self.busy_since[g] = None
            heapq.heappush(self.idle, -g)
        if not self.timing[g] and self.running[g] < self.check_slots:
            heapq.heappush(self.room, g)

    def arrive(self, i: int, now: float) -> None:
        student = self.jobs[i].student
        self.latest[student] = i
        if self.fair_share and student in self.in_checks:
            self.own.setdefault(student, deque()).append(i)
        else:
            self.in_checks.add(student)
            heapq.heappush(self.checks_queue, (now, i))

    def checks_end(self, i: int, g: int, now: float) -> None:
        job = self.jobs[i]
        self.verdicts[i] = now
        self.running[g] -= 1
        self.release(g, now)
        held = self.own.get(job.student)
        if held:
            heapq.heappush(self.checks_queue, (now, held.popleft()))
        else:
            self.in_checks.discard(job.student)
        if job.timing > 0:
            heapq.heappush(self.shared_queue if job.timing_shared > 0 else self.timing_queue, (now, i))
        else:
            self.finals[i] = now

    def shared_ends(self, i: int, g: int, now: float) -> None:
        self.running[g] -= 1
        self.release(g, now)
        heapq.heappush(self.timing_queue, (now, i))

    def timing_ends(self, i: int, g: int, now: float) -> None:
        self.finals[i] = now
        self.timing[g] = False
        self.release(g, now)

    def start_checks(self, now: float) -> None:
        while self.checks_queue and self.room:
            g = heapq.heappop(self.room)
            if self.timing[g] or self.running[g] >= self.check_slots:
                continue  # stale
            _, i = heapq.heappop(self.checks_queue)
            self.occupy(g, now)
            self.running[g] += 1
            self.check_starts[i], self.check_gpus[i] = now, g
            heapq.heappush(self.events, (now + self.jobs[i].checks, _END, i, g))
            if self.running[g] < self.check_slots:
                heapq.heappush(self.room, g)

    def passed_over(self, i: int, verdict: float) -> bool:
        """The student uploaded again: that run is timed instead, this one final at its verdict."""
        if self.latest[self.jobs[i].student] == i:
            return False
        self.superseded[i], self.finals[i] = True, verdict
        return True

    def start_shared(self, now: float) -> None:
        """Timings' shared parts take free check slots, once no check and no timing alone waits."""
        while self.shared_queue and self.room and not self.checks_queue and not self.timing_queue:
            verdict, i = self.shared_queue[0]
            if self.passed_over(i, verdict):
                heapq.heappop(self.shared_queue)
                continue
            g = heapq.heappop(self.room)
            if self.timing[g] or self.running[g] >= self.check_slots:
                continue  # stale
            heapq.heappop(self.shared_queue)
            self.occupy(g, now)
            self.running[g] += 1
            self.phase[i], self.timing_starts[i], self.timing_gpus[i] = _SHARED, now, g
            heapq.heappush(self.events, (now + self.jobs[i].timing_shared, _END, i, g))
            if self.running[g] < self.check_slots:
                heapq.heappush(self.room, g)

    def start_timings(self, now: float) -> None:
        while self.timing_queue and self.idle:
            g = -self.idle[0]
            if self.timing[g] or self.running[g] > 0:
                heapq.heappop(self.idle)  # stale
                continue
            ready, i = heapq.heappop(self.timing_queue)
            if self.phase[i] == _CHECKS and self.passed_over(i, ready):  # a shared part was checked already
                continue
            heapq.heappop(self.idle)
            self.occupy(g, now)
            self.timing[g] = True
            if self.phase[i] == _CHECKS:
                self.timing_starts[i] = now
            self.phase[i], self.timing_gpus[i] = _ALONE, g
            heapq.heappush(self.events, (now + self.jobs[i].alone, _END, i, g))

    def run(self) -> SplitOutcome:
        while self.events:
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, kind, i, g = heapq.heappop(self.events)
                if kind == _ARRIVE:
                    self.arrive(i, now)
                elif self.phase[i] == _CHECKS:
                    self.checks_end(i, g, now)
                elif self.phase[i] == _SHARED:
                    self.shared_ends(i, g, now)
                else:
                    self.timing_ends(i, g, now)
            self.start_checks(now)
            self.start_timings(now)
            self.start_shared(now)
        return SplitOutcome(np.array([j.arrival for j in self.jobs], dtype=float), self.check_starts, self.verdicts,
                            self.timing_starts, self.finals, self.superseded, self.check_gpus, self.timing_gpus,
                            self.busy_s)


def simulate_split(jobs: Sequence[Job], gpus: int = 1, check_slots: int = 2, fair_share: bool = True) -> SplitOutcome:
    """The two-piece schedule of `jobs` on `gpus` GPUs of `check_slots` check slots each: a
    discrete-event simulation (arrivals, check ends and timing ends; after each instant's events,
    waiting checks take free slots, then idle GPUs take timings)."""
    if gpus < 1 or check_slots < 1:
        raise ValueError("at least one GPU and one check slot per GPU")
    return _SplitSchedule(jobs, gpus, check_slots, fair_share).run()
