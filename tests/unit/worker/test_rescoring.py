"""worker.rescoring: a run's stored measurements scored again under a rubric, without a GPU: the
same rubric changes nothing; a lower target or more speed points in a copy of hw4's rubric change
exactly the problem edited; what cannot be scored again says why and is never zeroed."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.rescore_data import problem_of, rubric_copy, set_target, stored_results
from worker.rescoring import RescoreRefused, StoredProblem, rescore_run, score_message


def stored(results: list[dict[str, Any]]) -> list[StoredProblem]:
    return [StoredProblem(r["problem_id"], r["points"], r["max_points"], r["message"], r["details"]) for r in results]


def total(results: list[dict[str, Any]]) -> float:
    return round(sum(r["points"] for r in results), 2)


def test_the_unchanged_rubric_changes_nothing(tmp_path: Path) -> None:
    rubric = rubric_copy(tmp_path, "rescore-same")
    results = stored_results(rubric)
    again = rescore_run(rubric, stored(results), total(results))
    assert not again.changed and again.changed_problems == []
    assert again.total == total(results) == 95.62
    assert [p.details["measurement"] for p in again.problems] == [r["details"]["measurement"] for r in results]
    assert [p.message for p in again.problems] == [r["message"] for r in results]


def test_a_lower_target_gives_the_speed_points_it_now_reaches(tmp_path: Path) -> None:
    results = stored_results(rubric_copy(tmp_path, "rescore-old"))
    before = {r["problem_id"]: r["points"] for r in results}
    assert before["1.1"] == 18.44  # 4.0x against 6.5x: 4.44 of 6 speed points
    lower = rubric_copy(tmp_path, "rescore-lower", set_target("1.1", 4.0))
    again = rescore_run(lower, stored(results), total(results))
    assert again.changed and [p.problem_id for p in again.changed_problems] == ["1.1"]
    [p] = again.changed_problems
    assert (p.before, p.points, p.max_points) == (18.44, 20.0, 20.0)
    assert p.message == "full marks" and p.details["score"]["target"] == 4.0
    assert again.total == 97.18 and again.before == 95.62
    assert again.report["score"] == 97.18  # the Gradescope results.json follows


def test_a_higher_target_takes_points_and_says_why(tmp_path: Path) -> None:
    results = stored_results(rubric_copy(tmp_path, "rescore-base"))
    higher = rubric_copy(tmp_path, "rescore-higher", set_target("2.1", 40.0))
    [p] = rescore_run(higher, stored(results), total(results)).changed_problems
    assert p.problem_id == "2.1" and p.before == 20.0 and p.points < 20.0
    assert "vs target 40x" in p.message


def test_more_speed_points_in_the_rubric_raise_the_problem_s_points_and_its_maximum(tmp_path: Path) -> None:
    def more_speed(data: dict[str, Any]) -> None:
        problem = problem_of(data, "1.2")
        problem["points"] = 24
        problem["scoring"] = dict(problem["scoring"], speed_points=10)  # its own copy: the anchor is shared

    results = stored_results(rubric_copy(tmp_path, "rescore-before"))
    again = rescore_run(rubric_copy(tmp_path, "rescore-more", more_speed), stored(results), total(results))
    [p] = again.changed_problems
    assert (p.problem_id, p.before, p.points, p.max_before, p.max_points) == ("1.2", 20.0, 24.0, 20.0, 24.0)
    assert again.max_total == 104.0 and again.total == round(95.62 + 4, 2)


def test_a_problem_left_out_for_a_kernel_that_did_not_build_stays_at_zero_with_its_words(tmp_path: Path) -> None:
    rubric = rubric_copy(tmp_path, "rescore-blocked")
    results = stored_results(rubric)
    words = "not graded: src/layernorm_kernel.cu did not compile"
    for r in results:
        if r["problem_id"] == "2.2":
            r.update(points=0.0, status="not_run", message=words,
                     details={"score": r["details"]["score"], "measurement": None})
    again = rescore_run(rubric_copy(tmp_path, "rescore-blocked2", set_target("2.2", 1.5)), stored(results),
                        total(results))
    p = next(p for p in again.problems if p.problem_id == "2.2")
    assert (p.points, p.status, p.message) == (0.0, "not_run", words) and not p.changed


@pytest.mark.parametrize(("spoil", "why"), [
    (lambda r: r.update(details=None), "problem 2.1: no measurement is stored (graded before they were kept)"),
    (lambda r: r.update(details={"score": {}}), "problem 2.1: no measurement is stored"),
    (lambda r: r["details"].update(measurement={"status": "ok"}), "problem 2.1: its stored measurement cannot be read"),
    (lambda r: r["details"].update(measurement=dict(r["details"]["measurement"], status="exploded")),
     "problem 2.1: its stored measurement cannot be read"),
    (lambda r: r["details"].update(measurement=None), "problem 2.1: it earned points but its measurement is missing"),
])
def test_what_cannot_be_scored_again_says_why(tmp_path: Path, spoil: Any, why: str) -> None:
    rubric = rubric_copy(tmp_path, "rescore-spoilt")
    results = stored_results(rubric)
    spoil(next(r for r in results if r["problem_id"] == "2.1"))
    with pytest.raises(RescoreRefused) as refused:
        rescore_run(rubric, stored(results), total(results))
    assert str(refused.value).startswith(why)


def test_problems_the_run_never_measured_or_the_rubric_dropped_are_refused(tmp_path: Path) -> None:
    rubric = rubric_copy(tmp_path, "rescore-full")
    results = stored_results(rubric)
    with pytest.raises(RescoreRefused, match="problem 3 was never measured in this run: only a re-grade"):
        rescore_run(rubric, stored([r for r in results if r["problem_id"] != "3"]))

    def drop_3(data: dict[str, Any]) -> None:
        data["problems"] = [p for p in data["problems"] if str(p["id"]) != "3"]

    with pytest.raises(RescoreRefused, match="problem 3 is no longer in the rubric"):
        rescore_run(rubric_copy(tmp_path, "rescore-no3", drop_3), stored(results))
    with pytest.raises(RescoreRefused, match="no problem result is stored"):
        rescore_run(rubric, [])


def test_the_run_message_takes_the_new_total() -> None:
    class Fake:
        total, max_total = 97.18, 100.0

    assert score_message("Scored 95.62 / 100.", Fake()) == "Scored 97.18 / 100."  # type: ignore[arg-type]
    assert score_message("Scored 80 / 100. Problem 2.2 was not graded: x.", Fake()) == (  # type: ignore[arg-type]
        "Scored 97.18 / 100. Problem 2.2 was not graded: x.")
    assert score_message(None, Fake()) == "Scored 97.18 / 100."  # type: ignore[arg-type]


def test_a_run_passed_over_for_timing_keeps_no_speed_points_whatever_the_target(tmp_path: Path) -> None:
    """Its checks' measurements hold no speed figure (the timing was passed over for a newer
    upload): a lower target finds nothing to score, and the stored reason stays."""
    rubric = rubric_copy(tmp_path, "rescore-passed")
    results = stored_results(rubric)
    why = "not timed: you uploaded again (submission 9) before this upload's timing began"
    for r in results:
        m = r["details"]["measurement"]
        m["figures"].update(student=None, reference_ops=None)
        m["telemetry"] = {"timing_skipped": why}
    results = stored_results_from(rubric, results)
    again = rescore_run(rubric_copy(tmp_path, "rescore-passed2", set_target("1.1", 2.0)), stored(results),
                        total(results))
    assert not again.changed and again.total == 70.0  # 14 correctness points of each of five problems
    p = next(p for p in again.problems if p.problem_id == "1.1")
    assert p.points == 14.0 and f"speedup was not measured ({why}): 0 of 6 speed points" in p.message


def stored_results_from(rubric: Any, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`results` scored again from their (edited) measurements, as the run would have stored them."""
    again = rescore_run(rubric, stored(results))
    return [r | {"points": p.points, "message": p.message, "details": p.details}
            for r, p in zip(results, again.problems, strict=True)]
