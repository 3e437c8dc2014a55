"""`grader capacity`: what a deadline will cost a course in GPU workers, and how long its students
will wait with the workers it has (the model: grader/capacity.py). Registered by grader.cli."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Annotated

import numpy as np
import typer
from sqlalchemy.orm import Session

from grader.capacity import DOUBLING_H, HOUR, Course, Planner, Shape, Waits
from grader.course.assignment_settings import parse_duration
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import RunState
from grader.ops_cli import assignment_or_exit
from grader.reads.grade_times import grade_seconds, graded_gpu_models, stage_medians
from grader.settings import get_settings


def span(seconds: float) -> str:
    """A wait in words: `0 s`, `45 s`, `3.5 min`, `12 min`, `3.4 h`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    return f"{round(seconds / HOUR, 1):g} h"


def _seconds(text: str, what: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=what) from exc


def _pick_model(models: Sequence[str], asked: str | None, slug: str) -> str:
    """The GPU model whose runs to read: the one asked for (its name, or a part of it that names
    one model), else the only one with runs; else exit saying what to give."""
    if asked is not None:
        found = [m for m in models if m == asked] or [m for m in models if asked.lower() in m.lower()]
        if len(found) == 1:
            return found[0]
        known = ", ".join(models) or "none"
        _fail(f"no single GPU model with scored runs of {slug} matches “{asked}” (models with runs: {known}); "
              "give --grade-seconds for a model not graded here yet")
    if len(models) == 1:
        return models[0]
    if not models:
        _fail(f"the database holds no scored run of {slug} on a GPU yet: give the grade time measured elsewhere "
              "with --grade-seconds (repeat it for several runs' figures)")
    _fail(f"scored runs of {slug} come from several GPU models ({', '.join(models)}): choose one with --gpu-model")
    raise AssertionError  # unreachable: _fail exits


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(2)


def _measured(session: Session, slug: str, recent: int, asked: str | None) -> tuple[list[float], str]:
    assignment_id = assignment_or_exit(session, slug).id
    model = _pick_model(sorted(graded_gpu_models(session, recent, assignment_id)), asked, slug)
    scored = (RunState.scored,)
    seconds = grade_seconds(session, recent, assignment_id, model, scored)
    stages = stage_medians(session, recent, assignment_id, model, scored)
    where = ", ".join(f"{name} {value:.1f} s" for name, value in stages.items())
    return seconds, (f"{model}, the {len(seconds)} most recent scored runs of {slug} (claim to result)"
                     + (f"; stages, median: {where}" if where else ""))


def _row(waits: Waits, label: str, peak_load: float) -> str:
    return (f"| {waits.workers}{label} | {span(waits.wait_p50)} | {span(waits.wait_p95)} | "
            f"{span(waits.result_p50)} | {span(waits.result_p95)} | {peak_load / waits.workers:.2f} |")


def capacity(
    students: Annotated[int, typer.Option(help="students in the course")],
    per_student: Annotated[float, typer.Option(help="uploads per student before the deadline (e.g. 5, or 3.5)")] = 5,
    window: Annotated[str, typer.Option(help="the time before the deadline the uploads spread over, e.g. 24h")] = "24h",
    shape: Annotated[str | None, typer.Option(
        help="relative upload rates of equal slices of the window, oldest first, the last ending at the deadline, "
             f"e.g. 1,1,2,4 (default: hour slices, the rate doubling every {DOUBLING_H:g} h towards the deadline)")] = None,
    workers: Annotated[int, typer.Option(help="the GPU workers grading today (one per GPU)")] = 1,
    target: Annotated[str, typer.Option(help="the p95 wait to plan for (upload to the grade's start), e.g. 10m")] = "10m",
    assignment: Annotated[str | None, typer.Option(help="whose grade times to read (default: KG_RUBRICS' first)")] = None,
    gpu_model: Annotated[str | None, typer.Option(
        help="whose grade times to read, e.g. H200 (default: the only model with scored runs)")] = None,
    grade_seconds_: Annotated[list[float] | None, typer.Option(
        "--grade-seconds", help="a grade's time measured elsewhere, in seconds (repeat for several); "
                                "replaces the database's")] = None,
    recent: Annotated[int, typer.Option(help="how many recent scored runs to read")] = 200,
    replications: Annotated[int, typer.Option(help="deadlines simulated (more: steadier figures)")] = 20,
    seed: Annotated[int, typer.Option(help="the simulation's seed (the same figures for the same inputs)")] = 0,
) -> None:
    """How many GPU workers a course's deadline needs for a p95 wait, and the waits with today's
    workers: a seeded simulation of the grading queue (fair share included) on the measured grade
    times of recent scored runs."""
    window_s, target_s = _seconds(window, "--window"), _seconds(target, "--target")
    course = _course(students, per_student, shape, window_s)
    if workers < 1:
        raise typer.BadParameter("at least one worker", param_hint="--workers")
    times, source = _grade_times(grade_seconds_, assignment, recent, gpu_model)
    planner = Planner(course, times, seed, replications)
    peak_load = _echo_demand(course, shape, window_s, times, source)
    _echo_plan(planner, workers, target_s, peak_load)
    typer.echo(f"Wait: upload to the grade's start; result: upload to the grade. Simulated over {replications} "
               f"deadlines, seed {seed}; each grade's time drawn from the {len(times)} figure(s) above.")


