"""grader.runs.progress: the run's progress notes, and the two-step result (the correctness
verdicts a stage reports before its timing) as notes and as the run page's lines."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from grader.models import RunState
from grader.reads.runstatus import checked_lines
from grader.runs.progress import BEING_MEASURED, NOT_TIMED, ProgressNotes, checked_verdicts
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.rubric import load_rubric

HW4 = load_rubric("hw4")


def _measurements() -> list[ProblemMeasurement]:
    right = ProblemMeasurement("1.1", routes={"abi": [CaseOutcome("sfw-1", (2, 8, 4, 4), True)]})
    wrong = ProblemMeasurement("2.2", routes={"abi": [CaseOutcome("lnbw-1", (4, 32), True),
                                                 CaseOutcome("lnbw-2", (4, 32), False, 0.5, (1, 2))]})
    return [right, wrong]


def test_verdicts_carry_the_correctness_points_scoring_gives() -> None:
    verdicts = checked_verdicts(HW4, _measurements(), frozenset({"1.1"}))
    spec = {p.id: p.scoring for p in HW4.problems}
    assert verdicts[0] == {"problem": "1.1", "correct": True, "correctness_points": spec["1.1"].correctness_points,
                           "correctness_max": spec["1.1"].correctness_points, "speed": BEING_MEASURED}
    assert verdicts[1]["problem"] == "2.2" and verdicts[1]["correct"] is False and verdicts[1]["speed"] == NOT_TIMED
    assert verdicts[1]["correctness_points"] < spec["2.2"].correctness_points  # a failed public case costs its tier


def test_notes_keep_the_verdicts_with_every_later_note() -> None:
    written: list[tuple[dict[str, Any], bool]] = []
    said: list[str] = []
    notes = ProgressNotes(HW4, lambda note, running: written.append((note, running)), said.append)
    notes.stage("build")
    notes.stage("run")
    progress = notes.for_stage()
    progress.problem("1.1")
    progress.checked(_measurements(), frozenset({"1.1"}))
    progress.problem("1.1")  # its timing starts
    assert [running for _, running in written] == [False, True, False, False, False]
    assert written[0][0] == {"stage": "build"} and written[1][0] == {"stage": "run"}
    assert written[2][0] == {"stage": "run", "problem": "1.1", "index": 1, "total": len(HW4.problems)}
    assert written[3][0] == {**written[2][0], "checked": checked_verdicts(HW4, _measurements(), frozenset({"1.1"}))}
    assert written[4][0] == written[3][0]
    # the worker's log lines, as the service tests read them ("run N: stage unpack")
    assert said == ["stage build", "stage run", "problem 1.1",
                    "correctness verdicts of 2 problem(s), 1 to be timed", "problem 1.1"]


def test_the_run_page_reads_one_line_per_verdict_while_the_run_is_active() -> None:
    note = {"stage": "run", "problem": "1.1", "checked": checked_verdicts(HW4, _measurements(), frozenset({"1.1"}))}
    run = SimpleNamespace(state=RunState.running, progress=note,
                          submission=SimpleNamespace(assignment=SimpleNamespace(slug="hw4")))
    lines = checked_lines(run)  # type: ignore[arg-type]
    title = next(p.title for p in HW4.problems if p.id == "1.1")
    assert lines[0].startswith(f"1.1 {title}: correct, ") and lines[0].endswith("correctness points; speed being measured")
    assert "2.2" in lines[1] and "a correctness case failed" in lines[1] and lines[1].endswith("speed not timed")
    run.state = RunState.scored
    assert checked_lines(run) == []  # type: ignore[arg-type]
