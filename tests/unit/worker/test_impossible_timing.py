"""A fused op's timed figure faster than the GPU's memory allows (worker.scoring.impossible_figure):
its timed call's bytes per second (the bytes its operation must move, rubrics.hw4.abi.traffic_bytes,
over its median timed time per shape, as the stage records them) against the GPU's copy peak the
stage measured. Above the peak its speed points are not scored, with a reason and a staff flag;
at or below it, or with no peak measured, scoring is as before."""
from __future__ import annotations

import pytest

from rubrics.hw4 import ASSIGNMENT as HW4
from rubrics.hw4.abi import traffic_bytes
from rubrics.hw4.course_shapes import timing_cases
from rubrics.hw4.speed import ShapeTiming
from worker.measurements import COPY_PEAK_KEY, CaseOutcome, ProblemMeasurement, timed_rates
from worker.rubric import ProblemScoring, load_rubric
from worker.scoring import impossible_figure, score_problem, score_run
from worker.timing import RatioSummary

SPEC = ProblemScoring(correctness_points=14, speed_points=6, speed_floor=1.0, target=6.5,
                      speed_figure="reference_ops", speed_fallback="student")  # as hw4 scores its kernels
PEAK = 3000.0  # GB/s
CASES = timing_cases("1.1")


def shapes(custom_ms: list[float]) -> list[dict]:
    """The stage's own shape records (rubrics.hw4.speed.ShapeTiming.record) with these medians
    of the fused op's time."""
    records = []
    for case, ms in zip(CASES, custom_ms, strict=True):
        shape = ShapeTiming(case, ms={"custom": [ms, ms, ms], "reference_ops": [5 * ms] * 3})
        records.append(shape.record())
    return records


def fastest_ms_for(gb_s: float) -> float:
    """The milliseconds in which the largest shape's bytes move at `gb_s`."""
    largest = max(CASES, key=traffic_bytes)
    return traffic_bytes(largest) / (gb_s * 1e9) * 1e3


def timed(custom_ms: list[float], peak: float | None = PEAK, pid: str = "1.1") -> ProblemMeasurement:
    telemetry: dict = {"timing_shapes": shapes(custom_ms)}
    if peak is not None:
        telemetry[COPY_PEAK_KEY] = {"gb_s": peak, "low": peak * 0.98, "high": peak * 1.01, "bytes": 1 << 29, "reps": 10}
    ratio = RatioSummary(7.0, 1.0, 7.0, 6.8, 7.2, 12)
    cases = [CaseOutcome(f"c{i}", (2, 4), True, 0.0) for i in range(4)]
    return ProblemMeasurement(pid, routes={"abi": cases}, figures={"student": ratio, "reference_ops": ratio},
                              telemetry=telemetry)


HONEST = [1.5, 2.0, 0.8, 1.2, 3.0]  # milliseconds: a MiniTorch call, ~1% of the peak


def test_the_records_carry_each_shapes_bytes_and_make_its_rate() -> None:
    rates = timed_rates({"timing_shapes": shapes(HONEST)})
    assert [r.case for r in rates] == [c.id for c in CASES]
    assert [r.bytes for r in rates] == [traffic_bytes(c) for c in CASES]
    assert rates[0].gb_s == pytest.approx(traffic_bytes(CASES[0]) / 1.5e-3 / 1e9)
    # stored telemetry is read as it comes: a shape without bytes or a positive time makes no rate
    broken = [{"case": "x", "ms": {"custom": 0.0}, "fused_bytes": 10}, {"case": "y", "ms": {"custom": 1.0}}, "junk"]
    assert timed_rates({"timing_shapes": broken}) == []


def test_an_honest_figure_is_scored_as_before() -> None:
    m = timed(HONEST)
    assert impossible_figure(m) is None
    s = score_problem(SPEC, m, assignment=HW4)
    assert s.speed_points == 6 and not any("peak" in f for f in s.flags)


def test_a_figure_above_the_peak_is_not_scored_and_says_so_to_student_and_staff() -> None:
    fast = fastest_ms_for(2 * PEAK)
    custom = HONEST.copy()
    largest = CASES.index(max(CASES, key=traffic_bytes))
    custom[largest] = fast
    m = timed(custom)
    why = impossible_figure(m)
    recorded_ms = m.telemetry["timing_shapes"][largest]["ms"]["custom"]  # the record keeps 0.1 us
    gb_s = traffic_bytes(CASES[largest]) / (recorded_ms * 1e-3) / 1e9
    assert 5900 < gb_s < 6100
    assert why == (f"your fused op's timed call moved {gb_s:.0f} GB/s (shape {list(CASES[largest].shape)}), more "
                   "than the GPU's measured peak of 3000 GB/s: the timing cannot be trusted; ask the staff")
    s = score_problem(SPEC, m, assignment=HW4)
    assert s.speed_points == 0 and s.correctness_points == 14 and s.points == 14
    assert f"1.1: speed points not scored (0 of 6 speed points): {why}" in s.reasons
    assert f"1.1: impossible timing, its speed points are not scored: {why}" in s.flags
    assert s.speedup is not None  # the figure stays shown beside the reason


def test_below_the_peak_is_possible_above_it_is_not() -> None:
    at = HONEST.copy()
    largest = CASES.index(max(CASES, key=traffic_bytes))
    at[largest] = fastest_ms_for(PEAK * 0.95)  # a few microseconds: the record's 0.1 us rounding stays inside 5%
    assert impossible_figure(timed(at)) is None
    at[largest] = fastest_ms_for(PEAK * 1.05)
    assert impossible_figure(timed(at)) is not None


def test_without_a_measured_peak_nothing_is_judged() -> None:
    fast = [fastest_ms_for(100 * PEAK)] * len(CASES)
    for m in (timed(fast, peak=None), timed(fast, peak=0.0)):
        assert impossible_figure(m) is None
        assert score_problem(SPEC, m, assignment=HW4).speed_points == 6
    m = timed(fast, peak=None)
    m.telemetry[COPY_PEAK_KEY] = {"error": "not measured: no GPU"}
    assert impossible_figure(m) is None


def test_a_run_scores_the_impossible_problem_without_speed_and_the_others_as_usual() -> None:
    rubric = load_rubric("hw4")
    fast = [fastest_ms_for(5 * PEAK)] * len(CASES)
    score = score_run(rubric, [timed(fast, pid="1.1"), timed(HONEST, pid="1.2")])
    speed = {p.id: p.scoring.speed_points for p in rubric.problems}
    assert score.problem("1.1").speed_points == 0 and any("ask the staff" in r for r in score.problem("1.1").reasons)
    assert score.problem("1.2").speed_points == speed["1.2"]
