"""The run page's and the API's memory bandwidth: each profiled problem's achieved GB/s, its share
of the peak the GPU model's calibration measured, the reference's figure, and the above-peak
flag for staff only (grader/reads/bandwidth.py)."""
from __future__ import annotations

import uuid

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ProblemResult, Role, RunState, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission, save_calibration
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_settings import PASSWORD, Browser

MIB = 1 << 20
PEAK = 4000.0
# 1.1 moves 512 MiB in 0.2 ms (2684 GB/s, 67% of the peak); 2.1 claims 64 MiB in 0.01 ms
# (6711 GB/s: no kernel can, the flag's case); 1.2's stored kernel time is 0 (as a child could
# report it): no figure is made of it
PROFILED = {"1.1": (512 * MIB, 0.2), "2.1": (64 * MIB, 0.01), "1.2": (MIB, 0.0)}


def scored_run(session: Session, student: User, gpu: str) -> int:
    _sub, run = record_submission(session, student, get_assignment(session, "hw4"), "a.zip",
                                  StoredBlob(sha256="b4" * 32, size=1))
    run.state, run.score, run.started_at, run.finished_at = RunState.scored, 50.0, utcnow(), utcnow()
    for pid in ("1.1", "1.2", "2.1"):
        telemetry: dict = {"before": {"name": gpu}}
        if pid in PROFILED:
            size, ms = PROFILED[pid]
            telemetry["bandwidth"] = {"case": f"case-{pid}", "shape": [8, 1024], "bytes": size, "kernel_ms": ms}
        run.results.append(ProblemResult(problem_id=pid, title=pid, status="passed", points=10, max_points=10,
                                         details={"measurement": {"problem_id": pid, "telemetry": telemetry}}))
    session.flush()
    return run.id


def test_bandwidth_beside_the_calibrated_peak_and_reference_with_the_anomaly_for_staff_only(
    settings: Settings, sessions: sessionmaker[Session], client: TestClient,
) -> None:
    tag = uuid.uuid4().hex[:6]
    gpu = f"Test GPU {tag}"  # a model of this test's own: calibrations are per model
    with session_scope(sessions) as session:
        student = get_or_create_user(session, f"bstu-{tag}", Role.student)
        prof = get_or_create_user(session, f"bprof-{tag}", Role.instructor)
        for user in (student, prof):
            set_password(user, PASSWORD, SUITE_ARGON2)
        run_id = scored_run(session, student, gpu)
        uncalibrated_id = scored_run(session, student, f"{gpu} (not calibrated)")
        save_calibration(session, "hw4", gpu, {"1.1": 5.0}, 0.85,
                         {"peak_copy": {"gb_s": PEAK}, "bandwidth": {"1.1": 3100.0}})
        tokens = {name: issue_token(session, user, "test") for name, user in (("student", student), ("prof", prof))}

    staff = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["prof"])).json()["bandwidth"]
    own = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["student"])).json()["bandwidth"]
    assert [b["problem_id"] for b in staff] == ["1.1", "2.1"]  # only figures that are numbers
    first, second = staff
    assert first["gb_s"] == round(512 * MIB / 0.2e-3 / 1e9, 1) and first["reference_gb_s"] == 3100.0
    assert first["percent_of_peak"] == round(100 * first["gb_s"] / PEAK, 1) and first["above_peak"] is False
    assert second["percent_of_peak"] > 100 and second["above_peak"] is True and second["reference_gb_s"] is None
    assert [b["gb_s"] for b in own] == [first["gb_s"], second["gb_s"]]
    assert all(b["above_peak"] is None for b in own)  # the flag is the staff's

    staff_page = Browser(settings, f"bprof-{tag}").client.get(f"/runs/{run_id}").text
    student_page = Browser(settings, f"bstu-{tag}").client.get(f"/runs/{run_id}").text
    for page in (staff_page, student_page):
        assert 'id="bandwidth-table"' in page and f"Peak: {PEAK:.0f} GB/s" in page
        assert f"{first['gb_s']:.0f} GB/s" in page and f"{first['percent_of_peak']:.0f}%" in page and "3100 GB/s" in page
    assert "above the peak" in staff_page and "above the peak" not in student_page

    uncalibrated = client.get(f"/api/v1/runs/{uncalibrated_id}", headers=auth(tokens["prof"])).json()["bandwidth"]
    assert [b["percent_of_peak"] for b in uncalibrated] == [None, None]
    assert all(b["above_peak"] is False for b in uncalibrated)  # no peak: nothing to flag
    page = Browser(settings, f"bprof-{tag}").client.get(f"/runs/{uncalibrated_id}").text
    assert "No peak has been measured for" in page and "grader calibrate" in page
