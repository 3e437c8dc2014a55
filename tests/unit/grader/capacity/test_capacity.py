"""The capacity model's queue simulations against cases whose answers are known: worked by hand
(one worker, deterministic arrivals and grades; fair share; the two-piece schedule's checks
shared and timing alone, and a run superseded before its timing), in closed form (M/M/1),
without bound (a load above 1), and ordered (more GPUs never wait longer; sharing the checks
never makes a verdict wait longer than today's schedule)."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from grader.capacity.model import (
    HOUR,
    Course,
    Job,
    Planner,
    Schedule,
    Shape,
    queue_eta,
    service_estimate,
    simulate,
    split_queue_eta,
)
from grader.capacity.split import SplitOutcome, simulate_split
from worker.assignment import StageConfig, StageProgress, assignment_of
from worker.rubric import load_rubric
from worker.sandbox import SandboxLimits, SandboxPolicy

STANDIN = Path(__file__).resolve().parents[4] / "bench" / "capacity_standin"


def jobs_at(arrivals: list[float], service: float, students: list[int] | None = None) -> list[Job]:
    return [Job(a, students[i] if students else i, service) for i, a in enumerate(arrivals)]


def test_one_worker_deterministic_arrivals_and_grades() -> None:
    spaced = simulate(jobs_at([0, 10, 20, 30], 4.0))  # each grade ends before the next upload
    assert list(spaced.waits) == [0, 0, 0, 0] and list(spaced.results) == [4, 4, 4, 4]
    burst = simulate(jobs_at([0, 0, 0], 10.0))  # three at once: one after another
    assert list(burst.waits) == [0, 10, 20] and list(burst.results) == [10, 20, 30]
    late = simulate(jobs_at([5, 6], 10.0))  # the second waits for the first's end (15 s)
    assert list(late.starts) == [5, 15] and list(late.waits) == [0, 9]


def test_several_workers_share_a_burst() -> None:
    out = simulate(jobs_at([0, 0, 0, 0, 0], 10.0), workers=2)
    assert list(out.starts) == [0, 0, 10, 10, 20]
    busy = simulate(jobs_at([0, 0], 10.0), workers=2, busy_for=[3.0])  # one worker free at 3 s
    assert list(busy.starts) == [0, 3]


def test_load_above_one_grows_without_bound() -> None:
    # One upload a second, two seconds a grade: the k-th upload (from 0) waits exactly k seconds.
    for n in (100, 200, 400):
        out = simulate(jobs_at([float(k) for k in range(n)], 2.0))
        assert np.array_equal(out.waits, np.arange(n, dtype=float))
    # A course at load > 1 on its peak: the p95 wait grows with its size, with no plateau.
    shape = Shape((1.0,), HOUR)
    p95 = [Planner(Course(n, 1, shape), [60.0], replications=3).waits(1).wait_p95 for n in (120, 240, 480)]
    assert p95[0] > 1000 and p95[1] > 1.8 * p95[0] and p95[2] > 1.8 * p95[1]


def test_mm1_waits_match_the_closed_form() -> None:
    # Poisson uploads at 0.5/s, exponential grades of mean 1 s: P(wait > t) = rho exp(-(mu - lambda) t),
    # so the mean wait is rho / (mu - lambda) = 1 s and the p95 ln(rho / 0.05) / (mu - lambda) = 4.61 s.
    rng = np.random.default_rng(7)
    n = 200_000
    arrivals = np.cumsum(rng.exponential(2.0, n))
    out = simulate([Job(float(a), i, float(s)) for i, (a, s) in enumerate(zip(arrivals, rng.exponential(1.0, n)))])
    assert out.waits.mean() == pytest.approx(1.0, rel=0.05)
    assert np.percentile(out.waits, 95) == pytest.approx(math.log(0.5 / 0.05) / 0.5, rel=0.05)


def test_fair_share_sends_a_students_next_run_when_the_last_ends() -> None:
    # Student 0 uploads three at once, student 1 one a second later; one worker, 10 s a grade.
    jobs = jobs_at([0, 0, 0, 1], 10.0, students=[0, 0, 0, 1])
    shared = simulate(jobs)
    assert list(shared.starts) == [0, 20, 30, 10]  # student 1 goes second, ahead of 0's next two
    assert list(simulate(jobs, fair_share=False).starts) == [0, 10, 20, 30]


def test_more_workers_never_wait_longer() -> None:
    rng = np.random.default_rng(3)
    jobs = [Job(float(a), i, float(s)) for i, (a, s) in
            enumerate(zip(np.sort(rng.uniform(0, 3600, 400)), rng.uniform(100, 250, 400)))]
    previous = None
    for workers in range(1, 12):  # without fair share: every single run starts no later
        starts = simulate(jobs, workers, fair_share=False).starts
        assert previous is None or np.all(starts <= previous + 1e-9)
        previous = starts
    planner = Planner(Course(150, 3, Shape.default(6 * HOUR)), [120.0, 180.0, 240.0], replications=5,
                      timing_seconds=[60.0, 80.0, 120.0])
    for schedule in Schedule:  # with fair share: the summaries
        figures = [planner.figures(schedule, n) for n in range(1, 12)]
        for fewer, more in zip(figures, figures[1:]):
            assert more.verdict.p50 <= fewer.verdict.p50 + 1e-9 and more.verdict.p95 <= fewer.verdict.p95 + 1e-9
    waits = [planner.waits(n) for n in range(1, 12)]  # today's wait to the grade's start
    for fewer_w, more_w in zip(waits, waits[1:]):
        assert more_w.wait_p50 <= fewer_w.wait_p50 + 1e-9 and more_w.wait_p95 <= fewer_w.wait_p95 + 1e-9


def test_gpus_for_a_target_are_the_fewest_that_meet_it() -> None:
    # Ten uploads within a second, 100 s grades all checks: only ten GPUs give every verdict at 100 s
    # today; two slots per GPU need five.
    planner = Planner(Course(10, 1, Shape((1.0,), 1.0)), [100.0], replications=1)
    assert planner.fewest(Schedule.today, 101.0).gpus == 10  # type: ignore[union-attr]
    assert planner.fewest(Schedule.shared, 101.0).gpus == 5  # type: ignore[union-attr]
    busier = Planner(Course(200, 2, Shape.default(8 * HOUR)), [150.0, 200.0], seed=5, replications=4,
                     timing_seconds=[70.0, 90.0])
    for schedule in Schedule:
        for target in (240.0, 600.0, 3600.0):
            found = busier.fewest(schedule, target)
            assert found is not None and found.verdict.p95 <= target
            assert found.gpus == next(n for n in range(1, 200) if busier.figures(schedule, n).verdict.p95 <= target)


def test_a_target_below_waiting_for_ones_own_runs_is_unreachable() -> None:
    # One student uploads three times within a second: the third's verdict waits for two grades
    # today, for two runs' checks when shared, whatever the GPUs.
    planner = Planner(Course(1, 3, Shape((1.0,), 1.0)), [100.0], replications=2, timing_seconds=[40.0])
    assert planner.fewest(Schedule.today, 10.0) is None and planner.fewest(Schedule.shared, 10.0) is None
    assert planner.floor(Schedule.today).verdict.p95 > 200
    assert 150 < planner.floor(Schedule.shared).verdict.p95 < 200


def test_two_runs_checks_share_a_gpu_then_each_is_timed_alone() -> None:
    # One GPU, two check slots. Run a (student 0) at 0 s: 10 s of checks, 5 of timing; run b
    # (student 1) at 2 s: 6 s of checks, 3 of timing. Both check at once: b's verdict at 8 s, a's
    # at 10 s. b's timing waits for a's checks (no timing beside a check): 10-13 s; then a's: 13-18 s.
    jobs = [Job(0.0, 0, 15.0, 5.0), Job(2.0, 1, 9.0, 3.0)]
    split = simulate_split(jobs, gpus=1, check_slots=2)
    assert list(split.check_starts) == [0, 2] and list(split.verdicts) == [10, 8]
    assert list(split.timing_starts) == [13, 10] and list(split.finals) == [18, 13]
    assert not split.superseded.any() and split.busy_s == 18
    # Today's schedule on the same uploads: a holds the GPU 0-15 s (verdict at 10), b 15-24 s (verdict at 21).
    today = simulate(jobs)
    assert list(today.verdicts) == [10, 21] and list(today.finishes) == [15, 24]
    # One slot: b's checks wait for a's (10-16 s); the timings follow in the order of the verdicts.
    one = simulate_split(jobs, gpus=1, check_slots=1)
    assert list(one.verdicts) == [10, 16] and list(one.timing_starts) == [16, 21] and list(one.finals) == [21, 24]


def test_a_students_next_upload_before_the_timing_starts_supersedes_it() -> None:
    # Student 0 uploads at 0 s and again at 5 s (each 10 s of checks, 20 of timing), one GPU of two
    # slots. Fair share: the second's checks start when the first's end (10 s) and keep the GPU
    # from timing until 20 s; by then the student has uploaded again, so the first is not timed
    # (final at its verdict, 10 s) and the second is timed 20-40 s.
    jobs = [Job(0.0, 0, 30.0, 20.0), Job(5.0, 0, 30.0, 20.0)]
    out = simulate_split(jobs, gpus=1, check_slots=2)
    assert list(out.superseded) == [True, False] and list(out.timing_gpus) == [-1, 0]
    assert list(out.verdicts) == [10, 20] and list(out.finals) == [10, 40] and out.timing_starts[1] == 20
    assert out.busy_s == 40  # against 60 s today: the superseded run's timing is saved
    # An upload after the timing started does not supersede it: the second comes at 12 s, when
    # the first's timing (10-30 s) holds the GPU, so its checks wait for it.
    later = simulate_split([Job(0.0, 0, 30.0, 20.0), Job(12.0, 0, 30.0, 20.0)], gpus=1, check_slots=2)
    assert not later.superseded.any() and list(later.finals) == [30, 60] and later.check_starts[1] == 30


def test_timings_share_their_set_up_and_take_turns_alone() -> None:
    # One GPU, two slots, three runs whose checks fail nothing and take no time: each timing
    # holds the GPU shared for 4 s (its children's start), then alone for 6 s. a's and b's
    # shared parts run together (0-4 s), then a alone 4-10 s, b alone 10-16 s; c's shared part
    # waits while b waits to be alone (no new reader before a waiting writer): 16-20 s, alone 20-26 s.
    jobs = [Job(0.0, i, 10.0, 10.0, 4.0) for i in range(3)]
    out = simulate_split(jobs, gpus=1, check_slots=2)
    assert list(out.timing_starts) == [0, 0, 16] and list(out.finals) == [10, 16, 26]
    assert out.busy_s == 26
    # Read as one exclusive block of 10 s each, the same timings end at 10, 20 and 30 s.
    whole = simulate_split([Job(0.0, i, 10.0, 10.0) for i in range(3)], gpus=1, check_slots=2)
    assert list(whole.finals) == [10, 20, 30]
    # A student's newer upload supersedes a run whose shared part had not started yet.
    again = simulate_split([*jobs, Job(0.0, 2, 10.0, 10.0, 4.0)], gpus=1, check_slots=2)
    assert list(again.superseded) == [False, False, True, False] and again.finals[2] == 0


def _intervals_never_overlap(out: SplitOutcome, gpus: int, slots: int) -> None:
    checks_end = out.verdicts
    for g in range(gpus):
        timed = [(out.timing_starts[i], out.finals[i]) for i in np.flatnonzero(out.timing_gpus == g)]
        checked = [(out.check_starts[i], checks_end[i]) for i in np.flatnonzero(out.check_gpus == g)]
        for t0, t1 in timed:  # no check, and no other timing, overlaps a timing window
            assert all(c1 <= t0 or c0 >= t1 for c0, c1 in checked if c1 > c0)
            assert all(u1 <= t0 or u0 >= t1 for u0, u1 in timed if (u0, u1) != (t0, t1))
        for c0, _ in checked:  # at most `slots` checks at once
            assert sum(s0 <= c0 < s1 for s0, s1 in checked) <= slots


def test_timing_never_overlaps_checks_on_a_gpu() -> None:
    for seed in range(5):
        rng = np.random.default_rng(seed)
        n = 300
        grades = rng.uniform(100, 250, n)
        jobs = [Job(float(a), int(s), float(g), float(g * t)) for a, s, g, t in
                zip(np.sort(rng.uniform(0, 2 * HOUR, n)), rng.integers(0, 80, n), grades, rng.uniform(0, 0.7, n))]
        for gpus, slots in ((1, 2), (3, 3)):
            out = simulate_split(jobs, gpus, slots)
            assert np.all(out.verdicts >= out.arrivals) and np.all(np.isfinite(out.finals))
            assert np.all(out.superseded == np.isnan(out.timing_starts))  # every run not superseded is timed
            _intervals_never_overlap(out, gpus, slots)


def test_sharing_the_checks_never_makes_the_verdict_wait_longer() -> None:
    # The same uploads under both schedules, over seeds, GPU counts and slots: the two-piece
    # schedule's verdict waits are no longer at p50, p95 or max.
    for seed in range(6):
        planner = Planner(Course(120, 4, Shape.default(6 * HOUR)), [150.0, 185.0, 210.0], seed=seed,
                          replications=2, timing_seconds=[70.0, 95.0, 110.0], check_slots=1 + seed % 3)
        for gpus in (1, 2, 4):
            today, split = planner.figures(Schedule.today, gpus), planner.figures(Schedule.shared, gpus)
            assert split.verdict.p50 <= today.verdict.p50 and split.verdict.p95 <= today.verdict.p95
            assert split.verdict.max <= today.verdict.max
            assert split.grades_per_gpu_hour >= today.grades_per_gpu_hour


def test_the_default_shape_puts_half_the_uploads_in_the_last_four_hours() -> None:
    shape = Shape.default()
    assert shape.window_s == 24 * HOUR and len(shape.weights) == 24
    assert shape.shares()[-4:].sum() == pytest.approx(0.5, abs=0.02)
    times = shape.sample(np.random.default_rng(1), 100_000)
    assert times.min() >= 0 and times.max() < 24 * HOUR
    assert np.mean(times >= 20 * HOUR) == pytest.approx(shape.shares()[-4:].sum(), abs=0.01)
    assert Shape((1.0, 3.0), HOUR).peak_share_per_hour() == pytest.approx(1.5)  # 3/4 in half an hour


def test_shapes_and_courses_refuse_what_they_cannot_mean() -> None:
    assert Shape.parse("1, 2,4", HOUR).weights == (1.0, 2.0, 4.0)
    for bad in ("1,x", "", "0,0", "-1,2"):
        with pytest.raises(ValueError, match="shape"):
            Shape.parse(bad, HOUR)
    with pytest.raises(ValueError, match="window"):
        Shape((1.0,), 0)
    with pytest.raises(ValueError, match="student"):
        Course(0, 5, Shape.default())
    with pytest.raises(ValueError, match="grade times"):
        Planner(Course(1, 1, Shape.default()), [])
    with pytest.raises(ValueError, match="timing"):
        Planner(Course(1, 1, Shape.default()), [60.0], timing_seconds=[61.0])
    with pytest.raises(ValueError, match="shared part"):
        Planner(Course(1, 1, Shape.default()), [60.0], timing_seconds=[30.0], timing_shared=[31.0])
    with pytest.raises(ValueError, match="check slot"):
        simulate_split([], gpus=1, check_slots=0)


def test_the_measured_shared_part_of_a_timing_reaches_the_simulated_jobs() -> None:
    jobs = Planner(Course(30, 2, Shape.default()), [100.0, 200.0], replications=1, timing_seconds=[40.0, 90.0],
                   timing_shared=[10.0, 25.0]).deadlines[0]
    assert {(j.service, j.timing, j.timing_shared) for j in jobs} == {(100, 40, 10), (200, 90, 25)}


def test_the_split_eta_counts_a_timings_shared_set_up_as_shared() -> None:
    # The worked case of test_timings_share_their_set_up_and_take_turns_alone, as the run page
    # asks it: two queued runs, no checks, each timing 4 s shared then 6 s alone, on two slots.
    assert split_queue_eta(2, [], 0, 0.0, 10.0, 2, timing_shared_s=4.0) == (0, 16)
    assert split_queue_eta(2, [], 0, 0.0, 10.0, 2) == (0, 20)  # read as one exclusive block


def test_fractional_uploads_per_student() -> None:
    jobs = Planner(Course(2000, 1.5, Shape.default()), [60.0], replications=1).deadlines[0]
    assert len(jobs) == pytest.approx(3000, rel=0.05)
    per_student = np.bincount([j.student for j in jobs])
    assert set(per_student) == {1, 2}


def test_queue_eta_is_the_simulation_of_the_queue_now() -> None:
    assert queue_eta(1, [], 100.0) == 100  # nothing running: starts now
    assert queue_eta(3, [], 100.0) == 300  # one worker assumed: one at a time
    assert queue_eta(1, [50.0], 100.0) == 150  # after the current run's last 50 s
    assert queue_eta(5, [50.0, 50.0], 100.0) == 350  # four ahead shared by two workers
    assert queue_eta(2, [10.0, 90.0], 100.0) == 190  # the first ahead takes the worker free at 10 s
    assert service_estimate([60.0, 120.0, 600.0]) == 120


def test_the_benchs_stand_in_grade_holds_its_worker_for_the_uploads_seconds(tmp_path: Path) -> None:
    # bench/capacity_check.py's assignment: a valid rubric and plug-in whose grade sleeps and passes
    rubric = load_rubric("capacity-standin", search=[STANDIN])
    assert rubric.kernels == () and [p.id for p in rubric.problems] == ["1"]
    config = StageConfig(SandboxLimits(wall_s=60, cpu_s=60, memory_bytes=1 << 30, max_processes=8,
                                       file_size_bytes=1 << 20), SandboxPolicy(user=None))
    make_stage = assignment_of(rubric).make_stage
    assert make_stage is not None
    stage = make_stage(config, StageProgress())
    (tmp_path / "grade_seconds.txt").write_text("0.3\n")
    started = time.monotonic()
    [measured] = stage(rubric, tmp_path, tmp_path, tmp_path, ("1",))
    assert time.monotonic() - started >= 0.3 and measured.status == "ok" and all(c.ok for c in measured.cases)
