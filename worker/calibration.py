"""Per-GPU speedup targets from our reference kit.

The course's published speedups were measured on the course's GPUs against the course's
MiniTorch; on another GPU the same good solution lands elsewhere (BENCHMARKS.md). `grader
calibrate` grades starter/hw4 on a worker's GPU and stores, per GPU model, a target for each
problem: the reference kit's own median speedup times a margin, so a solution as good as
ours earns every speed point despite run-to-run noise.
"""
from __future__ import annotations

from collections.abc import Iterable

from worker.measurements import ProblemMeasurement

DEFAULT_MARGIN = 0.9


def calibrated_targets(measurements: Iterable[ProblemMeasurement], margin: float = DEFAULT_MARGIN) -> dict[str, float]:
    """Problem id -> target, from the reference kit's measured speedups (its own baseline
    is the trusted one). Problems without a speedup, or not fully correct, get none."""
    if not 0 < margin <= 1:
        raise ValueError(f"margin must be in (0, 1], not {margin}")
    targets = {}
    for m in measurements:
        if m.status == "ok" and m.all_passed and m.speedup_student is not None:
            targets[m.problem_id] = round(max(1.0, m.speedup_student.speedup * margin), 3)
    return targets
