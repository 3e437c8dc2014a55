"""Which timed results the parent verifies: all of the first request, then a random few."""
from __future__ import annotations

from worker.hw4.speed import verified_indices


def test_the_first_trial_verifies_every_result() -> None:
    assert verified_indices(7, 2, first_trial=True) == list(range(7))


def test_later_trials_verify_distinct_results_that_vary_between_requests() -> None:
    draws = [verified_indices(7, 2, first_trial=False) for _ in range(400)]
    assert all(len(d) == 2 and len(set(d)) == 2 and all(0 <= i < 7 for i in d) for d in draws)
    # Not a fixed choice a submission could learn: every position gets checked sometimes.
    assert {i for d in draws for i in d} == set(range(7))
    assert len({tuple(d) for d in draws}) > 10


def test_small_requests_are_verified_whole() -> None:
    assert verified_indices(2, 2, first_trial=False) == [0, 1]
    assert verified_indices(1, 2, first_trial=False) == [0]
