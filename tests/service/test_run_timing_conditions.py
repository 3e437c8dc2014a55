"""The run page's timing conditions (grader/reads/timing_conditions.py): each timed problem's SM
clock, temperature and throttle reasons over its windows, the windows measured again or kept
under a flag, and its fused op's fastest timed call against the GPU's copy peak, with the
impossible figure flagged; for the course's staff, never the student (who reads the reason
among the lost points)."""
from __future__ import annotations

import uuid

from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ProblemResult, Role, RunState, User, utcnow
from grader.passwords import set_password
from grader.reads.timing_conditions import timing_conditions
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser

MIB = 1 << 20
PEAK = {"gb_s": 3000.0, "low": 2950.0, "high": 3010.0, "bytes": 512 * MIB, "reps": 10}
READ = {"recorded": True, "windows": 30, "retaken": 1, "sm_clock_mhz": [1755, 1980], "temperature_c": [38, 44],
        "reasons": ["SwPowerCap"], "reasons_read": True, "held_ms": 0.0, "hot_c": 77.0, "kept_flagged": 0, "kept": []}
KEPT = {**READ, "retaken": 4, "kept_flagged": 2, "kept": ["the GPU slowed its clocks (HwSlowdown)"] * 2}
REASON = ("1.2: speed points not scored (0 of 6 speed points): your fused op's timed call moved 12000 GB/s "
          "(shape [8, 1024]), more than the GPU's measured peak of 3000 GB/s: the timing cannot be trusted; ask the staff")


def shape(size: int, ms: float) -> dict:
    return {"case": "c", "shape": [8, 1024], "trials": 6, "ms": {"custom": ms}, "fused_bytes": size, "windows": []}


# 1.1: 64 MiB in 0.1 ms (671 GB/s, 22% of the peak), one window retaken; 1.2: 12 GB/s claimed
# (impossible); 2.1: two windows kept under their flag; 2.2: graded where NVML was absent
TELEMETRY = {
    "1.1": {"timing_conditions": READ, "copy_peak": PEAK, "timing_shapes": [shape(64 * MIB, 0.1)]},
    "1.2": {"timing_conditions": READ, "copy_peak": PEAK, "timing_shapes": [shape(12_000_000, 0.001)]},
    "2.1": {"timing_conditions": KEPT, "copy_peak": PEAK, "timing_shapes": [shape(MIB, 1.0)]},
    "2.2": {"timing_conditions": {"recorded": False, "note": "conditions not recorded: no NVML (no driver)",
                                  "windows": 30},
            "copy_peak": {"error": "not measured: no GPU"}, "timing_shapes": [shape(MIB, 1.0)]},
    "3": {},  # not timed: nothing to show
}


def scored_run(session: Session, student: User) -> int:
    _sub, run = record_submission(session, student, get_assignment(session, "hw4"), "a.zip",
                                  StoredBlob(sha256="c7" * 32, size=1))
    run.state, run.score, run.started_at, run.finished_at = RunState.scored, 50.0, utcnow(), utcnow()
    for pid, telemetry in TELEMETRY.items():
        reasons = [REASON] if pid == "1.2" else []
        run.results.append(ProblemResult(
            problem_id=pid, title=pid, status="passed", points=14 if reasons else 20, max_points=20,
            details={"measurement": {"problem_id": pid, "telemetry": telemetry}, "score": {"reasons": reasons}}))
    session.flush()
    return run.id


def test_the_read_sets_each_problem_beside_the_peak() -> None:
    found = {c.problem_id: c for c in timing_conditions({pid: {"telemetry": t} for pid, t in TELEMETRY.items()})}
    assert list(found) == ["1.1", "1.2", "2.1", "2.2"]
    ok = found["1.1"]
    assert ok.recorded and ok.sm_clock_mhz == [1755, 1980] and ok.temperature_c == [38, 44]
    assert ok.reasons == ["SwPowerCap"] and ok.retaken == 1 and ok.impossible is None
    assert round(ok.percent_of_peak or 0) == round(100 * 64 * MIB / 0.1e-3 / 1e9 / 3000)
    assert found["1.2"].impossible is not None and found["1.2"].fastest_gb_s == 12000.0
    assert found["2.1"].kept_flagged == 2
    none = found["2.2"]
    assert not none.recorded and none.note.startswith("conditions not recorded: no NVML")
    assert none.peak_gb_s is None and none.peak_note == "not measured: no GPU" and none.impossible is None


def test_staff_see_the_conditions_and_the_impossible_figure_and_the_student_reads_the_reason(
    settings: Settings, sessions: sessionmaker[Session],
) -> None:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        student = get_or_create_user(session, f"cstu-{tag}", Role.student)
        prof = get_or_create_user(session, f"cprof-{tag}", Role.instructor)
        for user in (student, prof):
            set_password(user, PASSWORD, SUITE_ARGON2)
        run_id = scored_run(session, student)

    staff_page = Browser(settings, f"cprof-{tag}").client.get(f"/runs/{run_id}").text
    assert 'id="timing-conditions"' in staff_page and 'id="conditions-table"' in staff_page
    assert "1755–1980 MHz" in staff_page and "38–44 °C" in staff_page and "SwPowerCap" in staff_page
    assert "22% of the copy peak (3000 GB/s)" in staff_page
    assert "impossible: speed points not scored" in staff_page and "12000 GB/s" in staff_page
    assert "2: the GPU slowed its clocks (HwSlowdown)" in staff_page
    assert "conditions not recorded: no NVML (no driver)" in staff_page and "not measured: no GPU" in staff_page
    student_page = Browser(settings, f"cstu-{tag}").client.get(f"/runs/{run_id}")
    assert student_page.status_code == 200 and "timing-conditions" not in student_page.text
    assert "your fused op&#39;s timed call moved 12000 GB/s" in student_page.text  # among the lost points
