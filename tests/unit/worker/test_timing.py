"""worker.timing: median ratio of paired trials, its bootstrap interval, re-measure logic."""
from __future__ import annotations

import math

import numpy as np
import pytest

from worker.timing import (
    READ_ALLOWANCE_MS,
    READ_SLACK,
    RatioSummary,
    deferred_excess,
    mean_over_shapes,
    needs_more_trials,
    ratio_summary,
    spread,
    waiting_removed,
)


def lognormal_pairs(seed: int, n: int, truth: float, sigma: float = 0.1, shared: float = 0.05):
    """Paired trials: each pair shares a machine-state factor, each run has its own noise."""
    rng = np.random.default_rng(seed)
    common = rng.normal(0.0, shared, n)
    custom = 1.0 * np.exp(common + rng.normal(0.0, sigma, n))
    baseline = truth * np.exp(common + rng.normal(0.0, sigma, n))
    return baseline, custom


def test_known_data_gives_known_median_ratio():
    s = ratio_summary([10.0, 12.0, 11.0, 9.0, 50.0], [2.0, 2.2, 1.8, 2.0, 2.1])
    assert s.median_baseline_ms == 11.0
    assert s.median_custom_ms == 2.0
    assert s.speedup == pytest.approx(5.5)
    assert s.trials == 5
    assert s.low <= s.speedup <= s.high


def test_constant_data_has_zero_width_interval():
    s = ratio_summary([4.0] * 10, [1.0] * 10)
    assert (s.speedup, s.low, s.high) == (4.0, 4.0, 4.0)


def test_single_trial_interval_is_the_point():
    s = ratio_summary([3.0], [1.5])
    assert (s.speedup, s.low, s.high, s.trials) == (2.0, 2.0, 2.0, 1)


def test_deterministic_for_a_seed_and_seed_matters():
    b, c = lognormal_pairs(1, 30, 4.0)
    assert ratio_summary(b, c, seed=7) == ratio_summary(b, c, seed=7)
    assert ratio_summary(b, c, seed=7) != ratio_summary(b, c, seed=8)


def test_interval_covers_truth_about_95_percent():
    truth = 4.0
    hits = 0
    for seed in range(200):
        b, c = lognormal_pairs(seed, 40, truth)
        s = ratio_summary(b, c, resamples=1000, seed=seed)
        hits += s.low <= truth <= s.high
    assert 0.88 * 200 <= hits <= 0.99 * 200, hits


def test_pairs_are_resampled_together():
    # A strong shared factor (clock drift across trials) cancels within a pair; resampling the
    # columns apart would give a far wider interval than resampling the pairs.
    rng = np.random.default_rng(3)
    drift = np.exp(rng.normal(0.0, 0.5, 50))
    b, c = 4.0 * drift, 1.0 * drift * np.exp(rng.normal(0.0, 0.01, 50))
    s = ratio_summary(b, c)
    assert s.high - s.low < 0.4
    assert s.low <= 4.0 * math.exp(0.03) and s.high >= 4.0 * math.exp(-0.03)


def test_more_trials_narrow_the_interval():
    widths = []
    for n in (10, 40, 160):
        w = [ratio_summary(*lognormal_pairs(s, n, 3.0), seed=s).relative_width for s in range(20)]
        widths.append(float(np.mean(w)))
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] < widths[0] / 2


@pytest.mark.parametrize(
    "baseline, custom",
    [([], []), ([1.0, 2.0], [1.0]), ([1.0, 0.0], [1.0, 1.0]), ([1.0, float("nan")], [1.0, 1.0]), ([1.0], [-1.0])],
)
def test_bad_input_is_rejected(baseline, custom):
    with pytest.raises(ValueError):
        ratio_summary(baseline, custom)


def test_straddling_and_width_logic():
    s = RatioSummary(4.0, 1.0, 4.0, 3.9, 4.1, 30)
    assert not needs_more_trials(s, [1.0, 6.5], 0.10)
    assert needs_more_trials(s, [1.0, 4.05], 0.10)  # the target lies inside the interval
    assert needs_more_trials(s, [3.95], 0.10)
    assert needs_more_trials(s, [1.0, 6.5], 0.04)  # 0.2 wide > 4% of 4.0
    assert not needs_more_trials(s, [], 0.06)
    # A threshold exactly on an end is not straddled.
    assert not needs_more_trials(s, [3.9, 4.1], 0.10)
    # Wholly past every threshold (or below every one), the points are settled however wide.
    assert not needs_more_trials(s, [1.0, 3.9], 0.04)
    assert not needs_more_trials(s, [4.1, 6.5], 0.04)
    assert needs_more_trials(s, [1.0, 4.05], 0.04)


def test_spread():
    assert spread([2.0, 3.0, 2.5]) == (2.0, 3.0, 1.5)
    assert spread([1.0]) == (1.0, 1.0, 1.0)
    assert spread([0.0, 1.0])[2] == math.inf
    with pytest.raises(ValueError):
        spread([])


def test_round_trip_and_describe():
    s = ratio_summary([4.1, 4.2, 4.0], [1.0, 1.0, 1.0])
    assert RatioSummary.from_dict(s.to_dict()) == s
    assert s.describe().startswith("4.1x [")


def test_mean_over_shapes_is_the_course_aggregate():
    a = RatioSummary(10.0, 1.0, 10.0, 9.0, 11.0, 12)
    b = RatioSummary(4.0, 1.0, 4.0, 3.0, 6.0, 8)
    m = mean_over_shapes([a, b])
    assert (m.speedup, m.low, m.high, m.trials) == (7.0, 6.0, 8.5, 8)
    assert (m.median_baseline_ms, m.median_custom_ms) == (7.0, 1.0)
    with pytest.raises(ValueError):
        mean_over_shapes([])


def test_waiting_off_the_cpu_is_removed_only_beyond_the_slack():
    # honest: the composition spins like the fused op (or within the slack): its time is kept
    assert waiting_removed(10.0, 0.99, 0.97) == 10.0
    assert waiting_removed(10.0, 0.90, 0.97) == 10.0
    assert waiting_removed(10.0, None, 0.97) == 10.0 and waiting_removed(10.0, 0.5, None) == 10.0
    # a sleeping one: its CPU time, scaled by the fused op's share
    assert waiting_removed(40.0, 0.25, 1.0) == pytest.approx(10.0)


def test_a_deferred_read_counts_beyond_the_compositions_read():
    assert deferred_excess(1.0, 1.0) == 0.0  # the same read as the composition's
    assert deferred_excess(1.2, 1.0) == 0.0  # within READ_SLACK
    assert deferred_excess(5.0, 1.0) == pytest.approx(5.0 - READ_SLACK - READ_ALLOWANCE_MS)
