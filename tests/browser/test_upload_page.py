"""The upload page says what is graded before anything is sent: the files looked for, each
problem's points, its speed floor and target from the rubric, and the targets calibrated on a
GPU model where staff stored some."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import set_password
from grader.db import session_scope
from grader.models import GpuCalibration, Role
from grader.service import get_assignment, get_or_create_user
from worker.rubric import load_rubric

PASSWORD = "correct horse battery"


@pytest.fixture
def calibrated_gpu(sessions: sessionmaker[Session]) -> Iterator[str]:
    """A calibration of hw4 on a GPU model of this test's own, removed afterwards."""
    gpu = f"Test GPU {uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        session.add(GpuCalibration(assignment_id=get_assignment(session, "hw4").id, gpu_name=gpu,
                                   targets={"1.1": 5.25, "1.2": 4.0}, margin=0.9))
    yield gpu
    with session_scope(sessions) as session:
        session.execute(delete(GpuCalibration).where(GpuCalibration.gpu_name == gpu))


def test_the_rubric_and_targets_are_shown_before_uploading(context: BrowserContext, sessions: sessionmaker[Session],
                                                           calibrated_gpu: str) -> None:
    name = f"rubric-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    rubric = load_rubric("hw4")
    section = page.locator("#rubric-hw4")
    expect(page.get_by_role("heading", name="What is graded")).to_be_visible()
    expect(section.locator("summary")).to_have_text(f"hw4: {rubric.title}, {sum(p.points for p in rubric.problems):g} points")
    expect(section).to_contain_text("src/softmax_kernel.cu, src/layernorm_kernel.cu, src/combine.cu")
    rows = section.locator("tbody tr")
    expect(rows).to_have_count(len(rubric.problems))
    first = rubric.problems[0]
    cells = rows.first.locator("td")
    expect(rows.first.locator("th")).to_have_text(f"{first.id} {first.title}")
    expect(cells.nth(0)).to_have_text(f"{first.points:g}")
    expect(cells.nth(1)).to_have_text(
        f"{first.scoring.correctness_points:g} ({first.scoring.hidden_points:g} from hidden edge cases)")
    expect(cells.nth(3)).to_have_text(f"{first.scoring.speed_floor:g}x")
    expect(cells.nth(4)).to_have_text(f"{first.scoring.target:.3g}x")
    expect(section.locator(".calibrated")).to_have_text(
        f"Graded on {calibrated_gpu}, the targets measured on that GPU apply instead: 1.1 5.25x, 1.2 4x.")
