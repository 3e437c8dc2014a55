"""Per-GPU calibrated targets stored in PostgreSQL and found again by GPU model."""
from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.service import calibrated_targets_for, save_calibration


def test_targets_round_trip_per_gpu_model_and_are_replaced(sessions: sessionmaker[Session]) -> None:
    with session_scope(sessions) as session:
        save_calibration(session, "hw4", "NVIDIA H200", {"1.1": 3.6, "2.1": 10.0}, 0.9, {"note": "first"})
    with session_scope(sessions) as session:
        assert calibrated_targets_for(session, "hw4", "NVIDIA H200") == {"1.1": 3.6, "2.1": 10.0}
        assert calibrated_targets_for(session, "hw4", "NVIDIA A100-SXM4-80GB") is None
        assert calibrated_targets_for(session, "hw4", None) is None
    with session_scope(sessions) as session:
        save_calibration(session, "hw4", "NVIDIA H200", {"1.1": 4.0}, 0.9, {"note": "again"})
    with session_scope(sessions) as session:
        assert calibrated_targets_for(session, "hw4", "NVIDIA H200") == {"1.1": 4.0}
