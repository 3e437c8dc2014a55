"""The GPU time budget of one run's stage (KG_GPU_BUDGET_S): what is left of it.

A stage starts one `Deadline` as it starts; every call to a sandboxed child waits at most what
is left (worker.gpu.client.ChildClient), and nothing new starts once it is spent, so whatever a
submission does, its run holds the GPU for at most the budget plus the seconds it takes to stop
its children. The seconds a stage spends queued for its turn on the GPU's lock (a timing piece
behind other runs' timings) are not its own: the budget leaves them out, and the Celery task's
time limit bounds them (grader.settings refuses slots that could outwait it). Standard library only.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable


def _none() -> float:
    return 0.0


class Deadline:
    def __init__(self, budget_s: float | None, queued: Callable[[], float] = _none) -> None:
        self.budget_s = budget_s  # None: no budget (tests and benches that build a stage by hand)
        self.started = time.monotonic()
        # Seconds the stage has spent queued for its turn on the GPU (worker.gpu.gpu_lock.GpuTurns.
        # waited): the GPU was another run's then, so they are not this run's to pay. Counted,
        # a timing piece queued behind other timings lost what it had not measured yet.
        self.queued = queued

    def used(self) -> float:
        """Seconds of the budget used: the stage's time so far, its queueing left out."""
        return time.monotonic() - self.started - self.queued()

    def left(self) -> float:
        """Seconds left: inf without a budget, 0 or less once it is spent."""
        if self.budget_s is None:
            return math.inf
        return self.budget_s - self.used()

    def words(self) -> str:
        """Why something did not run once the budget is spent, in a student's words."""
        return f"the run's GPU time budget of {self.budget_s:g} s was used up"

    def spent(self) -> str | None:
        """`words()` once nothing more may start, else None."""
        return self.words() if self.left() <= 0 else None
