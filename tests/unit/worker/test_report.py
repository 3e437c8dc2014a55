"""worker.report: a run's score as Gradescope results.json."""
from __future__ import annotations

import dataclasses
import json

import pytest

from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.report import gradescope_results
from worker.rubric import load_rubric
from worker.scoring import score_run
from worker.timing import RatioSummary

RUBRIC = load_rubric("hw4")
OK = CaseOutcome("c", (2, 8), True, 1e-7)
BAD = CaseOutcome("ln-b3h4096", (3, 4096), False, 0.42, (1, 2000), public=False)


def measurements() -> list[ProblemMeasurement]:
    def m(pid, speedup, *cases, **kw):
        r = RatioSummary(speedup, 1.0, speedup, speedup * 0.95, speedup * 1.05, 30)
        return ProblemMeasurement(pid, routes={"abi": list(cases), "binding": [OK]}, figures={"student": r, "trusted": r}, **kw)

    return [
        m("1.1", 7.0, OK, kernel_ms=0.0123),
        m("1.2", 3.25, OK),
        m("2.1", 20.0, OK, BAD, first_failure=BAD),
        ProblemMeasurement("2.2", status="timeout", log_tail="killed after 120 s"),
        m("3", 1.05, OK),
    ]


@pytest.fixture()
def results():
    ms = measurements()
    run = score_run(RUBRIC, ms)
    return run, gradescope_results(RUBRIC, run, ms, execution_time=42.4)


def test_valid_json_with_the_gradescope_fields(results):
    run, res = results
    text = json.dumps(res, allow_nan=False)
    back = json.loads(text)
    assert set(back) >= {"score", "output", "tests", "stdout_visibility"}
    assert back["execution_time"] == 42
    assert back["stdout_visibility"] == "visible"
    assert "leaderboard" not in back
    for t in back["tests"]:
        assert set(t) >= {"name", "number", "score", "max_score", "output", "status"}
        assert t["status"] in ("passed", "failed")
        assert 0 <= t["score"] <= t["max_score"]


def test_scores_add_up(results):
    run, res = results
    assert res["score"] == pytest.approx(sum(t["score"] for t in res["tests"]))
    assert res["score"] == pytest.approx(run.total)
    assert sum(t["max_score"] for t in res["tests"]) == pytest.approx(100)
    assert [t["number"] for t in res["tests"]] == ["1.1", "1.2", "2.1", "2.2", "3"]


def test_test_outputs_carry_reasons_failures_and_speedups(results):
    _, res = results
    t = {t["number"]: t for t in res["tests"]}
    assert t["1.1"]["status"] == "passed" and t["1.1"]["score"] == 20
    assert "7x [6.65, 7.35]" in t["1.1"]["output"] and "0.0123 ms" in t["1.1"]["output"]
    assert t["1.2"]["status"] == "passed" and "speed points" in t["1.2"]["output"]
    assert t["2.1"]["status"] == "failed" and "max error 0.42 at [1, 2000]" in t["2.1"]["output"]
    assert t["2.2"]["score"] == 0 and "killed after 120 s" in t["2.2"]["output"]
    assert t["3"]["name"].startswith("3 Fused kernels")
    assert "vs target 1.1x: 3.07 of 6 speed points" in t["3"]["output"]
    assert t["2.1"]["extra_data"]["cases"] == {"total": 3, "failed": 1}


def test_a_withheld_hidden_case_is_named_by_number_in_the_report():
    problems = tuple(dataclasses.replace(p, scoring=dataclasses.replace(p.scoring, hidden_case_details=False))
                     for p in RUBRIC.problems)
    rubric = dataclasses.replace(RUBRIC, problems=problems)
    ms = measurements()
    res = gradescope_results(rubric, score_run(rubric, ms), ms)
    output = {t["number"]: t for t in res["tests"]}["2.1"]["output"]
    assert "failed hidden case 1" in output
    assert "ln-b3h4096" not in output and "4096" not in output and "0.42" not in output


def test_visibility_options():
    ms = measurements()
    run = score_run(RUBRIC, ms)
    res = gradescope_results(RUBRIC, run, ms, stdout_visibility="hidden", visibility="after_published")
    assert res["stdout_visibility"] == "hidden" and "execution_time" not in res
    assert all(t["visibility"] == "after_published" for t in res["tests"])
    with pytest.raises(ValueError):
        gradescope_results(RUBRIC, run, ms, stdout_visibility="sometimes")


def test_works_without_measurements():
    run = score_run(RUBRIC, [])
    res = gradescope_results(RUBRIC, run, None)
    assert res["score"] == 0 and len(res["tests"]) == 5
    json.dumps(res, allow_nan=False)
