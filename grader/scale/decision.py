"""How many GPU worker jobs to submit now: a pure function of what needs a GPU and what the
scheduler already holds of ours, so it is tested without a scheduler
(tests/unit/grader/scale/test_scale_decision.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    runs: int  # runs needing a GPU worker now (grader.reads.gpu_demand: queued in the broker, or held)
    runs_per_job: int = 1  # runs one worker grades at once (its concurrency: KG_GPU_SLOTS)


@dataclass(frozen=True)
class Jobs:
    pending: int  # ours, waiting for a node
    running: int  # ours, started (their workers grade, start up, or wait out their idle time)


@dataclass(frozen=True)
class Limits:
    max_jobs: int  # ours pending or running at once, at most
    min_jobs: int = 0  # kept even with nothing to grade (before a deadline: `grader capacity`'s answer)


def jobs_wanted(demand: Demand, limits: Limits) -> int:
    """Jobs that would serve `demand`: one worker per `runs_per_job` runs, at least min_jobs,
    at most max_jobs."""
    needed = math.ceil(max(0, demand.runs) / max(1, demand.runs_per_job))
    return min(limits.max_jobs, max(needed, limits.min_jobs))


def jobs_to_submit(demand: Demand, jobs: Jobs, limits: Limits) -> int:
    """New jobs to submit: what is wanted less what is pending or running already, never below
    0. A pending job counts as a worker to come, so a pass that finds the cluster full submits
    nothing more; nothing is cancelled here: a worker with nothing to do leaves by itself (its
    idle exit), so a run already taken is never cut short by a scale-in."""
    return max(0, jobs_wanted(demand, limits) - jobs.pending - jobs.running)