def _course(students: int, per_student: float, shape: str | None, window_s: float) -> Course:
    try:
        return Course(students, per_student, Shape.parse(shape, window_s) if shape else Shape.default(window_s))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _grade_times(given: list[float] | None, assignment: str | None, recent: int,
                 gpu_model: str | None) -> tuple[list[float], str]:
    """The grade times to simulate and where they come from: --grade-seconds, else the database's."""
    if given:
        if any(not g > 0 for g in given):
            raise typer.BadParameter("grade times are seconds > 0", param_hint="--grade-seconds")
        return list(given), "given on the command line"
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        return _measured(session, assignment or settings.rubrics[0], recent, gpu_model)


def _echo_demand(course: Course, shape: str | None, window_s: float, times: list[float], source: str) -> float:
    """Print the course's uploads, the grade times and the work they make; return the peak load
    (GPUs' worth of grading arriving at the peak)."""
    mean = statistics.fmean(times)
    peak_per_hour = course.uploads * course.shape.peak_share_per_hour()
    peak_load = peak_per_hour * mean / HOUR
    shape_words = f"relative rates {shape}" if shape else f"the rate doubling every {DOUBLING_H:g} h towards it"
    typer.echo(f"Course: {course.students} students x {course.per_student:g} uploads = about {course.uploads:.0f} "
               f"grades in the {span(window_s)} before the deadline ({shape_words}); at the peak {peak_per_hour:.0f} "
               "uploads an hour.")
    typer.echo(f"Grade time: median {span(float(np.median(times)))}, p95 {span(float(np.percentile(times, 95)))}, "
               f"mean {mean:.0f} s ({source}).")
    typer.echo(f"Work: {course.uploads * mean / HOUR:.1f} GPU-hours; at the peak, {peak_load:.1f} GPUs' worth of "
               "grading arrives (a load above 1 per worker: the queue grows until the rate falls).")
    return peak_load


def _echo_plan(planner: Planner, workers: int, target_s: float, peak_load: float) -> None:
    """Print the waits with today's workers and with the fewest that meet the target, if other."""
    needed = planner.workers_for(target_s)
    rows = [_row(planner.waits(workers), " (today)", peak_load)]
    if needed is not None and needed.workers != workers:
        rows.append(_row(needed, f" (fewest for a p95 wait of {span(target_s)})", peak_load))
    typer.echo("\n| workers | wait p50 | wait p95 | result p50 | result p95 | peak load per worker |\n"
               "| --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows))
    if needed is None:
        floor = planner.floor()
        typer.echo(f"\nNo number of workers gives a p95 wait of {span(target_s)}: with one per upload it is still "
                   f"{span(floor.wait_p95)}, a student's next upload waiting for their previous run (fair share).")
    else:
        typer.echo(f"\nFor a p95 wait of at most {span(target_s)}: {needed.workers} GPU worker(s); today {workers}.")


def register(app: typer.Typer) -> None:
    app.command()(capacity)
