"""The `grader` command: server-side operations and the embedded development service."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer
from alembic.config import Config as AlembicConfig
from sqlalchemy.orm import Session, sessionmaker

from alembic import command as alembic_command
from grader import client_cli, ops_cli
from grader.auth import issue_token
from grader.collector import collect
from grader.db import make_engine, make_session_factory, session_scope
from grader.membership import assignments_of, enroll, unenroll
from grader.models import CourseRole, Role, User
from grader.password_reset import RESET_PATH, issue_reset
from grader.roster import import_roster
from grader.runs.celery_app import make_celery
from grader.runs.engine_config import gpu_available, gpu_stage_for, pipeline_config
from grader.runs.reconcile import reconcile
from grader.service import find_user, get_or_create_user, save_calibration, sync_assignments
from grader.settings import Settings, get_settings
from grader.websession import change_password, revoke_user_sessions
from worker.assignment import assignment_of
from worker.calibration import DEFAULT_MARGIN, calibrated_targets
from worker.measurements import ProblemMeasurement
from worker.pipeline import build_reference, grade_submission
from worker.rubric import Rubric, load_rubric
from worker.starter_kit import write_starter_zip, zip_tree
from worker.telemetry import gpu_model_mismatch, gpu_snapshot
from worker.timing import RatioSummary

PROJECT_ROOT = Path(__file__).resolve().parent.parent
FINAL_STATES = {"built", "scored", "failed"}

app = typer.Typer(help="kernelgrade: autograder for GPU kernel homework.", no_args_is_help=True)
user_app = typer.Typer(help="Manage users.", no_args_is_help=True)
token_app = typer.Typer(help="Manage API tokens.", no_args_is_help=True)
starter_app = typer.Typer(help="Student starter kits.", no_args_is_help=True)
roster_app = typer.Typer(help="Student roster.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(roster_app, name="roster")
app.add_typer(token_app, name="token")
app.add_typer(starter_app, name="starter")
client_cli.register(app)  # submit, status, regrade, export (REST client)
ops_cli.register(app)  # schedule, extend, pause, resume, similarity, gradescope-pack (course operations)


def _alembic_config(settings: Settings) -> AlembicConfig:
    config = AlembicConfig(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    config.set_main_option("sqlalchemy.url", settings.resolved_database_url)
    config.attributes["configure_logging"] = False
    return config


def init_database(settings: Settings) -> None:
    """Apply migrations and load assignments from the rubric files."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    alembic_command.upgrade(_alembic_config(settings), "head")
    with session_scope(make_session_factory(make_engine(settings))) as session:
        sync_assignments(session, settings.rubrics)


@app.command()
def migrate() -> None:
    """Apply database migrations and sync assignments from rubrics/."""
    settings = get_settings()
    init_database(settings)
    typer.echo(f"database ready: {settings.resolved_database_url.split('@')[-1]}")


@user_app.command("add")
def user_add(
    username: str,
    role: Annotated[Role, typer.Option(help="student or instructor")] = Role.student,
    password: Annotated[bool, typer.Option("--password", help="ask for a web login password and set it")] = False,
    assignment: Annotated[list[str] | None, typer.Option(
        help="enroll in this assignment (repeatable; students as students, instructors as staff); "
             "none: a new user joins every assignment")] = None,
) -> None:
    """Create a user (an existing one keeps its role) and enroll it; --password sets its web
    password (and ends the user's browser sessions)."""
    secret = typer.prompt("Password", hide_input=True, confirmation_prompt=True) if password else None
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        chosen = [ops_cli.assignment_or_exit(session, slug) for slug in assignment] if assignment else None
        user = get_or_create_user(session, username, role, chosen)
        if secret is not None:
            try:
                change_password(session, user, secret, settings.password_min_length)
            except ValueError as exc:
                typer.echo(str(exc), err=True)
                raise typer.Exit(1) from exc
        enrolled = ", ".join(a.slug for a in assignments_of(session, user.id)) or "nothing"
        typer.echo(f"user {user.username} ({user.role.value}) id={user.id}, enrolled in {enrolled}"
                   + (", password set" if secret else ""))


def _user_or_exit(session: Session, username: str) -> User:
    user = find_user(session, username)
    if user is None:
        typer.echo(f"no user {username!r}; create it with `grader user add`", err=True)
        raise typer.Exit(2)
    return user


