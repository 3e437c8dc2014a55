"""A run's progress notes (Run.progress) while a worker grades it, for the run page and the API.

{"stage"} while it unpacks, builds and starts its stage; {"stage": "run", "problem", "index",
"total"} while a problem is measured; and, once the stage has its correctness verdicts and only
timing is left, "checked": one entry per problem with its verdict and correctness points, kept
with every later note (the two-step result: a student reads whether the kernels are right while
their speed is measured). The final result replaces all of it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.assignment import StageProgress, assignment_of
from worker.measurements import ProblemMeasurement
from worker.pieces import pending_problems
from worker.pipeline import Outcome
from worker.rubric import Rubric
from worker.scoring import score_problem

BEING_MEASURED, NOT_TIMED, WAITING_FOR_GPU = "being measured", "not timed", "waiting for the GPU"


def checked_verdicts(rubric: Rubric, measurements: list[ProblemMeasurement], timed: frozenset[str],
                     speed: str = BEING_MEASURED) -> list[dict[str, Any]]:
    """Per measured problem of the rubric: whether every correctness case passed, the
    correctness points scoring gives it (speed points come with the timing), and whether its
    speed is still to come (`speed`: being measured, or waiting for the GPU)."""
    specs = {p.id: p.scoring for p in rubric.problems}
    assignment = assignment_of(rubric)
    verdicts = []
    for m in measurements:
        spec = specs.get(m.problem_id)
        if spec is None:
            continue
        score = score_problem(spec, m, assignment=assignment)
        verdicts.append({
            "problem": m.problem_id,
            "correct": m.status == "ok" and m.all_passed,
            "correctness_points": round(score.correctness_points, 2),
            "correctness_max": spec.correctness_points,
            "speed": speed if m.problem_id in timed else NOT_TIMED,
        })
    return verdicts


class ProgressNotes:
    """Builds Run.progress for one run and hands each new value to `write` (best-effort: the
    caller's), `running=True` with the first note of the stage (the run becomes `running`);
    `say` gets a line for the worker's log with each ("stage build", "problem 2.1")."""

    def __init__(self, rubric: Rubric, write: Callable[[dict[str, Any], bool], None],
                 say: Callable[[str], None] = lambda _line: None) -> None:
        self.rubric, self.write, self.say = rubric, write, say
        self.order = [p.id for p in rubric.problems]
        self.checked: list[dict[str, Any]] = []
        self.last: dict[str, Any] = {"stage": "run"}  # the last note of the stage

    def stage(self, stage: str) -> None:
        self.say(f"stage {stage}")
        self.write({"stage": stage}, stage == "run")

    def problem(self, problem_id: str) -> None:
        self.say(f"problem {problem_id}")
        note: dict[str, Any] = {"stage": "run", "problem": problem_id,
                                "index": self.order.index(problem_id) + 1 if problem_id in self.order else None,
                                "total": len(self.order)}
        if self.checked:
            note["checked"] = self.checked
        self.write(note, False)
        self.last = note

    def verdicts(self, measurements: list[ProblemMeasurement], timed: frozenset[str]) -> None:
        self.checked = checked_verdicts(self.rubric, measurements, timed)
        self.say(f"correctness verdicts of {len(self.checked)} problem(s), {len(timed)} to be timed")
        self.write({**self.last, "checked": self.checked}, False)

    def for_stage(self) -> StageProgress:
        return StageProgress(problem=self.problem, checked=self.verdicts)


def checked_progress(rubric: Rubric, outcome: Outcome) -> dict[str, Any]:
    """Run.progress of a run its checks piece left `checked`: every problem's verdict and
    correctness points, those still to be timed waiting for the GPU (the run page's two-step result)."""
    measurements = [ProblemMeasurement.from_dict(p.details["measurement"]) for p in outcome.problems
                    if p.details and p.details.get("measurement")]
    return {"stage": "timing", "checked": checked_verdicts(rubric, measurements, frozenset(pending_problems(measurements)),
                                                           speed=WAITING_FOR_GPU)}
