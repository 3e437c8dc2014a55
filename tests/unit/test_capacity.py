"""The capacity model's queue simulation against cases whose answers are known: worked by hand
(one worker, deterministic arrivals and grades; fair share), in closed form (M/M/1), without
bound (a load above 1), and ordered (more workers never wait longer)."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from grader.capacity import HOUR, Course, Job, Planner, Shape, queue_eta, service_estimate, simulate
from worker.assignment import StageConfig, StageProgress, assignment_of
from worker.rubric import load_rubric
from worker.sandbox import SandboxLimits, SandboxPolicy

STANDIN = Path(__file__).resolve().parents[2] / "bench" / "capacity_standin"


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
    planner = Planner(Course(150, 3, Shape.default(6 * HOUR)), [120.0, 180.0, 240.0], replications=5)
    waits = [planner.waits(n) for n in range(1, 12)]  # with fair share: the summaries
    for fewer, more in zip(waits, waits[1:]):
        assert more.wait_p50 <= fewer.wait_p50 + 1e-9 and more.wait_p95 <= fewer.wait_p95 + 1e-9


def test_workers_for_a_target_is_the_fewest_that_meet_it() -> None:
    # Ten uploads within a second, 100 s grades: only ten workers take all at once.
    planner = Planner(Course(10, 1, Shape((1.0,), 1.0)), [100.0], replications=1)
    assert planner.workers_for(1.0).workers == 10  # type: ignore[union-attr]
    busier = Planner(Course(200, 2, Shape.default(8 * HOUR)), [150.0, 200.0], seed=5, replications=4)
    for target in (60.0, 600.0, 3600.0):
        found = busier.workers_for(target)
        assert found is not None and found.wait_p95 <= target
        assert found.workers == 1 or busier.waits(found.workers - 1).wait_p95 > target
        assert found.workers == next(n for n in range(1, 200) if busier.waits(n).wait_p95 <= target)


def test_a_target_below_waiting_for_ones_own_runs_is_unreachable() -> None:
    # One student uploads three times within a second: the third waits for two grades whatever the workers.
    planner = Planner(Course(1, 3, Shape((1.0,), 1.0)), [100.0], replications=2)
    assert planner.workers_for(10.0) is None
    assert planner.floor().wait_p95 > 100


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