@user_app.command("enroll")
def user_enroll(
    username: str,
    assignment: str,
    part: Annotated[CourseRole, typer.Option("--as", help="student, or staff (e.g. a TA's student account)")]
    = CourseRole.student,
) -> None:
    """Enroll USERNAME in ASSIGNMENT as a student or as staff (changing their part if enrolled)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        changed = enroll(session, _user_or_exit(session, username), ops_cli.assignment_or_exit(session, assignment), part)
    typer.echo(f"{username} is {part.value} of {assignment}" + ("" if changed else " (already)"))


@user_app.command("unenroll")
def user_unenroll(username: str, assignment: str) -> None:
    """Take USERNAME out of ASSIGNMENT: they no longer see or submit to it; their submissions
    stay in the gradebook's records."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        removed = unenroll(session, _user_or_exit(session, username), ops_cli.assignment_or_exit(session, assignment))
    typer.echo(f"{username} {'left' if removed else 'was not enrolled in'} {assignment}")


@user_app.command("logout-all")
def user_logout_all(username: str) -> None:
    """End every browser session of USERNAME (a lost laptop, a shared computer); API tokens
    are revoked separately, on the token settings page."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        ended = revoke_user_sessions(session, _user_or_exit(session, username).id)
    typer.echo(f"ended {ended} session{'' if ended == 1 else 's'} of {username}")


@user_app.command("reset-link")
def user_reset_link(
    username: str,
    base_url: Annotated[str, typer.Option(envvar="KG_URL", help="the service's address, as users reach it")]
    = "http://127.0.0.1:8000",
) -> None:
    """Print a one-time password reset link for USERNAME (valid KG_PASSWORD_RESET_MAX_AGE_S);
    hand it to the user, who sets a new password with it (their browser sessions end)."""
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        token = issue_reset(session, _user_or_exit(session, username), settings.password_reset_max_age_s)
    typer.echo(base_url.rstrip("/") + RESET_PATH + token)


@token_app.command("create")
def token_create(
    username: str,
    name: Annotated[str, typer.Option(help="label for the token")] = "cli",
    scope: Annotated[list[str] | None, typer.Option(help="scope (repeatable); default by role")] = None,
) -> None:
    """Create an API token for USERNAME and print it (it is shown only once)."""
    sessions = make_session_factory(make_engine(get_settings()))
    with session_scope(sessions) as session:
        typer.echo(issue_token(session, _user_or_exit(session, username), name, tuple(scope) if scope else None))


@roster_app.command("import")
def roster_import(
    file: Annotated[Path, typer.Argument(help="CSV: email,name[,section] per line, or a header row naming the "
                                              "columns (a Canvas gradebook export: Student, SIS Login ID, "
                                              "Section; or username/login, name, email, section)",
                                         exists=True, dir_okay=False)],
    out: Annotated[Path | None, typer.Option(help="write the new accounts' first passwords here (CSV, mode 600) "
                                                  "instead of printing them")] = None,
    assignment: Annotated[str | None, typer.Option(help="enroll the students in this assignment "
                                                        "(default: the first of KG_RUBRICS)")] = None,
) -> None:
    """Create (or update) student accounts from a roster CSV, enrolled in one assignment. New
    accounts' first passwords are printed once as a login,password CSV; exits 1 when a line
    could not be imported."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        typer.echo(f"{file} is not UTF-8 text", err=True)
        raise typer.Exit(2) from None
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        report = import_roster(session, text, ops_cli.assignment_or_exit(session, assignment or settings.rubrics[0]))
    if out is not None:
        out.touch(mode=0o600)
        out.write_text(report.passwords_csv())
    elif report.created:
        typer.echo(report.passwords_csv(), nl=False)
    for error in report.errors:
        typer.echo(str(error), err=True)
    typer.echo(report.summary() + (f"; passwords in {out}" if out is not None and report.created else ""), err=True)
    if report.errors:
        raise typer.Exit(1)


@starter_app.command("build")
def starter_build(
    slug: Annotated[str | None, typer.Argument(help="the assignment (its rubric); default: KG_RUBRICS' first")] = None,
    out: Annotated[Path | None, typer.Option(help="zip to write")] = None,
) -> None:
    """Write the student starter zip (solution regions replaced by TODO stubs)."""
    rubric = load_rubric(slug or get_settings().rubrics[0])
    typer.echo(write_starter_zip(rubric, out or Path(f"{rubric.slug}-starter.zip")))


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="processes; keep 1 per GPU")] = 1,
    loglevel: str = "info",
    similarity: Annotated[bool, typer.Option(help="also take the CPU queue (KG_SIMILARITY_QUEUE): similarity reports and roster imports")] = False,
) -> None:
    """Start a Celery worker on the grading queue (replaces this process). A worker named for
    a GPU model (KG_GPU_MODEL) refuses to start on another GPU, unless GPU grading is off."""
    settings = get_settings()
    if settings.gpu_model and settings.gpu_grading != "off":
        snapshot = gpu_snapshot(settings.gpu_index)
        mismatch = gpu_model_mismatch(settings.gpu_model, snapshot.get("name") if snapshot["available"] else None)
        if mismatch:
            typer.echo(mismatch, err=True)
            raise typer.Exit(2)
    os.execvp(sys.executable, [sys.executable, *_worker_argv(settings, concurrency, loglevel, similarity)])


