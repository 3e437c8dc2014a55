"""worker.pieces: what the checks piece leaves pending and how the timing's measurement joins it."""
from __future__ import annotations

from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.pieces import RECHECKED, TIMING_PENDING, mark_timing_pending, merge_timing, pending_problems, settle_pending
from worker.timing import ratio_summary


def _checked(pid: str, pending: bool = True) -> ProblemMeasurement:
    m = ProblemMeasurement(pid, routes={"abi": [CaseOutcome("abi:a", (4,), True)]}, telemetry={"before": {"gpu": "checks"}})
    if pending:
        mark_timing_pending(m)
    return m


def test_pending_problems_are_those_marked() -> None:
    assert pending_problems([_checked("1.1"), _checked("1.2", pending=False), _checked("2.1")]) == ("1.1", "2.1")


def test_timing_figures_join_the_checks_and_the_checks_record_stays() -> None:
    timed = ProblemMeasurement("1.1", figures={"student": ratio_summary([2.0] * 4, [1.0] * 4)},
                               telemetry={"before": {"gpu": "timing"}, "timing_stopped": "clear"})
    [m] = merge_timing([_checked("1.1")], [timed])
    assert m.figure("student") is not None and m.figure("student").speedup == 2.0
    assert m.cases_by("abi")[0].case_id == "abi:a" and m.status == "ok"
    assert TIMING_PENDING not in m.telemetry and "timing_skipped" not in m.telemetry
    assert m.telemetry["before"] == {"gpu": "checks"} and m.telemetry["timing_piece"]["before"] == {"gpu": "timing"}
    assert m.telemetry["timing_stopped"] == "clear"


def test_a_crash_while_timed_ends_the_problem_as_in_a_whole_grade() -> None:
    timed = ProblemMeasurement("1.1", status="crashed", log_tail="the child died (SIGSEGV) while timing")
    [m] = merge_timing([_checked("1.1")], [timed])
    assert m.status == "crashed" and "SIGSEGV" in m.log_tail and m.figure("student") is None


def test_wrong_timed_trials_become_a_failed_case() -> None:
    wrong = CaseOutcome("timing:course-shapes", (8,), False, message="2 timed trial(s) returned a wrong result")
    [m] = merge_timing([_checked("1.1")], [ProblemMeasurement("1.1", routes={"binding": [wrong]})])
    assert m.first_failure is not None and m.first_failure.case_id == "timing:course-shapes"


def test_a_rechecked_timing_stands_whole_and_a_missing_one_says_so() -> None:
    p3 = ProblemMeasurement("3", routes={"binding": [CaseOutcome("p3-x", (), False)]}, telemetry={RECHECKED: True})
    merged = {m.problem_id: m for m in merge_timing([_checked("3"), _checked("1.1"), _checked("2.2", False)], [p3])}
    assert merged["3"] is p3
    assert merged["1.1"].telemetry["timing_skipped"] == "the timing piece did not measure this problem"
    assert TIMING_PENDING not in merged["1.1"].telemetry
    assert "timing_skipped" not in merged["2.2"].telemetry  # never pending: untouched


def test_settled_pending_keeps_the_reason_and_leaves_the_input_alone() -> None:
    original = _checked("1.1")
    [m] = settle_pending([original], "a newer upload counts")
    assert m.telemetry["timing_skipped"] == "a newer upload counts" and TIMING_PENDING not in m.telemetry
    assert original.telemetry[TIMING_PENDING] is True
