"""A small deadline rush (bench/rush_load.py) in CI: 60 uploads from 12 students in 10 s over
loopback to `grader serve`, PostgreSQL and Redis, the gradebook read meanwhile. Nothing may be
lost, and fair share holds: one run per student in the broker, the rest waiting behind it."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.rush_load import RushConfig, RushResult, run_rush, table

# Small enough for CI; bench/rush_load.py runs the 500-upload, 64-client version (docs/benchmarks/uploads.md).
CONFIG = RushConfig(uploads=60, students=12, burst=10, window_s=10, clients=6)


@pytest.fixture(scope="module")
def rush() -> RushResult:
    # In a thread of its own: earlier browser tests keep Playwright's event loop running in
    # this one, and the rush runs its clients with asyncio.run.
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(run_rush, CONFIG).result()
    print("\n" + table(result))
    return result


@pytest.mark.timeout(120)
def test_every_upload_is_stored_and_queued_once(rush: RushResult) -> None:
    assert rush.lost == [], rush.lost[:20]
    assert len(rush.accepted) == CONFIG.uploads
    assert len(rush.timings.status_ms) == CONFIG.uploads and rush.timings.gradebook_ms
    assert not rush.timings.failures, dict(rush.timings.failures)
    assert rush.seconds < CONFIG.window_s + 30


def test_latencies_stay_interactive(rush: RushResult) -> None:
    worst = max(rush.timings.upload_ms + rush.timings.status_ms)
    assert worst < 10_000, f"a request took {worst:.0f} ms under a small rush"


def test_one_run_per_student_in_flight(rush: RushResult) -> None:
    assert rush.in_flight_max == 1 and rush.burst_ahead <= 1
