"""CPU placement for timing: the parent on one fixed core, every timed child on another.

The speedups of hw4 are mostly host time (a fused op's kernel takes 2-9 us of a 0.4-9 ms
computation), so where the scheduler happens to put the processes moves the medians between
grades. Pinning the timed processes to the same three cores on every grade removes that
source of drift. The timed children (the submission's and the sides: its composition on our
basic ops, our kit) share one core: a trial runs one request at a time, and a figure that is
the ratio of two children's times must not also be the ratio of two cores' speeds. Scope:
only the timing phase; checks still run on every core in parallel.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TimingCpus:
    parent: int  # the grading thread that runs the clock and verifies
    timed: int  # every child whose requests are timed, one request at a time


def choose_timing_cpus(spec: str, gpu_index: int, allowed: set[int] | None = None) -> TimingCpus | None:
    """`off` -> None; `a,b` -> those cores (parent, timed children); `auto` -> two of the
    cores this worker may use, from the top down (core 0 takes most interrupts), a different
    two per GPU index so workers of one host do not share them. None when fewer than 2."""
    spec = spec.strip().lower()
    if spec in ("", "off", "none"):
        return None
    if spec != "auto":
        parts = [p.strip() for p in spec.split(",")]
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"timing CPUs: want 'auto', 'off' or two cores 'parent,timed', got {spec!r}")
        return TimingCpus(*map(int, parts))
    usable = sorted(allowed if allowed is not None else os.sched_getaffinity(0), reverse=True)
    groups = len(usable) // 2
    if groups == 0:
        return None
    start = 2 * (gpu_index % groups)
    return TimingCpus(*usable[start:start + 2])


def pin_process(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus` (sched_setaffinity acts on one thread: CUDA's and
    Python's helper threads would otherwise stay where they were). Gone threads are skipped."""
    try:
        tids = [int(t) for t in os.listdir(Path("/proc") / str(pid) / "task")]
    except (FileNotFoundError, ProcessLookupError):
        return
    for tid in tids:
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(tid, cpus)


@contextlib.contextmanager
def this_thread_on(cpu: int) -> Iterator[None]:
    """Run the calling thread on one core for the block, then restore its previous set."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
