"""Per-GPU speedup targets from our reference kit.

The course's published speedups were measured on the course's GPUs against the course's
MiniTorch; on another GPU the same good solution lands elsewhere (BENCHMARKS.md). `grader
calibrate` grades starter/hw4 on a worker's GPU and stores, per GPU model, a target for each
problem: the reference kit's median speedup, in the figure the rubric scores with (own
baseline, reference baseline or the smaller), times a margin, so a solution as good as ours
earns every speed point despite run-to-run noise.
"""
from __future__ import annotations

from collections.abc import Iterable

from worker.measurements import ProblemMeasurement
from worker.rubric import Rubric
from worker.scoring import choose_figure

# Three grades of the reference kit on the H200 spread a scored speedup by up to 1.14x
# (max/min, BENCHMARKS.md): a target at 0.85x the calibration grade keeps every speed point.
DEFAULT_MARGIN = 0.85


def calibrated_targets(rubric: Rubric, measurements: Iterable[ProblemMeasurement],
                       margin: float = DEFAULT_MARGIN) -> dict[str, float]:
    """Problem id -> target: the reference kit's speedup, in the figure the rubric scores
    with, times `margin`. Problems without a speedup, or not fully correct, get none."""
    if not 0 < margin <= 1:
        raise ValueError(f"margin must be in (0, 1], not {margin}")
    specs = {p.id: p.scoring for p in rubric.problems}
    targets = {}
    for m in measurements:
        if m.status != "ok" or not m.all_passed or m.problem_id not in specs:
            continue
        figure, _, _ = choose_figure(specs[m.problem_id], m)
        if figure is not None:
            targets[m.problem_id] = round(max(1.0, figure.speedup * margin), 3)
    return targets
