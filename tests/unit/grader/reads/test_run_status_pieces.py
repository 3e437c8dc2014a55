"""The run page's words for the two pieces of a split grade (grader.reads.runstatus): a checked run
says its verdicts are in and where its timing waits; a run being timed says so; the verdict lines
stay until the score."""
from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from grader.models import Run, RunState
from grader.reads.runstatus import CHECKED_TEXT, TIMING_TEXT, checked_lines, progress_text

VERDICTS = {"stage": "timing", "checked": [
    {"problem": "1.1", "correct": True, "correctness_points": 14.0, "correctness_max": 14, "speed": "waiting for the GPU"},
    {"problem": "1.2", "correct": False, "correctness_points": 6.0, "correctness_max": 14, "speed": "not timed"}]}


def _run(state: RunState) -> Run:
    submission = SimpleNamespace(assignment=SimpleNamespace(slug="hw4"))
    return cast(Run, SimpleNamespace(state=state, progress=VERDICTS, enqueued_at=None, submission=submission))


def test_a_checked_run_says_its_verdicts_are_in_and_where_its_timing_waits() -> None:
    assert progress_text(_run(RunState.checked), None, timing_position=3) == (
        CHECKED_TEXT + " Position 3 among the timings waiting.")
    assert progress_text(_run(RunState.checked), None) == CHECKED_TEXT  # not sent yet: no place to promise
    lines = checked_lines(_run(RunState.checked))
    assert lines[0].startswith("1.1") and "correct, 14 of 14 correctness points; speed waiting for the GPU" in lines[0]
    assert "a correctness case failed, 6 of 14 correctness points; speed not timed" in lines[1]


def test_a_run_being_timed_says_so_and_a_scored_one_shows_no_verdict_lines() -> None:
    assert progress_text(_run(RunState.timing), None) == TIMING_TEXT
    assert checked_lines(_run(RunState.timing))  # the verdicts stay while the GPU measures
    assert progress_text(_run(RunState.scored), None) == "" and checked_lines(_run(RunState.scored)) == []