def _worker_argv(settings: Settings, concurrency: int, loglevel: str, similarity: bool) -> list[str]:
    queues = [settings.task_queue, *([settings.similarity_queue] if similarity else [])]
    return [
        "-m", "celery", "-A", "grader.runs.celery_app", "worker",
        "-Q", ",".join(queues), "--concurrency", str(concurrency), "--loglevel", loglevel,
        "--without-gossip", "--without-mingle",
    ]


@app.command("reconcile")
def reconcile_command(loop: Annotated[bool, typer.Option(help="run forever")] = False) -> None:
    """Send again the runs the queue forgot (broker down at upload, dead workers)."""
    settings = get_settings()
    sessions = make_session_factory(make_engine(settings))
    celery = make_celery(settings)
    last_collect = float("-inf")
    while True:
        report = reconcile(settings, sessions, celery)
        if report.resent or report.unreachable:
            typer.echo(f"resent {report.resent}; broker unreachable for {report.unreachable}")
        if not loop:
            return
        if time.monotonic() - last_collect >= settings.collect_interval_s:
            last_collect = time.monotonic()
            _collect_once(settings, sessions)
        time.sleep(settings.reconcile_interval_s)


def _collect_once(settings: Settings, sessions: sessionmaker[Session]) -> None:
    """A collector pass inside the reconcile loop: a failure is logged, the loop goes on."""
    try:
        report = collect(settings, sessions)
    except Exception as exc:  # the database or the disk may blip; the next pass tries again
        typer.echo(f"collector pass failed: {exc}", err=True)
        return
    if report.blobs or report.temp_files or report.job_folders:
        typer.echo(f"collector: {report.summary()}")


@app.command("collect")
def collect_command() -> None:
    """Remove blobs no submission refers to (older than KG_UPLOAD_MAX_DURATION_S), stale upload
    temp files and the job folders of attempts that are over; print what was removed."""
    settings = get_settings()
    report = collect(settings, make_session_factory(make_engine(settings)))
    for sha256 in report.blobs:
        typer.echo(f"removed blob {sha256}")
    for name in report.temp_files:
        typer.echo(f"removed upload temp file {name}")
    for name in report.job_folders:
        typer.echo(f"removed job folder {name}")
    typer.echo(report.summary())


def _measure_for_calibration(settings: Settings, rubric: Rubric, submissions: list[Path],
                             work: Path) -> list[ProblemMeasurement]:
    """Every problem of each known-correct submission graded here through the production
    pipeline, or, without submissions, of our reference kit (its own tree as the trusted one)."""
    stage = gpu_stage_for(settings, rubric)
    if stage is None:
        raise typer.BadParameter(f"The assignment {rubric.slug} has no stage to measure its problems with.")
    if not submissions:
        reference = build_reference(rubric, pipeline_config(settings, rubric), work / "reference")
        return stage(rubric, reference, reference, work / "run", tuple(p.id for p in rubric.problems))
    measurements = []
    for i, archive in enumerate(submissions):
        outcome = grade_submission(archive, rubric, work / f"submission-{i}", pipeline_config(settings, rubric),
                                   gpu_stage=stage)
        found = [ProblemMeasurement.from_dict(p.details["measurement"]) for p in outcome.problems
                 if (p.details or {}).get("measurement")]
        typer.echo(f"{archive.name}: {outcome.state.value}, {outcome.score} points, {len(found)} problems measured")
        measurements.extend(found)
    return measurements


