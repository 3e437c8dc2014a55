"""The timing protocol every timed problem follows (worker.trials): when trials stop, the
order variants run in, how long a request is, which timed results are verified."""
from __future__ import annotations

import pytest

from worker.timing import RatioSummary
from worker.trials import Progress, StoppingRule, calls_per_request, rotated, until_stopped, verified_indices


def figure(speedup: float, low: float, high: float, trials: int = 6) -> RatioSummary:
    return RatioSummary(1.0, 1.0 / speedup, speedup, low, high, trials)


SETTLED = figure(4.0, 3.9, 4.1)  # 5% wide, clear of 1.0 and 6.5


def test_never_fewer_than_min_trials_nor_more_than_max() -> None:
    rule = StoppingRule(min_trials=6, max_trials=16, max_relative_width=0.10, thresholds=(1.0, 6.5))
    assert rule.verdict(5, SETTLED) is None
    assert rule.verdict(6, SETTLED) == "settled"
    unsettled = figure(6.4, 6.0, 6.8)  # the target inside the interval
    assert rule.verdict(15, unsettled) is None
    assert rule.verdict(16, unsettled) == "max_trials"
    assert rule.verdict(18, SETTLED) == "max_trials"


def test_a_threshold_inside_the_interval_or_a_wide_interval_keeps_measuring() -> None:
    rule = StoppingRule(min_trials=3, max_trials=12, max_relative_width=0.10, thresholds=(1.0, 2.0))
    assert rule.verdict(3, figure(1.98, 1.9, 2.05)) is None  # 2.0 inside
    assert rule.verdict(3, figure(1.5, 1.3, 1.7)) is None  # 27% wide, between floor and target
    assert rule.verdict(3, figure(1.5, 1.45, 1.55)) == "settled"
    assert rule.verdict(3, None) is None  # no figure yet


def test_an_interval_past_every_threshold_has_settled_the_points_however_wide() -> None:
    rule = StoppingRule(min_trials=3, max_trials=12, max_relative_width=0.10, thresholds=(1.0, 1.1))
    assert rule.verdict(3, figure(1.5, 1.3, 1.7)) == "settled"  # all speed points, 27% wide
    assert rule.verdict(3, figure(0.7, 0.5, 0.95)) == "settled"  # none of them
    assert rule.verdict(3, figure(1.3, 1.1, 1.5)) == "settled"  # at the target is past it
    assert rule.verdict(3, figure(1.2, 1.05, 1.4)) is None  # the target inside
    assert rule.verdict(2, figure(1.5, 1.3, 1.7)) is None  # still min_trials first
    no_thresholds = StoppingRule(min_trials=3, max_trials=12, max_relative_width=0.10)
    assert no_thresholds.verdict(3, figure(1.5, 1.3, 1.7)) is None  # only the width decides


def test_the_budget_stops_only_after_min_trials() -> None:
    rule = StoppingRule(min_trials=3, max_trials=12, max_relative_width=0.10, thresholds=(1.0, 2.0), budget_s=180.0)
    wide = figure(1.5, 1.3, 1.7)
    assert rule.verdict(2, wide, elapsed_s=400.0, next_trial_s=40.0) is None
    assert rule.verdict(3, wide, elapsed_s=150.0, next_trial_s=40.0) == "budget"
    assert rule.verdict(3, wide, elapsed_s=130.0, next_trial_s=40.0) is None
    assert rule.verdict(3, SETTLED, elapsed_s=400.0, next_trial_s=40.0) == "settled"


def test_a_rule_needs_a_sensible_range() -> None:
    with pytest.raises(ValueError, match="min_trials"):
        StoppingRule(min_trials=8, max_trials=4, max_relative_width=0.1)
    with pytest.raises(ValueError, match="min_trials"):
        StoppingRule(min_trials=0, max_trials=4, max_relative_width=0.1)


def test_the_loop_steps_until_the_rule_stops_and_says_why() -> None:
    """until_stopped takes steps while the rule wants more: here the figure settles on the
    fourth step, then the budget (elapsed plus the next step's expected seconds) ends another."""
    rule = StoppingRule(min_trials=2, max_trials=10, max_relative_width=0.10, thresholds=(1.0, 6.5), budget_s=10.0)
    figures = [None, figure(6.4, 6.0, 6.8), figure(6.4, 6.0, 6.8), SETTLED, SETTLED]
    steps: list[int] = []

    def step() -> Progress:
        steps.append(len(steps) + 1)
        return Progress(len(steps), figures[len(steps) - 1], elapsed_s=float(len(steps)), next_trial_s=1.0)

    stop, last = until_stopped(rule, step)
    assert (stop, steps, last.trials, last.summary) == ("settled", [1, 2, 3, 4], 4, SETTLED)
    steps.clear()
    slow = lambda: (steps.append(1), Progress(len(steps), None, elapsed_s=3.0 * len(steps), next_trial_s=3.0))[1]  # noqa: E731
    assert until_stopped(rule, slow)[0] == "budget" and len(steps) == 3  # 9 s + 3 s is past 10 s


def test_each_variant_goes_first_in_turn() -> None:
    variants = ["custom", "baseline", "reference_ops"]
    assert [rotated(variants, t)[0] for t in range(6)] == variants * 2
    assert rotated(variants, 1) == ["baseline", "reference_ops", "custom"]
    assert all(sorted(rotated(variants, t)) == sorted(variants) for t in range(5))
    assert rotated(("unfused", "fused"), 1) == ["fused", "unfused"]
    assert rotated([], 3) == []


def test_a_request_lasts_about_the_requested_time() -> None:
    assert calls_per_request(0.5, 10.0, 32) == 20
    assert calls_per_request(0.1, 10.0, 32) == 32  # capped
    assert calls_per_request(25.0, 10.0, 32) == 1  # a slow computation: one per request
    assert calls_per_request(0.0, 10.0, 32) == 32  # an instant warm-up never divides by zero


def test_the_first_trial_verifies_every_result() -> None:
    assert verified_indices(7, 2, everything=True) == list(range(7))


def test_later_trials_verify_distinct_results_that_vary_between_requests() -> None:
    draws = [verified_indices(7, 2) for _ in range(400)]
    assert all(len(d) == 2 and len(set(d)) == 2 and all(0 <= i < 7 for i in d) for d in draws)
    # Not a fixed choice a submission could learn: every position gets checked sometimes.
    assert {i for d in draws for i in d} == set(range(7))
    assert len({tuple(d) for d in draws}) > 10


def test_small_requests_are_verified_whole() -> None:
    assert verified_indices(2, 2) == [0, 1]
    assert verified_indices(1, 2) == [0]
