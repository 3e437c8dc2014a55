"""`grader capacity`: what a deadline will cost a course in GPUs, and how long its students will
wait for their verdicts and final scores with the GPUs it has, under today's schedule and with
checks shared and timing alone (the model: grader/capacity/model.py). Registered by grader.cli."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Annotated

import numpy as np
import typer
from sqlalchemy.orm import Session

from grader.capacity.model import DOUBLING_H, HOUR, Course, Figures, Planner, Schedule, Shape
from grader.cli.ops import assignment_or_exit
from grader.course.assignment_settings import parse_duration
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import RunState
from grader.reads.gpu_phases import plugin_of
from grader.reads.grade_times import (
    DEFAULT_TIMING_SHARE,
    GradeSplit,
    grade_splits,
    graded_gpu_models,
    stage_medians,
    with_timing,
)
from grader.settings import get_settings
from worker.assignment import Plugin


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


def _measured(session: Session, slug: str, recent: int, asked: str | None, share: float,
              plugin: Plugin | None) -> tuple[list[GradeSplit], str]:
    assignment_id = assignment_or_exit(session, slug).id
    model = _pick_model(sorted(graded_gpu_models(session, recent, assignment_id)), asked, slug)
    scored = (RunState.scored,)
    splits = grade_splits(session, recent, assignment_id, model, scored, plugin=plugin)
    stages = stage_medians(session, recent, assignment_id, model, scored)
    where = ", ".join(f"{name} {value:.1f} s" for name, value in stages.items())
    recorded = sum(s.timing is not None for s in splits)
    return splits, (
        f"{model}, the {len(splits)} most recent scored runs of {slug} (claim to result)"
        + (f"; stages, median: {where}" if where else "")
        + f"; timing from the phases {recorded} of them recorded"
        + (f", {share:g} of the grade for the other {len(splits) - recorded}" if recorded < len(splits) else ""))


def _row(figures: Figures, label: str) -> str:
    v, f = figures.verdict, figures.final
    return (f"| {figures.schedule.value} | {figures.gpus}{label} | {span(v.p50)} | {span(v.p95)} | {span(v.max)} | "
            f"{span(f.p50)} | {span(f.p95)} | {span(f.max)} | {figures.busy:.0%} | {figures.grades_per_gpu_hour:.1f} | "
            f"{figures.untimed:.0%} |")


def capacity(
    students: Annotated[int, typer.Option(help="students in the course")],
    per_student: Annotated[float, typer.Option(help="uploads per student before the deadline (e.g. 5, or 3.5)")] = 5,
    window: Annotated[str, typer.Option(help="the time before the deadline the uploads spread over, e.g. 24h")] = "24h",
    shape: Annotated[str | None, typer.Option(
        help="relative upload rates of equal slices of the window, oldest first, the last ending at the deadline, "
             f"e.g. 1,1,2,4 (default: hour slices, the rate doubling every {DOUBLING_H:g} h towards the deadline)")] = None,
    workers: Annotated[int, typer.Option(help="the GPUs grading today (one GPU worker each)")] = 1,
    target: Annotated[str, typer.Option(
        help="the p95 verdict wait to plan for (upload to the correctness verdict), e.g. 10m")] = "10m",
    check_slots: Annotated[int, typer.Option(
        help="with checks shared: the runs whose checks share one GPU at once")] = 2,
    timing_share: Annotated[float, typer.Option(
        help="the timing's share of a grade whose run recorded no phases, or of a --grade-seconds figure")
    ] = DEFAULT_TIMING_SHARE,
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
    """How many GPUs a course's deadline needs for a p95 verdict wait, and the verdict and
    final-score waits with today's GPUs: a seeded simulation of the grading queue (fair share
    included) on the measured grade times of recent scored runs, under today's schedule (a grade
    holds its GPU from claim to result) and with checks shared and timing alone."""
    window_s, target_s = _seconds(window, "--window"), _seconds(target, "--target")
    course = _course(students, per_student, shape, window_s)
    if workers < 1:
        raise typer.BadParameter("at least one GPU", param_hint="--workers")
    if check_slots < 1:
        raise typer.BadParameter("at least one check slot per GPU", param_hint="--check-slots")
    if not 0 <= timing_share <= 1:
        raise typer.BadParameter("a share from 0 to 1", param_hint="--timing-share")
    splits, source = _grade_times(grade_seconds_, assignment, recent, gpu_model, timing_share)
    times, timings, shared = [s.held for s in splits], with_timing(splits, timing_share), [s.timing_shared for s in splits]
    planner = Planner(course, times, seed, replications, timings, check_slots, shared)
    _echo_demand(course, shape, window_s, times, timings, shared, source)
    _echo_plan(planner, workers, target_s)
    typer.echo(f"Verdict: upload to the end of its checks (correctness and points); final: upload to the score, "
               f"over the runs that count (a run untimed, its student having uploaded again first, is final at its "
               f"verdict). Today's verdict is taken at the end of a grade's checks, as if it checked everything "
               f"before timing. Checks shared: {check_slots} runs' checks at once per GPU, each as long as alone. "
               f"Busy: the GPUs' share of the time to the last result with work running; grades per GPU-hour of it. "
               f"Untimed: the share of uploads whose student uploaded again before their timing started. "
               f"Simulated over {replications} deadlines, seed {seed}; each grade's time drawn from the "
               f"{len(times)} figure(s) above.")


def _course(students: int, per_student: float, shape: str | None, window_s: float) -> Course:
    try:
        return Course(students, per_student, Shape.parse(shape, window_s) if shape else Shape.default(window_s))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _grade_times(given: list[float] | None, assignment: str | None, recent: int, gpu_model: str | None,
                 share: float) -> tuple[list[GradeSplit], str]:
    """The grade times to simulate (the timing part of each where recorded) and where they come
    from: --grade-seconds (timing: --timing-share of each), else the database's."""
    if given:
        if any(not g > 0 for g in given):
            raise typer.BadParameter("grade times are seconds > 0", param_hint="--grade-seconds")
        return [GradeSplit(g, None) for g in given], f"given on the command line; timing {share:g} of each"
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        slug = assignment or settings.rubrics[0]
        return _measured(session, slug, recent, gpu_model, share, plugin_of(slug, settings.rubric_dirs))


