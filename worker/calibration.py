"""Per-GPU speedup targets from known-correct submissions graded on that GPU.

A rubric's reference speedups were measured by the course on its own GPUs (hw4's: 6.5x /
5.5x / 15.8x / 3.7x / 1.1x); on another GPU an ordinary correct solution lands elsewhere,
problem by problem (docs/benchmarks/fidelity.md, "Speed fidelity"). `grader calibrate --from ZIP ...`
grades a set of known-correct submissions (last term's accepted ones, the staff's) on a
worker's GPU and stores, per GPU model and problem, the median of their scored speedups (the
figure the rubric scores) times a margin, so an ordinary correct solution earns every speed
point despite run-to-run noise. Without submissions it falls back to our reference kit, which
is no student's code, and says so in the assignment's words (worker.assignment).
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable

from worker.measurements import BANDWIDTH_KEY, Bandwidth, ProblemMeasurement
from worker.rubric import Rubric
from worker.scoring import choose_figure

# A corpus solution's scored speedup moves by up to ~1.1x between grades and the corpus
# solutions differ among themselves (docs/benchmarks/fidelity.md): a target at 0.85x their median keeps
# every speed point for an ordinary correct solution.
DEFAULT_MARGIN = 0.85


def calibrated_targets(rubric: Rubric, measurements: Iterable[ProblemMeasurement],
                       margin: float = DEFAULT_MARGIN) -> dict[str, float]:
    """Problem id -> target: the median, over the measured submissions whose problem is fully
    correct, of the speedup the rubric scores, times `margin` (at least 1x). `measurements`
    may hold several submissions' measurements of one problem; problems without a correct,
    timed one get no target."""
    if not 0 < margin <= 1:
        raise ValueError(f"margin must be in (0, 1], not {margin}")
    specs = {p.id: p.scoring for p in rubric.problems}
    figures: dict[str, list[float]] = {}
    for m in measurements:
        if m.status != "ok" or not m.all_passed or m.problem_id not in specs:
            continue
        figure, _, _ = choose_figure(specs[m.problem_id], m)
        if figure is not None:
            figures.setdefault(m.problem_id, []).append(figure.speedup)
    return {pid: round(max(1.0, statistics.median(values) * margin), 3) for pid, values in figures.items()}


def reference_bandwidths(measurements: Iterable[ProblemMeasurement]) -> dict[str, float]:
    """Problem id -> the median achieved bandwidth (GB/s) of the calibration's fully correct
    measurements that have one: the figure a student's kernel is shown beside."""
    figures: dict[str, list[float]] = {}
    for m in measurements:
        record = m.telemetry.get(BANDWIDTH_KEY)
        if m.status == "ok" and m.all_passed and isinstance(record, dict):
            figures.setdefault(m.problem_id, []).append(Bandwidth.from_dict(record).gb_s)
    return {pid: round(statistics.median(values), 1) for pid, values in figures.items()}
