"""A run's score as Gradescope autograder results (results.json).

Top level: `score` (the total), optional `execution_time` (seconds), `output` (a summary),
`output_format`, `stdout_visibility`, `visibility`, `tests`. One test per rubric problem:
`name`, `number` (the problem id), `score`, `max_score`, `status` (passed when every
correctness case passed), `output` (reasons for lost points, the first failing case, the
speedup lines), `output_format`, `visibility`, `extra_data` (machine-readable details for
staff). No leaderboard.

Standard library + numpy only (through worker.scoring): importable on a bare GPU machine.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from worker.measurements import ProblemMeasurement
from worker.rubric import Problem, Rubric
from worker.scoring import ProblemScore, RunScore

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


def _by_id(
    measurements: Mapping[str, ProblemMeasurement] | Iterable[ProblemMeasurement] | None,
) -> dict[str, ProblemMeasurement]:
    if measurements is None:
        return {}
    if isinstance(measurements, Mapping):
        return dict(measurements)
    return {m.problem_id: m for m in measurements}


def _test_output(lines_reasons: list[str], lines_notes: list[str], first_failure: str | None) -> str:
    parts: list[str] = []
    if lines_reasons:
        parts.append("Points lost / flags:")
        parts.extend(f"- {r}" for r in lines_reasons)
    if first_failure and not any(first_failure in r for r in lines_reasons):
        parts.append(f"First failing case: {first_failure}")
    if lines_notes:
        parts.append("Measurements:" if parts else "All points earned. Measurements:")
        parts.extend(f"- {n}" for n in lines_notes)
    return "\n".join(parts) if parts else "All points earned."


def _summary(rubric: Rubric, run_score: RunScore) -> str:
    lines = [f"{rubric.title}: {run_score.total:g} / {run_score.max_total:g}"]
    lines += [f"  {s.problem_id}: {s.points:g} / {s.max_points:g} ({s.status})" for s in run_score.problems]
    return "\n".join(lines)


def _first_failure(problem: Problem | None, s: ProblemScore, m: ProblemMeasurement | None) -> str | None:
    """The failed problem's first failing case, as the student reads it."""
    if problem is None or m is None or s.status != "failed":
        return None
    case = m.first_failure if m.first_failure is not None else next(iter(m.failed_cases), None)
    if case is None:
        return None
    return m.describe_case(case, hidden_details=problem.scoring.hidden_case_details)


def _gradescope_test(problem: Problem | None, s: ProblemScore, m: ProblemMeasurement | None,
                     visibility: str) -> dict[str, Any]:
    """One problem (the rubric's, where it has it) as a Gradescope test, with our figures in its extra_data."""
    extra: dict[str, Any] = {
        "status": s.status,
        "correctness_points": s.correctness_points,
        "speed_points": s.speed_points,
        "figure": s.figure,
        "target": s.target,
        "flags": list(s.flags),
    }
    if s.speedup is not None:
        extra["speedup"] = s.speedup.to_dict()
    if m is not None:
        extra["cases"] = {"total": len(m.cases), "failed": len(m.failed_cases)}
        if m.kernel_ms is not None:
            extra["kernel_ms"] = m.kernel_ms
    return {
        "name": f"{s.problem_id} {problem.title if problem else ''}".strip(),
        "number": s.problem_id,
        "score": s.points,
        "max_score": s.max_points,
        "status": "passed" if s.status == "passed" else "failed",
        "output": _test_output(s.reasons, s.notes, _first_failure(problem, s, m)),
        "output_format": "text",
        "visibility": visibility,
        "extra_data": extra,
    }


def gradescope_results(
    rubric: Rubric,
    run_score: RunScore,
    measurements: Mapping[str, ProblemMeasurement] | Iterable[ProblemMeasurement] | None = None,
    *,
    stdout_visibility: str = "visible",
    visibility: str = "visible",
    execution_time: float | None = None,
    output: str | None = None,
) -> dict[str, Any]:
    """results.json content for Gradescope; `json.dumps(..., allow_nan=False)` accepts it."""
    for name, value in (("stdout_visibility", stdout_visibility), ("visibility", visibility)):
        if value not in VISIBILITIES:
            raise ValueError(f"{name} must be one of {VISIBILITIES}")
    by_m = _by_id(measurements)
    problems = {p.id: p for p in rubric.problems}
    results: dict[str, Any] = {
        "score": run_score.total,
        "output": _summary(rubric, run_score) if output is None else output,
        "output_format": "text",
        "visibility": visibility,
        "stdout_visibility": stdout_visibility,
        "tests": [_gradescope_test(problems.get(s.problem_id), s, by_m.get(s.problem_id), visibility)
                  for s in run_score.problems],
    }
    if execution_time is not None:
        results["execution_time"] = int(round(float(execution_time)))
    json.dumps(results, allow_nan=False)  # fail here, not on Gradescope, if anything is not JSON
    return results