def _echo_demand(course: Course, shape: str | None, window_s: float, times: list[float], timings: list[float],
                 shared: list[float], source: str) -> None:
    """Print the course's uploads, the grade times and the work they make today."""
    mean = statistics.fmean(times)
    peak_per_hour = course.uploads * course.shape.peak_share_per_hour()
    peak_load = peak_per_hour * mean / HOUR
    shape_words = f"relative rates {shape}" if shape else f"the rate doubling every {DOUBLING_H:g} h towards it"
    typer.echo(f"Course: {course.students} students x {course.per_student:g} uploads = about {course.uploads:.0f} "
               f"grades in the {span(window_s)} before the deadline ({shape_words}); at the peak {peak_per_hour:.0f} "
               "uploads an hour.")
    typer.echo(f"Grade time: median {span(float(np.median(times)))}, p95 {span(float(np.percentile(times, 95)))}, "
               f"mean {mean:.0f} s, of which timing mean {statistics.fmean(timings):.0f} s"
               + (f" ({statistics.fmean(shared):.0f} s of it holding the GPU shared: a timing piece's set-up)"
                  if any(shared) else "") + f" ({source}).")
    typer.echo(f"Work today: {course.uploads * mean / HOUR:.1f} GPU-hours; at the peak, {peak_load:.1f} GPUs' worth of "
               "grading arrives (a load above 1 per GPU: the queue grows until the rate falls).")


def _echo_plan(planner: Planner, workers: int, target_s: float) -> None:
    """Print both schedules' waits with today's GPUs and with the fewest that meet the target."""
    rows, fewest = [], {}
    for schedule in Schedule:
        rows.append(_row(planner.figures(schedule, workers), " (today)"))
        fewest[schedule] = planner.fewest(schedule, target_s)
    for needed in fewest.values():
        if needed is not None and needed.gpus != workers:
            rows.append(_row(needed, f" (fewest for a p95 verdict wait of {span(target_s)})"))
    typer.echo("\n| schedule | GPUs | verdict p50 | verdict p95 | verdict max | final p50 | final p95 | final max "
               "| GPUs busy | grades per GPU-hour | untimed |\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows))
    typer.echo(f"\n--target applies to the verdict wait (the final-score wait is reported, not planned for). "
               f"For a p95 verdict wait of at most {span(target_s)}, with {workers} GPU(s) today:")
    for schedule, needed in fewest.items():
        if needed is None:
            floor = planner.floor(schedule)
            typer.echo(f"- {schedule.value}: no number of GPUs: with one per upload it is still "
                       f"{span(floor.verdict.p95)} (the checks' own time, and a student's next upload waiting for "
                       "their previous run: fair share).")
        else:
            typer.echo(f"- {schedule.value}: {needed.gpus} GPU(s).")


def register(app: typer.Typer) -> None:
    app.command()(capacity)
