"""worker.scoring: points per problem with reasons, from the rubric's `scoring:` sections."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from grader.pages.run_view import case_rows
from rubrics.hw4 import ASSIGNMENT as HW4
from worker import scoring
from worker.assignment import AssignmentError, assignment_of
from worker.measurements import CaseOutcome, ProblemMeasurement, salient_lines
from worker.rubric import ProblemScoring, RubricError, find_rubric, load_rubric
from worker.scoring import ProblemScore, score_run, speed_fraction
from worker.timing import RatioSummary

RUBRIC = load_rubric("hw4")
SPEC = ProblemScoring(correctness_points=14, speed_points=6, speed_floor=1.0, target=6.5,
                      speed_figure="reference_ops", speed_fallback="student")  # as hw4 scores its kernels


def score_problem(spec: ProblemScoring, m: ProblemMeasurement, *, target: float | None = None) -> ProblemScore:
    """As score_run scores hw4's problems: in hw4's words."""
    return scoring.score_problem(spec, m, target=target, assignment=HW4)


def ratio(speedup: float, baseline_ms: float | None = None, width: float = 0.05) -> RatioSummary:
    custom = 1.0
    base = baseline_ms if baseline_ms is not None else speedup * custom
    return RatioSummary(base, base / speedup, speedup, speedup * (1 - width), speedup * (1 + width), 30)


def ok_case(i: int = 0) -> CaseOutcome:
    return CaseOutcome(f"case{i}", (2, 4, 8), True, 1e-7, None)


BAD = CaseOutcome("sfw-b3h8f33t33-fut", (3, 8, 33, 33), False, 0.42, (1, 2, 5, 7), public=False)


def measured(pid: str = "1.1", *, bad: int = 0, student: float | None = 7.0, reference_ops: float | None = 7.0,
             trusted: float | None = 7.0, **kw):
    cases = [ok_case(i) for i in range(4)]
    binding = [ok_case(10 + i) for i in range(4)]
    for j in range(bad):
        binding[j] = replace(BAD, case_id=f"bad{j}")
    return ProblemMeasurement(
        pid,
        routes={"abi": cases, "binding": binding},
        figures={name: ratio(x) for name, x in (("student", student), ("reference_ops", reference_ops), ("trusted", trusted))
                 if x is not None},
        **kw,
    )


def test_full_marks():
    s = score_problem(SPEC, measured())
    assert (s.points, s.max_points, s.correctness_points, s.speed_points) == (20, 20, 14, 6)
    assert s.status == "passed" and s.full_marks and s.reasons == []
    assert any("6 of 6 speed points" in n for n in s.notes)


def test_partial_speed_follows_the_log_of_the_speedup_between_floor_and_target():
    s = score_problem(SPEC, measured(student=4.1, reference_ops=4.1))
    assert s.speed_points == pytest.approx(round(6 * math.log(4.1) / math.log(6.5), 2))  # 4.52
    assert s.points == pytest.approx(14 + s.speed_points)
    [line] = [r for r in s.reasons if "speed points" in r]
    assert line.startswith("1.1: speedup 4.1x [3.89, 4.3] (your fused op vs your MiniTorch's composition on the reference basic ops)") and "vs target 6.5x: 4.52 of 6 speed points" in line


def test_partial_speed_is_linear_when_the_rubric_says_so():
    s = score_problem(replace(SPEC, speed_scale="linear"), measured(student=4.1, reference_ops=4.1))
    assert s.speed_points == pytest.approx(round(6 * 3.1 / 5.5, 2))  # 3.38


def test_a_ten_percent_drift_below_the_target_moves_log_points_less_than_linear():
    def points(figure: float, scale: str) -> float:
        return 6 * speed_fraction(figure, 1.0, 3.7, scale)
    # 2.2's target: the steepest of the four kernel problems
    log_move = points(3.6, "log") - points(3.6 / 1.1, "log")
    linear_move = points(3.6, "linear") - points(3.6 / 1.1, "linear")
    assert log_move < 0.5 < linear_move


def test_speed_floor_and_cap():
    assert score_problem(SPEC, measured(student=1.0, reference_ops=1.0)).speed_points == 0
    assert score_problem(SPEC, measured(student=0.5, reference_ops=0.5)).speed_points == 0
    assert score_problem(SPEC, measured(student=30, reference_ops=30)).speed_points == 6
    assert speed_fraction(2.0, 1.0, 0.9) == 1.0  # a calibrated target below the floor
    assert speed_fraction(0.9, 1.0, 0.9) == 0.0


def test_calibrated_target_overrides_rubric():
    m = measured(student=5.0, reference_ops=5.0)
    assert score_problem(SPEC, m).speed_points < 6
    s = score_problem(SPEC, m, target=5.0)
    assert s.speed_points == 6 and s.target == 5.0


def test_correctness_failure_gives_no_speed_points():
    s = score_problem(SPEC, measured(bad=1, student=30, reference_ops=30))
    assert (s.points, s.correctness_points, s.speed_points, s.status) == (0, 0, 0, "failed")
    text = "\n".join(s.reasons)
    assert "1 of 8 correctness cases failed" in text
    assert "max error 0.42 at [1, 2, 5, 7]" in text
    assert "no speed points unless every correctness case passes" in text


def test_first_failure_is_reported_first_and_list_is_bounded():
    m = measured(bad=4)
    m.first_failure = m.cases_by("binding")[2]
    s = score_problem(SPEC, m)
    assert "bad2" in s.reasons[1]
    assert sum("failed hidden case" in r for r in s.reasons) == 3
    assert any("and 1 more failed cases" in r for r in s.reasons)


def shape_named(m: ProblemMeasurement) -> ProblemMeasurement:
    """`m` with its hidden cases' ids spelling their shapes, as hw4's do."""
    m.routes["binding"] = [c if c.public else replace(c, case_id=f"sfw-b3h8f33t3{i}-fut")
                       for i, c in enumerate(m.cases_by("binding"))]
    return m


def test_withheld_hidden_cases_are_named_by_number_as_the_run_page_does():
    m = shape_named(measured(bad=2))
    m.first_failure = m.cases_by("binding")[1]
    s = score_problem(replace(SPEC, hidden_case_details=False), m)
    text = "\n".join(s.reasons)
    assert "sfw-" not in text and "0.42" not in text and "[3, 8, 33, 33]" not in text
    route = HW4.words.routes["binding"]
    cases = [r for r in s.reasons if r.startswith("failed ")]
    assert cases == [f"failed hidden case 2 ({route})", f"failed hidden case 1 ({route})"]  # the first failure first
    rows = case_rows(m.to_dict(), HW4.words.routes, disclose_hidden=False)
    assert [r["name"] for r in rows if r["hidden"]] == ["hidden case 1", "hidden case 2"]
    shown = score_problem(SPEC, m)  # with details: the id, the shape and the error
    assert any(r.startswith("failed hidden case sfw-b3h8f33t31-fut: shape [3, 8, 33, 33], max error 0.42")
               for r in shown.reasons)


def test_partial_correctness_is_proportional():
    s = score_problem(replace(SPEC, partial_correctness=True), measured(bad=2))
    assert s.correctness_points == pytest.approx(14 * 6 / 8)
    assert s.speed_points == 0 and s.reasons


def test_nan_case_fails_with_readable_reason():
    m = measured()
    m.cases_by("abi")[0] = CaseOutcome("ln-h4096", (4, 4096), False, float("nan"), (0, 3))
    s = score_problem(SPEC, m)
    assert s.points == 0 and any("max error NaN at [0, 3]" in r for r in s.reasons)


@pytest.mark.parametrize("status, word", [("timeout", "timed out"), ("crashed", "crashed"), ("error", "error")])
def test_unfinished_problem_scores_zero_quoting_the_detail(status, word):
    m = measured(status=status, log_tail="warming up\n\nCUDA error: an illegal memory access\n")
    s = score_problem(SPEC, m)
    assert (s.points, s.status) == (0, status)
    assert word in s.reasons[0] and "illegal memory access" in s.reasons[0]
    assert "0 of 20 points" in s.reasons[0]


def test_not_run():
    s = score_problem(SPEC, ProblemMeasurement("2.1", status="not_run", log_tail="build failed"))
    assert s.points == 0 and s.status == "not_run" and "build failed" in s.reasons[0]


def test_a_problem_not_timed_keeps_its_correctness_and_says_why_it_has_no_speed_points():
    """The stage's reason for not timing (here: the run's GPU budget was used up) reaches the
    reason for the lost speed points; the checks it passed still count."""
    why = "the run's GPU time budget of 300 s was used up"
    s = score_problem(SPEC, measured(student=None, reference_ops=None, trusted=None, telemetry={"timing_skipped": why}))
    assert (s.correctness_points, s.speed_points, s.status) == (14, 0, "passed")
    assert s.reasons == [f"1.1: speedup was not measured ({why}): 0 of 6 speed points"]
    assert score_problem(SPEC, measured(student=None, reference_ops=None, trusted=None)).reasons == [
        "1.1: speedup was not measured: 0 of 6 speed points"]


def test_no_cases_is_not_correct():
    s = score_problem(SPEC, ProblemMeasurement("2.1", figures={"student": ratio(9)}))
    assert s.points == 0 and s.status == "failed" and s.reasons


def test_the_reference_ops_figure_scores_and_the_kit_never_does():
    m = measured(student=9.0, reference_ops=4.1, trusted=1.5)
    s = score_problem(SPEC, m)
    assert s.figure == "reference_ops" and s.speedup.speedup == 4.1 and 0 < s.speed_points < 6
    assert score_problem(replace(SPEC, speed_figure="student"), m).speed_points == 6
    notes = [n for n in s.notes if n.startswith("1.1: speedup, ")]  # every figure, in the words' order
    said = HW4.words.figures
    assert [n.split(": ")[1] for n in notes] == [f"speedup, {said[name]}" for name in ("reference_ops", "student", "trusted")]
    assert notes[1].startswith(f"1.1: speedup, {said['student']}: 9x") and "(information only): 1.5x" in notes[2]
    timed = score_problem(SPEC, measured(telemetry={"timed": "inp.attn_softmax(mask) against ..."})).notes
    assert "1.1: timed: inp.attn_softmax(mask) against ..." in timed
    # A kit 20x faster than the student's MiniTorch costs nothing and flags nothing.
    assert score_problem(SPEC, measured(reference_ops=7.0, trusted=0.3)).speed_points == 6


def test_a_missing_reference_ops_figure_falls_back_to_the_own_figure_with_a_flag():
    m = measured(reference_ops=None, telemetry={"timing_dropped": {"reference_ops": "it crashed there"}})
    s = score_problem(SPEC, m)
    assert s.figure == "student" and s.speed_points == 6
    said = HW4.words.figures
    flag = f"1.1: speed scored as {said['student']}, since {said['reference_ops']} could not be measured (it crashed there)"
    assert s.flags == [flag] and flag in s.notes
    s = score_problem(SPEC, measured(student=None, reference_ops=None, trusted=None))
    assert s.speed_points == 0 and any("not measured" in r for r in s.reasons)


def test_timing_evidence_is_flagged_for_staff():
    slow_ops = measured(telemetry={"timing_evidence": {"own_ops_vs_reference_ops": 2.4}})
    [flag] = score_problem(SPEC, slow_ops).flags
    assert "2.4x slower on your own basic ops (combine.cu)" in flag
    assert score_problem(replace(SPEC, review={"basic_ops_gap_flag": None}), slow_ops).flags == []
    assert score_problem(SPEC, measured(telemetry={"timing_evidence": {"own_ops_vs_reference_ops": 1.1}})).flags == []
    sleepy = measured(telemetry={"timing_evidence": {"custom_cpu_share": 0.97, "reference_ops_cpu_share": 0.40}})
    s = score_problem(SPEC, sleepy)
    [flag] = s.flags
    assert "60% of its time off the CPU" in flag and "withheld until course staff review it" in flag
    assert s.speed_points == 0 and s.correctness_points == 14
    assert any("speed points withheld for review" in r for r in s.reasons)
    honest = measured(telemetry={"timing_evidence": {"custom_cpu_share": 0.97, "reference_ops_cpu_share": 0.93}})
    assert score_problem(SPEC, honest).flags == [] and score_problem(SPEC, honest).speed_points == 6
    deferred = measured(telemetry={"timing_evidence": {"deferred_share": 0.4}})
    [flag] = score_problem(SPEC, deferred).flags
    assert "counted as the fused op's" in flag
    assert score_problem(SPEC, measured(telemetry={"timing_evidence": {"deferred_share": 0.01}})).flags == []


@pytest.mark.parametrize(
    "m",
    [
        measured(),
        measured(student=3.0, reference_ops=3.0),
        measured(bad=1),
        measured(student=0.7, reference_ops=0.7),
        measured(status="crashed"),
        measured(student=None, trusted=None),
        ProblemMeasurement("1.1", status="not_run"),
    ],
)
def test_every_lost_point_has_a_reason(m):
    s = score_problem(SPEC, m)
    assert s.points == pytest.approx(s.correctness_points + s.speed_points)
    if s.correctness_points < 14:
        assert any("correctness" in r or "points" in r for r in s.reasons)
    if s.speed_points < 6:
        assert any("speed points" in r or "0 of 20 points" in r for r in s.reasons)
    if s.points == s.max_points:
        assert not s.reasons


def test_run_totals_and_missing_problems():
    ms = [
        measured("1.1"),
        measured("1.2", student=3.0, reference_ops=3.0),
        measured("2.1", bad=1),
        measured("3", student=1.2, trusted=None),
    ]
    run = score_run(RUBRIC, ms)
    assert run.max_total == 100
    assert run.total == pytest.approx(sum(p.points for p in run.problems))
    assert [p.problem_id for p in run.problems] == ["1.1", "1.2", "2.1", "2.2", "3"]
    assert run.problem("2.2").status == "not_run" and run.problem("2.2").reasons
    assert run.problem("1.1").points == 20
    assert run.problem("3").points == 20  # 1.2x >= target 1.1x, student figure
    # 2.1's only hidden case failed: its 4 hidden points are lost, the speed points stay
    assert run.total == pytest.approx(20 + 14 + 6 * math.log(3) / math.log(5.5) + 10 + 6 * math.log(7) / math.log(15.8)
                                      + 0 + 20, abs=0.01)
    json.dumps(run.to_dict(), allow_nan=False)


def test_run_with_calibrated_targets_and_mapping():
    ms = {"1.1": measured("1.1", student=5.0, reference_ops=5.0)}
    assert score_run(RUBRIC, ms).problem("1.1").speed_points < 6
    assert score_run(RUBRIC, ms, targets={"1.1": 4.8}).problem("1.1").speed_points == 6


def test_run_rejects_unknown_or_duplicate_measurements():
    with pytest.raises(ValueError):
        score_run(RUBRIC, [measured("9.9")])
    with pytest.raises(ValueError):
        score_run(RUBRIC, [measured("1.1"), measured("1.1")])


def test_measurement_round_trips_through_json():
    m = measured(bad=1, kernel_ms=0.0123, telemetry={"gpu": "H200", "sm_clock_mhz": 1980})
    m.first_failure = m.cases_by("binding")[0]
    m.cases_by("abi")[1] = CaseOutcome("nan", (1,), False, float("nan"), None, "NaN in output")
    m.cases_by("abi")[2] = CaseOutcome("skipped", (1,), False, message="not run: the budget ran out", ran=False)
    text = json.dumps(m.to_dict(), allow_nan=False)
    back = ProblemMeasurement.from_dict(json.loads(text))
    assert back.to_dict() == m.to_dict() and not back.cases_by("abi")[2].ran and back.cases_by("abi")[1].ran
    stored = m.cases_by("abi")[2].to_dict()
    del stored["ran"]  # a measurement stored before `ran` existed: every case it has ran
    assert CaseOutcome.from_dict(stored).ran
    assert score_problem(SPEC, back).reasons == score_problem(SPEC, m).reasons
    with pytest.raises(ValueError):
        ProblemMeasurement("1.1", status="bogus")


def test_telemetry_a_child_filled_with_nan_or_inf_still_stores_as_strict_json():
    # what a child reports goes into telemetry, and the submission's code runs in the child
    m = measured(telemetry={"problem3": {"memory": {"fused": {"host_peak_mib": float("nan")}},
                                         "steps": [{"ms": float("inf"), "counts": {"layernorm_fw": 3}}]}})
    stored = json.loads(json.dumps(m.to_dict(), allow_nan=False))
    problem3 = stored["telemetry"]["problem3"]
    assert problem3["memory"]["fused"]["host_peak_mib"] == "nan" and problem3["steps"][0]["ms"] == "inf"
    assert problem3["steps"][0]["counts"] == {"layernorm_fw": 3}  # the rest as it was


def test_rubric_scoring_defaults_and_validation(tmp_path: Path):
    p11 = RUBRIC.problems[0].scoring
    assert (p11.correctness_points, p11.speed_points, p11.speed_floor, p11.target) == (14, 6, 1.0, 6.5)
    assert p11.speed_figure == "reference_ops" and p11.review == {"basic_ops_gap_flag": 1.5} and not p11.partial_correctness
    assert RUBRIC.problems[-1].scoring.speed_figure == "student"
    assert p11.thresholds() == (1.0, 6.5) and p11.thresholds(7.0) == (1.0, 7.0)

    base = find_rubric("hw4").read_text()
    head = base.split("problems:\n", 1)[0] + "problems:\n"

    def write(problems: str) -> None:
        (tmp_path / "x.yaml").write_text(head + problems)

    write('  - {id: "1", title: t, points: 10, reference_speedup: 2.0}\n')
    s = load_rubric("x", tmp_path).problems[0].scoring  # no scoring section: 70/30 split
    assert (s.correctness_points, s.speed_points, s.target) == (7, 3, 2.0)
    write('  - {id: "1", title: t, points: 10, scoring: {speed_points: 4}}\n')
    s = load_rubric("x", tmp_path).problems[0].scoring
    assert (s.correctness_points, s.speed_points, s.target) == (6, 4, None)
    for bad in (
        "{correctness_points: 5, speed_points: 4}",
        "{speed_figure: 'the fastest'}",  # a figure is named by a word
        "{speed_fallback: student}",  # a fallback from no figure
        "{speed_bonus: 3}",
        "{review: [basic_ops_gap_flag]}",  # settings by name
        "{review: {basic_ops_gap_flag: high}}",  # a number or null
    ):
        write(f'  - {{id: "1", title: t, points: 10, scoring: {bad}}}\n')
        with pytest.raises(RubricError):
            load_rubric("x", tmp_path)
    # A figure the plug-in does not measure is refused where the two meet, naming the ones it does.
    write('  - {id: "1", title: t, points: 10, scoring: {speed_figure: fastest}}\n')
    with pytest.raises(AssignmentError, match=r"'fastest', which its plug-in does not measure.*'reference_ops'"):
        assignment_of(load_rubric("x", tmp_path))
    # Likewise a review setting the plug-in does not have; its own are read as numbers.
    write('  - {id: "1", title: t, points: 10, scoring: {review: {sleep_flag: 2}}}\n')
    with pytest.raises(AssignmentError, match=r"'sleep_flag', which its plug-in does not have.*basic_ops_gap_flag"):
        assignment_of(load_rubric("x", tmp_path))
    write('  - {id: "1", title: t, points: 10, scoring: {review: {basic_ops_gap_flag: 2}}}\n')
    assert assignment_of(rubric := load_rubric("x", tmp_path)) and rubric.problems[0].scoring.review == {"basic_ops_gap_flag": 2.0}


SPLIT = replace(SPEC, hidden_points=4)


def split_measured(public_bad: int = 0, hidden_bad: int = 0, hidden: int = 4) -> ProblemMeasurement:
    """4 public cases and `hidden` hidden ones, the first few of each failing."""
    public = [replace(ok_case(i), public=True, ok=i >= public_bad) for i in range(4)]
    edge = [replace(ok_case(10 + i), public=False, ok=i >= hidden_bad) for i in range(hidden)]
    return ProblemMeasurement("1.1", routes={"abi": public, "binding": edge},
                              figures={"student": ratio(7.0), "reference_ops": ratio(7.0)})


def test_a_failed_hidden_case_costs_only_its_share():
    s = score_problem(SPLIT, split_measured(hidden_bad=1))
    assert s.correctness_points == pytest.approx(10 + 4 * 3 / 4) and s.speed_points == 6
    assert s.points == pytest.approx(19) and s.status == "failed"
    assert any("1 of 4 hidden edge cases failed: 3 of 4 points for them (1 lost)" in r for r in s.reasons)
    every = score_problem(SPLIT, split_measured(hidden_bad=4))
    assert every.points == pytest.approx(16)  # never more than hidden_points lost


def test_a_failed_public_case_costs_the_public_share_and_the_speed_points():
    s = score_problem(SPLIT, split_measured(public_bad=1))
    assert s.correctness_points == pytest.approx(4) and s.speed_points == 0
    text = "\n".join(s.reasons)
    assert "1 of 4 course-like cases failed: 0 of 10 points for them (10 lost)" in text
    assert "no speed points unless every course-like case passes" in text


def test_without_hidden_cases_the_split_gives_every_point_to_the_public_ones():
    s = score_problem(SPLIT, split_measured(hidden=0))
    assert (s.correctness_points, s.points) == (14, 20)


def test_the_rubric_splits_kernel_correctness_into_public_and_hidden():
    for p in RUBRIC.problems:
        expected = 4 if p.id != "3" else 0
        assert p.scoring.hidden_points == expected, p.id


def test_hidden_points_beyond_correctness_are_refused(tmp_path: Path):
    text = find_rubric("hw4").read_text()
    bad = tmp_path / "hw4.yaml"
    bad.write_text(text.replace("hidden_points: 4", "hidden_points: 15"))
    with pytest.raises(RubricError, match="hidden_points"):
        load_rubric("hw4", tmp_path)


# A dying child's output as seen on the H200: the CUDA error, then PyCUDA's notice at exit.
PYCUDA_EXIT = """Reduce Error: an illegal memory access was encountered
-------------------------------------------------------------------
PyCUDA ERROR: The context stack was not empty upon module cleanup.
-------------------------------------------------------------------
A context was still active when the context stack was being
cleaned up. At this point in our execution, CUDA may already
have been deinitialized, so there is no way we can finish
cleanly. The program will be aborted now.
Use Context.pop() to avoid this problem.
-------------------------------------------------------------------
"""


def test_a_crash_is_quoted_by_its_error_not_the_exit_boilerplate():
    assert salient_lines(PYCUDA_EXIT) == ["Reduce Error: an illegal memory access was encountered"]
    assert salient_lines("step 1\nstep 2\nstep 3\nstep 4", 2) == ["step 3", "step 4"]  # no error named
    m = ProblemMeasurement("2.1", status="crashed",
                           log_tail="signal: SIGABRT (while timing ... inp [1024, 32])\n" + PYCUDA_EXIT)
    reason = score_problem(SPEC, m).reasons[0]
    assert reason.startswith("2.1: crashed: signal: SIGABRT (while timing ... inp [1024, 32]) | "
                             "Reduce Error: an illegal memory access was encountered;")
    assert "Context.pop" not in reason