@app.command()
def calibrate(
    assignment: Annotated[str | None, typer.Option(help="the assignment (its rubric); default: KG_RUBRICS' first")] = None,
    margin: Annotated[float, typer.Option(help="target = median scored speedup x margin")] = DEFAULT_MARGIN,
    submissions: Annotated[list[Path] | None, typer.Option(
        "--from", help="a known-correct submission zip (repeat the option); none: our reference kit")] = None,
) -> None:
    """Grade known-correct submissions (or, without --from, our reference kit) on this worker's
    GPU and store the median of their scored speedups, times the margin, as this GPU model's
    targets (runs on this GPU model are then scored against them)."""
    settings = get_settings()
    if not gpu_available(settings):
        typer.echo("no GPU on this worker (or KG_GPU_GRADING=off): nothing to calibrate", err=True)
        raise typer.Exit(2)
    rubric = load_rubric(assignment or settings.rubrics[0])
    gpu = gpu_snapshot(settings.gpu_index)
    chosen = list(submissions or [])
    if not chosen:
        typer.echo(f"no --from submissions: calibrating from {assignment_of(rubric).calibration_warning}")
    with tempfile.TemporaryDirectory(prefix="kg-calibrate-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandbox user must reach its job folders
        measurements = _measure_for_calibration(settings, rubric, chosen, work)
    targets = calibrated_targets(rubric, measurements, margin)
    details = {"gpu": gpu, "source": [p.name for p in chosen] or "reference kit",
               "measured": [{"problem": m.problem_id, "speedup_reference_ops": _summary(m.speedup_reference_ops),
                             "speedup_student": _summary(m.speedup_student)} for m in measurements]}
    with session_scope(make_session_factory(make_engine(settings))) as session:
        save_calibration(session, rubric.slug, str(gpu.get("name")), targets, margin, details)
    for pid, target in sorted(targets.items()):
        typer.echo(f"{pid}: target {target:.2f}x (rubric {next(p.reference_speedup for p in rubric.problems if p.id == pid)}x)")
    typer.echo(f"stored for {gpu.get('name')}")


def _summary(r: RatioSummary | None) -> dict | None:
    return None if r is None else r.to_dict()


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the web app and API with uvicorn."""
    import uvicorn

    from grader.app import create_app

    uvicorn.run(create_app(get_settings()), host=host, port=port)


@app.command()
def dev(
    host: str = "127.0.0.1",
    port: int = 8000,
    demo: Annotated[bool, typer.Option(help="submit the reference kit once the service is up")] = True,
    exit_after_demo: Annotated[bool, typer.Option(help="stop after the demo run is final")] = False,
) -> None:
    """Embedded default: SQLite + a SQLite broker under ./var, the web app, one worker and the
    reconciler on this machine. Prints a student and an instructor token."""
    import uvicorn

    from grader.app import create_app

    settings = get_settings()
    init_database(settings)
    sessions = make_session_factory(make_engine(settings))
    passwords = {name: secrets.token_urlsafe(9) for name in ("student", "instructor")}  # new each start
    with session_scope(sessions) as session:
        accounts = {name: get_or_create_user(session, name, role)
                    for name, role in (("student", Role.student), ("instructor", Role.instructor))}
        for name, user in accounts.items():
            change_password(session, user, passwords[name])
        student = issue_token(session, accounts["student"], "dev")
        staff = issue_token(session, accounts["instructor"], "dev")
    typer.echo(f"kernelgrade (embedded) on http://{host}:{port}/  docs: http://{host}:{port}/docs")
    typer.echo(f"  log in as student / {passwords['student']}  or  instructor / {passwords['instructor']}")
    typer.echo(f"  student token:    {student}\n  instructor token: {staff}")

    worker_proc = subprocess.Popen([sys.executable, *_worker_argv(settings, 1, "warning", similarity=True)], cwd=Path.cwd())
    stop = threading.Event()
    celery = make_celery(settings)

    def reconcile_forever() -> None:
        while not stop.wait(settings.reconcile_interval_s):
            reconcile(settings, sessions, celery)

    threading.Thread(target=reconcile_forever, daemon=True, name="reconciler").start()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning"))
    if demo:
        threading.Thread(
            target=_demo_submission, daemon=True,
            args=(server, f"http://{host}:{port}", student, load_rubric(settings.rubrics[0]), exit_after_demo),
        ).start()
    try:
        server.run()
    finally:
        stop.set()
        worker_proc.terminate()
        worker_proc.wait(timeout=30)


def _demo_submission(server: object, base_url: str, token: str, rubric: Rubric, exit_after: bool) -> None:
    """Zip the assignment's reference kit as a student would, upload it, and print the run when final."""
    while not getattr(server, "started", False):
        time.sleep(0.2)
    folder = assignment_of(rubric).zip_folder
    with tempfile.TemporaryDirectory() as tmp:
        archive = zip_tree(rubric.starter_dir, Path(tmp) / f"{folder}.zip", folder)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client, archive.open("rb") as fh:
            created = client.post("/api/v1/submissions", files={"file": (archive.name, fh)}).json()
            typer.echo(f"demo: uploaded the reference kit -> {json.dumps(created)}")
            while True:
                run = client.get(created["run_url"]).json()
                if run["state"] in FINAL_STATES:
                    break
                time.sleep(1)
    summary = {k: run[k] for k in ("id", "state", "error_class", "message")}
    summary["build_seconds"] = (run.get("toolchain") or {}).get("build_seconds")
    typer.echo(f"demo: run {run['id']} is {run['state']}: {json.dumps(summary)}")
    typer.echo(f"demo: full record at {base_url}{created['run_url']} (Authorization: Bearer <student token>)")
    if exit_after:
        server.should_exit = True  # type: ignore[attr-defined]
