"""The one schema a measurement is stored in (worker.measurements, MEASUREMENT_SCHEMA): written as
schema 2 (cases by route, figures by name), and a measurement stored before it (schema 1, flat
keys, as the database holds for runs graded until 2026-12-06) still reads the same, in the
engine and on the run page."""
from __future__ import annotations

import pytest

from grader.pages.run_view import case_rows
from worker.measurements import MEASUREMENT_SCHEMA, ProblemMeasurement, stored_measurement

# A measurement as a run graded on 2026-12-05 stored it (schema 1: no "schema" key).
STORED_V1 = {
    "problem_id": "1.1", "status": "ok",
    "abi_cases": [{"case_id": "abi:sfw-b1", "shape": [1, 8, 64, 64], "ok": True, "max_err": 1e-7, "where": None,
                   "message": "", "public": True, "ran": True}],
    "binding_cases": [{"case_id": "binding:sfw-r8", "shape": [8, 64], "ok": False, "max_err": "nan", "where": [3, 1],
                       "message": "out of tolerance", "public": False, "ran": True}],
    "first_failure": None,
    "speedup_student": {"median_baseline_ms": 2.0, "median_custom_ms": 0.5, "speedup": 4.0, "low": 3.8, "high": 4.2,
                        "trials": 6},
    "speedup_reference_ops": None,
    "speedup_trusted": {"median_baseline_ms": 2.0, "median_custom_ms": 0.4, "speedup": 5.0, "low": 4.9, "high": 5.1,
                        "trials": 4},
    "kernel_ms": 0.01, "log_tail": "", "telemetry": {"before": {"name": "NVIDIA H200"}},
}


def test_an_older_stored_measurement_reads_as_it_was_measured() -> None:
    m = ProblemMeasurement.from_dict(STORED_V1)
    assert [c.case_id for c in m.cases_by("abi")] == ["abi:sfw-b1"]
    assert [c.case_id for c in m.cases_by("binding")] == ["binding:sfw-r8"]
    assert m.cases_by("binding")[0].where == (3, 1) and not m.cases_by("binding")[0].public
    assert m.figure("student") is not None and m.figure("student").speedup == 4.0
    assert m.figure("reference_ops") is None and m.figure("trusted") is not None and m.figure("trusted").trials == 4
    assert m.telemetry == {"before": {"name": "NVIDIA H200"}}


def test_it_is_written_in_the_current_schema_and_reads_back_the_same() -> None:
    m = ProblemMeasurement.from_dict(STORED_V1)
    stored = m.to_dict()
    assert stored["schema"] == MEASUREMENT_SCHEMA == 2
    assert list(stored["cases"]) == ["abi", "binding"] and set(stored["figures"]) == {"student", "trusted"}  # measured only
    assert not {"abi_cases", "binding_cases", "speedup_student"} & set(stored)
    assert stored_measurement(STORED_V1) == stored_measurement(stored)
    again = ProblemMeasurement.from_dict(stored)
    assert again.to_dict() == stored


def test_a_measurement_from_a_newer_kernelgrade_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match="schema 3: this kernelgrade reads up to 2"):
        stored_measurement({**STORED_V1, "schema": 3})


def test_the_run_page_shows_the_cases_of_either_schema_alike() -> None:
    routes = {"abi": "library", "binding": "your code"}
    old = case_rows(STORED_V1, routes, disclose_hidden=False)
    new = case_rows(ProblemMeasurement.from_dict(STORED_V1).to_dict(), routes, disclose_hidden=False)
    assert old == new and [r["name"] for r in old] == ["abi:sfw-b1", "hidden case 1"]
    assert [r["route"] for r in old] == ["library", "your code"]
    assert case_rows({}, routes, disclose_hidden=True) == []


def test_an_assignment_names_its_own_routes_and_figures() -> None:
    """The engine holds no list of names: any assignment's routes and figures are stored and read
    back as it named them, the routes in the order it measured them; a route its words do not
    name is shown by its own name."""
    m = ProblemMeasurement.from_dict({**STORED_V1, "schema": 2, "figures": {"baseline": STORED_V1["speedup_trusted"]},
                                      "cases": {"warp": STORED_V1["binding_cases"], "library": STORED_V1["abi_cases"]}})
    assert list(m.routes) == ["warp", "library"] and [c.case_id for c in m.cases] == ["binding:sfw-r8", "abi:sfw-b1"]
    assert m.figure("baseline") is not None and m.figure("baseline").speedup == 5.0 and m.figure("student") is None
    again = ProblemMeasurement.from_dict(m.to_dict())
    assert again.to_dict() == m.to_dict() and list(again.routes) == ["warp", "library"]
    rows = case_rows(m.to_dict(), {"library": "transpose called directly"}, disclose_hidden=True)
    assert [r["route"] for r in rows] == ["warp", "transpose called directly"]
