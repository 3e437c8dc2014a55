"""The capacity model's second schedule (issue 55), beside today's one piece per run
(grader/capacity.py `simulate`): a run is two pieces of work on a GPU.

1. Its checks (every problem's correctness cases, Problem 3's checked steps, everything else
   the grade does but its timing). The checks of up to `check_slots` runs share one GPU at
   once, each taking the seconds it takes alone: the GPU is mostly idle during checks
   (BENCHMARKS.md, "GPU busy"), and the number of slots is chosen so that this holds. When they
   end, the run's verdict (correctness and points) is known.
2. Its timing, which holds the GPU alone: while a timing window runs no checks run on that GPU,
   and a timing starts only on a GPU with no checks running (none waiting either: a waiting
   check takes any GPU with a free slot first): speed when the GPU is free. When it ends, the
   final score is known. Timings wait in the order their verdicts came.

A run whose student uploaded again before its timing started is not timed: its verdict stands
and the newer upload's run is timed instead (so many uploads per student cost their checks
only). A run with no timing (every problem failed its checks) is final at its verdict.

Fair share as today, on the checks: one run per student in the checks at a time, so a
student's next upload is sent when their previous run's checks end. Checks go to the
lowest-numbered GPU with a free slot and timings to the highest-numbered idle one, which leaves
GPUs free of checks for timing when the checks do not need them all.

Pure (numpy and the standard library); `Job` is grader/capacity.py's: `service - timing`
seconds of checks, then `timing` seconds of timing.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from grader.capacity import Job

_END, _ARRIVE = 0, 1  # at one instant, ends are applied before arrivals, then the GPUs are handed out


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


def simulate_split(jobs: Sequence[Job], gpus: int = 1, check_slots: int = 2, fair_share: bool = True) -> SplitOutcome:
    """The two-piece schedule of `jobs` on `gpus` GPUs of `check_slots` check slots each: a
    discrete-event simulation (arrivals, check ends and timing ends; after each instant's events,
    waiting checks take free slots, then idle GPUs take timings)."""
    if gpus < 1 or check_slots < 1:
        raise ValueError("at least one GPU and one check slot per GPU")
    n = len(jobs)
    check_starts, verdicts = np.full(n, np.nan), np.full(n, np.nan)
    timing_starts, finals = np.full(n, np.nan), np.full(n, np.nan)
    superseded = np.zeros(n, dtype=bool)
    check_gpus, timing_gpus = np.full(n, -1), np.full(n, -1)
    events: list[tuple[float, int, int, int]] = [(j.arrival, _ARRIVE, i, -1) for i, j in enumerate(jobs)]
    heapq.heapify(events)
    checks_queue: list[tuple[float, int]] = []  # (sent at, job): first come first served
    timing_queue: list[tuple[float, int]] = []  # (verdict at, job)
    own: dict[int, deque[int]] = {}  # student -> uploads held back by fair share, oldest first
    latest: dict[int, int] = {}  # student -> their newest upload so far
    in_checks: set[int] = set()  # students with a run sent to or in the checks
    running = [0] * gpus  # checks running per GPU
    timing = [False] * gpus
    room = list(range(gpus))  # GPUs with a free check slot, lowest first (stale entries skipped)
    idle = [-g for g in range(gpus)]  # GPUs with nothing running, highest first (stale entries skipped)
    busy_since: list[float | None] = [None] * gpus
    busy_s = 0.0

    def occupy(g: int, now: float) -> None:
        if busy_since[g] is None:
            busy_since[g] = now

    def release(g: int, now: float) -> None:
        nonlocal busy_s
        since = busy_since[g]
        if since is not None and running[g] == 0 and not timing[g]:
            busy_s += now - since
            busy_since[g] = None
            heapq.heappush(idle, -g)
        if not timing[g] and running[g] < check_slots:
            heapq.heappush(room, g)

    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, i, g = heapq.heappop(events)
            job = jobs[i]
            if kind == _ARRIVE:
                latest[job.student] = i
                if fair_share and job.student in in_checks:
                    own.setdefault(job.student, deque()).append(i)
                else:
                    in_checks.add(job.student)
                    heapq.heappush(checks_queue, (now, i))
            elif np.isnan(verdicts[i]):  # its checks ended
                verdicts[i] = now
                running[g] -= 1
                release(g, now)
                held = own.get(job.student)
                if held:
                    heapq.heappush(checks_queue, (now, held.popleft()))
                else:
                    in_checks.discard(job.student)
                if job.timing > 0:
                    heapq.heappush(timing_queue, (now, i))
                else:
                    finals[i] = now
            else:  # its timing ended
                finals[i] = now
                timing[g] = False
                release(g, now)
        while checks_queue and room:
            g = heapq.heappop(room)
            if timing[g] or running[g] >= check_slots:
                continue  # stale
            _, i = heapq.heappop(checks_queue)
            occupy(g, now)
            running[g] += 1
            check_starts[i], check_gpus[i] = now, g
            heapq.heappush(events, (now + jobs[i].checks, _END, i, g))
            if running[g] < check_slots:
                heapq.heappush(room, g)
        while timing_queue and idle:
            g = -idle[0]
            if timing[g] or running[g] > 0:
                heapq.heappop(idle)  # stale
                continue
            verdict, i = heapq.heappop(timing_queue)
            if latest[jobs[i].student] != i:  # the student uploaded again: that run is timed instead
                superseded[i], finals[i] = True, verdict
                continue
            heapq.heappop(idle)
            occupy(g, now)
            timing[g] = True
            timing_starts[i], timing_gpus[i] = now, g
            heapq.heappush(events, (now + jobs[i].timing, _END, i, g))
    return SplitOutcome(np.array([j.arrival for j in jobs], dtype=float), check_starts, verdicts, timing_starts,
                        finals, superseded, check_gpus, timing_gpus, busy_s)
