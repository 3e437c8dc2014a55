"""The timing protocol of every timed problem, whatever an assignment times.

A timed problem compares variants (a fused op and its composition, a fused model and an
unfused one) in trials. The protocol, shared by every assignment's stage:
- warm-up: each variant's first runs are untimed; what they took sizes the timed requests
  (`calls_per_request`), so a request's round trip stays a small part of what is measured;
- interleaving: one trial times every variant once, side by side, in an order that rotates
  from trial to trial (`rotated`), so drift and warm caches fall on every variant alike;
- verification: timed results are checked where the submission cannot foresee which
  (`verified_indices`: not the grading seed, which a reproduction may fix);
- stopping: trials go on until `StoppingRule.verdict` says why to stop; `until_stopped` is
  the one loop every timed problem runs its trials in.
The statistics the rule reads (median ratio, bootstrap interval) are worker.timing's.

Pure standard library (plus worker.timing): importable on a bare GPU machine.
"""
from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from worker.timing import RatioSummary, needs_more_trials

T = TypeVar("T")

# Why a problem's trials stopped, as its telemetry records it.
STOP_REASONS = ("settled", "max_trials", "budget")


@dataclass(frozen=True)
class StoppingRule:
    """When a problem has measured enough.

    At least `min_trials` and at most `max_trials`; in between, stop once the scored figure is
    settled (its interval holds none of the `thresholds` where points change and is at most
    `max_relative_width` x the figure wide), or when the next trial would end past `budget_s`.
    """

    min_trials: int
    max_trials: int
    max_relative_width: float
    thresholds: tuple[float, ...] = ()
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_trials <= self.max_trials:
            raise ValueError(f"need 1 <= min_trials <= max_trials, got {self.min_trials} and {self.max_trials}")

    def verdict(self, trials: int, summary: RatioSummary | None, elapsed_s: float = 0.0,
                next_trial_s: float = 0.0) -> str | None:
        """Why to stop after `trials` trials (one of STOP_REASONS), or None to take more.
        `summary`: the scored figure so far (None: none yet); `elapsed_s` and `next_trial_s`:
        the time spent and what one more trial is expected to take, for the budget."""
        if trials >= self.max_trials:
            return "max_trials"
        if trials < self.min_trials:
            return None
        if summary is not None and not needs_more_trials(summary, self.thresholds, self.max_relative_width):
            return "settled"
        if self.budget_s is not None and elapsed_s + next_trial_s > self.budget_s:
            return "budget"
        return None


@dataclass(frozen=True)
class Progress:
    """Where a problem's trials stand after a step: how many trials each variant has had, the
    scored figure so far (None: none yet), the seconds spent, and what one more step is
    expected to take (the last two only for a rule with a budget)."""

    trials: int
    summary: RatioSummary | None
    elapsed_s: float = 0.0
    next_trial_s: float = 0.0


def until_stopped(rule: StoppingRule, step: Callable[[], Progress]) -> tuple[str, Progress]:
    """Take `step` (a trial, or a round of them) until `rule` says why to stop: that reason
    (one of STOP_REASONS) and the last step's progress."""
    while True:
        progress = step()
        stop = rule.verdict(progress.trials, progress.summary, progress.elapsed_s, progress.next_trial_s)
        if stop is not None:
            return stop, progress


def rotated(variants: Sequence[T], trial: int) -> list[T]:
    """The order of `variants` in trial number `trial`: trial i starts with variant i mod n."""
    if not variants:
        return []
    turn = trial % len(variants)
    return [*variants[turn:], *variants[:turn]]


def calls_per_request(warm_ms: float, request_ms: float, max_calls: int) -> int:
    """How many computations one timed request runs, so that it lasts about `request_ms`
    (at least one, at most `max_calls`), from what one took in the last warm-up."""
    return max(1, min(max_calls, math.ceil(request_ms / max(warm_ms, 1e-3))))


_UNPREDICTABLE = secrets.SystemRandom()


def verified_indices(results: int, count: int, everything: bool = False) -> list[int]:
    """Which of `results` timed results the parent verifies: all of them when `everything`
    (a shape's first trial) or when there are no more than `count`, else `count` drawn at random."""
    if everything or count >= results:
        return list(range(results))
    return sorted(_UNPREDICTABLE.sample(range(results), count))
