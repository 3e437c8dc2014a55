"""Statistics of interleaved paired timing trials: median speedup with a bootstrap interval.

A trial is one baseline run and one custom run measured side by side (ABAB...), so the two
times of trial i share whatever the machine was doing at that moment (clock, temperature,
neighbours). The bootstrap therefore resamples whole pairs, never the two columns apart.

Pure standard library + numpy: the GPU suite imports this on a bare machine.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# A composition may use up to this much less of its CPU time than the fused op before its
# waiting is taken out (honest ones differ by a few percent: both spin in cudaMemcpy).
IDLE_SLACK = 0.15
# A fused op's read may cost this much more than the composition's (noise) before the excess
# counts as deferred work: x the composition's read, plus a fixed allowance per computation.
READ_SLACK = 1.25
READ_ALLOWANCE_MS = 0.01


@dataclass(frozen=True)
class RatioSummary:
    """speedup = median(baseline) / median(custom), with a bootstrap percentile interval."""

    median_baseline_ms: float
    median_custom_ms: float
    speedup: float
    low: float
    high: float
    trials: int

    @property
    def relative_width(self) -> float:
        """Interval width as a fraction of the speedup."""
        return (self.high - self.low) / self.speedup if self.speedup > 0 else math.inf

    def describe(self) -> str:
        """`4.1x [3.9, 4.3]`: the form students see."""
        return f"{self.speedup:.3g}x [{self.low:.3g}, {self.high:.3g}]"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RatioSummary:
        return cls(
            median_baseline_ms=float(data["median_baseline_ms"]),
            median_custom_ms=float(data["median_custom_ms"]),
            speedup=float(data["speedup"]),
            low=float(data["low"]),
            high=float(data["high"]),
            trials=int(data["trials"]),
        )


def _as_times(name: str, values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: need a non-empty 1-D sequence of times")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name}: every time must be finite and > 0")
    return arr


def ratio_summary(
    baseline_ms: Sequence[float],
    custom_ms: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioSummary:
    """Median ratio of paired trials and its bootstrap percentile interval (pairs resampled).

    Deterministic for a given seed. With a single trial the interval is the point itself.
    """
    base = _as_times("baseline_ms", baseline_ms)
    cust = _as_times("custom_ms", custom_ms)
    if base.size != cust.size:
        raise ValueError(f"paired trials: {base.size} baseline times vs {cust.size} custom times")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")

    med_b = float(np.median(base))
    med_c = float(np.median(cust))
    speedup = med_b / med_c
    n = base.size
    if n == 1:
        return RatioSummary(med_b, med_c, speedup, speedup, speedup, 1)

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    ratios = np.median(base[idx], axis=1) / np.median(cust[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    # The point estimate always lies inside its own interval, even for tiny, lumpy samples.
    return RatioSummary(med_b, med_c, speedup, min(float(low), speedup), max(float(high), speedup), n)


def mean_over_shapes(summaries: Sequence[RatioSummary]) -> RatioSummary:
    """One figure for a problem timed on several shapes, as the course reports it: the mean
    of the per-shape speedups. The interval is the mean of the per-shape bounds (each shape's
    trials are independent of the others', so this is wider than the mean's own interval:
    conservative), the times are means, and `trials` the fewest of any shape."""
    if not summaries:
        raise ValueError("mean over no shapes")
    n = len(summaries)
    return RatioSummary(
        median_baseline_ms=sum(s.median_baseline_ms for s in summaries) / n,
        median_custom_ms=sum(s.median_custom_ms for s in summaries) / n,
        speedup=sum(s.speedup for s in summaries) / n,
        low=sum(s.low for s in summaries) / n,
        high=sum(s.high for s in summaries) / n,
        trials=min(s.trials for s in summaries),
    )


def needs_more_trials(summary: RatioSummary, thresholds: Sequence[float], max_relative_width: float) -> bool:
    """True when the grader should measure again (it does so up to a cap).

    Either the interval straddles a scoring threshold (the score could fall on either side
    of it), or it is wider than `max_relative_width` x speedup. An interval wholly at or past
    the highest threshold, or wholly at or below the lowest, has settled the points (all of
    them, or none): its width no longer matters, and more trials would only cost GPU time.
    """
    if any(summary.low < t < summary.high for t in thresholds):
        return True
    if thresholds and (summary.low >= max(thresholds) or summary.high <= min(thresholds)):
        return False
    return summary.high - summary.low > max_relative_width * summary.speedup


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, max, max/min) of repeated measurements; max/min is inf when min <= 0."""
    arr = [float(v) for v in values]
    if not arr:
        raise ValueError("spread of no values")
    lo, hi = min(arr), max(arr)
    return lo, hi, (hi / lo if lo > 0 else math.inf)


def waited_beyond_slack(baseline_cpu: float | None, custom_cpu: float | None) -> bool:
    """Whether a composition spent more of its time off the CPU than the fused op, beyond
    IDLE_SLACK (CPU shares of wall time; unknown shares never count)."""
    return bool(baseline_cpu is not None and custom_cpu and baseline_cpu * (1.0 + IDLE_SLACK) < custom_cpu)


def waiting_removed(baseline_ms: float, baseline_cpu: float | None, custom_cpu: float | None) -> float:
    """The composition's time without its waiting off the CPU, when it waited beyond the
    slack: its CPU time scaled by the fused op's CPU share. An honest composition (within the
    slack) keeps its time. What a sleep still costs in CPU (waking up: tens of microseconds)
    stays counted."""
    if not waited_beyond_slack(baseline_cpu, custom_cpu):
        return baseline_ms
    return baseline_ms * baseline_cpu / custom_cpu  # type: ignore[operator]


def deferred_excess(custom_read_ms: float, baseline_read_ms: float) -> float:
    """What the fused op's read costs beyond the composition's read of the same results."""
    return max(0.0, custom_read_ms - READ_SLACK * baseline_read_ms - READ_ALLOWANCE_MS)
