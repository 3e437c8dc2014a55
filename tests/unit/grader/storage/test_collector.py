"""The collector's pure decisions (grader/storage/collector.py): which job folders are an attempt's,
when an attempt is over, when a file is old enough to go."""
from __future__ import annotations

import pytest

from grader.models import RunState
from grader.storage.collector import attempt_is_over, is_old, job_folder_attempt


@pytest.mark.parametrize(("name", "parsed"), [
    ("run-12-attempt-3", (12, 3)),
    ("run-1-attempt-1", (1, 1)),
    ("run-12-attempt-3.tmp", None),
    ("run-x-attempt-1", None),
    ("run-1-attempt-1\n", None),
    ("scratch", None),
])
def test_job_folder_names(name: str, parsed: tuple[int, int] | None) -> None:
    assert job_folder_attempt(name) == parsed


@pytest.mark.parametrize(("state", "current", "attempt", "over"), [
    (RunState.scored, 1, 1, True),  # final: every folder of it
    (RunState.failed, 3, 3, True),
    (RunState.built, 1, 1, True),
    (None, 0, 1, True),  # no such run
    (RunState.running, 2, 1, True),  # a killed worker's earlier attempt
    (RunState.queued, 2, 1, True),
    (RunState.running, 2, 2, False),  # the attempt in progress
    (RunState.building, 1, 1, False),
    (RunState.queued, 1, 1, False),  # released for a retry: the next claim makes attempt 2
])
def test_attempt_is_over(state: RunState | None, current: int, attempt: int, over: bool) -> None:
    assert attempt_is_over(state, current, attempt) is over


def test_is_old_is_strictly_past_the_age() -> None:
    assert is_old(mtime=0.0, now=601.0, max_age_s=600.0)
    assert not is_old(mtime=0.0, now=600.0, max_age_s=600.0)
    assert not is_old(mtime=100.0, now=50.0, max_age_s=10.0)  # a clock that stepped back keeps the file
