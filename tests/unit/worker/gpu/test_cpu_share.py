"""The CPU time a timed request used, as the waiting guard reads it: a reading that did not grow
(a thread of the child ended during the call and took its time out of the sum) is unknown,
never a call spent entirely waiting."""
from __future__ import annotations

from worker.gpu.client import cpu_used
from worker.timing import waiting_removed


def test_cpu_used_between_two_readings() -> None:
    assert cpu_used(1.25, 1.75) == 0.5
    assert cpu_used(None, 1.0) is None and cpu_used(1.0, None) is None  # a backend that keeps none


def test_a_reading_that_did_not_grow_is_unknown() -> None:
    assert cpu_used(2.0, 2.0) is None
    assert cpu_used(2.0, 1.9) is None  # a thread ended during the call


def test_an_unknown_share_keeps_the_composition_time_where_zero_would_erase_it() -> None:
    # The fused op ran on the CPU 98% of its time; the composition's share unknown: its time stays.
    assert waiting_removed(0.2, None, 0.98) == 0.2
    # Had the lost reading been taken as 0 CPU seconds, the whole call would count as waiting.
    assert waiting_removed(0.2, 0.0, 0.98) == 0.0
    # A composition that really slept: its time is cut to its CPU share's worth.
    assert abs(waiting_removed(0.2, 0.49, 0.98) - 0.1) < 1e-12
