"""The `grader` command: server-side operations and the embedded development service."""
from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, BinaryIO

import httpx
import typer
from alembic import command as alembic_command
from alembic.config import Config as AlembicConfig
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.auth.sessions import change_password
from grader.celery_app import declare_queues, make_celery
from grader.cli import accounts as accounts_cli
from grader.cli import capacity as capacity_cli
from grader.cli import client as client_cli
from grader.cli import lti as lti_cli
from grader.cli import ops as ops_cli
from grader.cli import rescore as rescore_cli
from grader.cli import scale as scale_cli
from grader.cli import staff_settings as staff_settings_cli
from grader.course.courses import course_holding, course_of_free_assignments
from grader.course.membership import get_or_create_user
from grader.datadir import private_dir, private_file, restrict_umask, tighten
from grader.db import make_engine, make_session_factory, session_scope
from grader.gpu_events import event_recorder
from grader.gpu_workers import (
    GpuListError,
    Supervisor,
    choose_gpus,
    list_gpus,
    log_supervisor,
    node_name,
    warn_shared_cores,
    worker_env,
)
from grader.models import Role
from grader.runs.engine_config import gpu_available, gpu_stage_config, gpu_stage_for, pipeline_config
from grader.runs.reconcile import reconcile
from grader.runs.reconcile_log import log_reconciler
from grader.service import save_calibration, sync_assignments
from grader.settings import Argon2Settings, ExposedSecretFile, Settings, get_settings, refuse_exposed
from grader.storage.collector import collect
from worker.assignment import assignment_of
from worker.calibration import DEFAULT_MARGIN, calibrated_targets, reference_bandwidths
from worker.gpu.copy_peak import measure_copy_peak
from worker.measurements import ProblemMeasurement
from worker.pipeline import build_reference, grade_submission
from worker.rubric import Rubric, load_rubric
from worker.sandbox import Sandbox
from worker.starter_kit import write_starter_zip, zip_tree
from worker.telemetry import gpu_model_mismatch, gpu_snapshot

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FINAL_STATES = {"built", "scored", "failed"}
DEV_COURSE = "dev"  # `grader dev`'s course
reconciler_log = logging.getLogger("grader.reconciler")  # the reconcile loop's own lines (collector passes)

app = typer.Typer(help="kernelgrade: autograder for GPU kernel homework.", no_args_is_help=True)
starter_app = typer.Typer(help="Student starter kits.", no_args_is_help=True)
app.add_typer(starter_app, name="starter")
accounts_cli.register(app)  # user, token, roster (accounts and enrolments)
client_cli.register(app)  # submit, status, regrade, export (REST client)
ops_cli.register(app)  # schedule, extend, pause, resume, similarity, gradescope-pack (course operations)
capacity_cli.register(app)  # capacity (GPU workers a deadline needs)
staff_settings_cli.register(app)  # quota; course ta-powers, course quota
lti_cli.register(app)  # lti add-platform, list, rotate-key, retire-keys (LMS launches)
rescore_cli.register(app)  # rescore (stored measurements scored again under the current rubric)
scale_cli.register(app)  # scale slurm (GPU worker jobs for the runs that need a GPU)


@app.callback()
def _every_command() -> None:
    # Every process the `grader` command starts (serve, worker through exec, reconcile, dev and
    # its worker, migrate, the CLI) creates its files for its own user only (grader/datadir.py).
    restrict_umask()
    _refuse_exposed_secrets()


def _refuse_exposed_secrets() -> None:
    """Stop, in one line, when the `.env` or the session key file is open to other users
    (grader.settings.refuse_exposed). Other settings errors are left to the command that reads them."""
    try:
        refuse_exposed(get_settings().secret_key_path)
    except ExposedSecretFile as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    except ValueError:  # an invalid setting: the command says which when it reads them
        pass


def _alembic_config(settings: Settings) -> AlembicConfig:
    config = AlembicConfig(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    config.set_main_option("sqlalchemy.url", settings.resolved_database_url)
    config.attributes["configure_logging"] = False
    return config


def init_database(settings: Settings) -> list[Path]:
    """Apply migrations, load assignments from the rubric files and, for the embedded broker,
    create its queues. First the data dir is made owner-only (grader/datadir.py), what an older
    version left open included; the paths that were open are returned."""
    private_dir(settings.data_dir)
    if not settings.broker_url:  # the embedded broker's SQLite file, 0600 before kombu opens it
        private_file(settings.embedded_broker_path)
    opened = tighten(settings.data_dir, within_only=(settings.jobs_dir,))
    alembic_command.upgrade(_alembic_config(settings), "head")
    if not settings.broker_url:
        declare_queues(settings)
    with session_scope(make_session_factory(make_engine(settings))) as session:
        sync_assignments(session, settings.rubrics, settings.rubric_dirs)
    return opened


@app.command()
def migrate() -> None:
    """Apply database migrations and sync assignments from rubrics/."""
    settings = get_settings()
    opened = init_database(settings)
    if opened:
        typer.echo(f"data dir {settings.data_dir}: {len(opened)} folders and files were open to other users; "
                   "they are owner-only now (0700/0600)")
    typer.echo(f"database ready: {settings.resolved_database_url.split('@')[-1]}")


@starter_app.command("build")
def starter_build(
    slug: Annotated[str | None, typer.Argument(help="the assignment (its rubric); default: KG_RUBRICS' first")] = None,
    out: Annotated[Path | None, typer.Option(help="zip to write")] = None,
) -> None:
    """Write the student starter zip (solution regions replaced by TODO stubs)."""
    settings = get_settings()
    rubric = load_rubric(slug or settings.rubrics[0], search=settings.rubric_dirs)
    typer.echo(write_starter_zip(rubric, out or Path(f"{rubric.slug}-starter.zip")))


@app.command()
def worker(
    concurrency: Annotated[int | None, typer.Option(
        help="processes; default KG_GPU_SLOTS (with the split, that many runs' checks share the GPU)")] = None,
    loglevel: str = "info",
    similarity: Annotated[bool, typer.Option(help="also take the CPU queue (KG_SIMILARITY_QUEUE): similarity reports and roster imports")] = False,
    gpus: Annotated[str | None, typer.Option(
        help="one worker per GPU of this host: 'all' (nvidia-smi's list) or host indexes '0,1'")] = None,
    node: Annotated[str | None, typer.Option(help="Celery node name (--gpus gives each GPU's worker gpu<index>@%h)")] = None,
    idle_exit: Annotated[float | None, typer.Option(
        help="exit after this many seconds without a task (KG_WORKER_IDLE_EXIT_S; 0: never)", min=0)] = None,
) -> None:
    """Start a Celery worker on the grading queue (replaces this process). A worker named for
    a GPU model (KG_GPU_MODEL) refuses to start on another GPU, unless GPU grading is off.
    With --gpus, one such worker per GPU, each pinned to its GPU, kept running by this process
    (grader/gpu_workers.py); with one GPU it is that GPU's worker, as without --gpus.
    With --idle-exit, a worker leaves once it has had no task for that long (grader/runs/worker_stop.py)."""
    if idle_exit is not None:  # read by the worker this process becomes or starts (its settings)
        os.environ["KG_WORKER_IDLE_EXIT_S"] = f"{idle_exit:g}"
        get_settings.cache_clear()
    if gpus is not None:
        _gpu_workers(gpus, concurrency, loglevel, similarity)
        return
    settings = get_settings()
    if settings.gpu_model and settings.gpu_grading != "off":
        snapshot = gpu_snapshot(settings.gpu_index)
        mismatch = gpu_model_mismatch(settings.gpu_model, snapshot.get("name") if snapshot["available"] else None)
        if mismatch:
            typer.echo(mismatch, err=True)
            raise typer.Exit(2)
    slots = concurrency if concurrency is not None else settings.gpu_slots
    argv = _worker_argv(settings, slots, loglevel, similarity)
    os.execvp(sys.executable, [sys.executable, *argv, *(["--hostname", node] if node else [])])


def _gpu_workers(spec: str, concurrency: int | None, loglevel: str, similarity: bool) -> None:
    """`grader worker --gpus`: every chosen GPU's `grader worker`, pinned to it; one GPU: exec'd
    in place (today's worker on that GPU), several: supervised. Exits when they have."""
    settings = get_settings()
    try:
        chosen = choose_gpus(spec, list_gpus)
    except GpuListError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if len(chosen) > 1 and settings.timing_cpus.strip().lower() not in ("auto", "off", "none", ""):
        typer.echo(f"KG_TIMING_CPUS={settings.timing_cpus} would give every GPU's timing the same cores: "
                   "use 'auto' (two per GPU) or 'off' with --gpus", err=True)
        raise typer.Exit(2)
    args = ["worker", "--loglevel", loglevel, *(["--concurrency", str(concurrency)] if concurrency else []),
            *(["--similarity"] if similarity else [])]
    grader = [sys.executable, "-m", "grader"]
    if len(chosen) == 1:
        env = worker_env(os.environ, chosen[0], settings.timing_cpus, None)
        os.execvpe(sys.executable, [*grader, *args], env)
    members = [(gpu, [*grader, *args, "--node", node_name(gpu)],
                worker_env(os.environ, gpu, settings.timing_cpus, settings.data_dir / "scratch" / f"gpu-{gpu.index}"))
               for gpu in chosen]
    log_supervisor()
    warn_shared_cores([env for _, _, env in members])
    # each start, restart and leaving out a gpu_worker_events row, for /ops/workers (grader.gpu_events)
    raise typer.Exit(Supervisor(members, idle_exits=settings.worker_idle_exit_s > 0,
                                on_event=event_recorder(settings)).run())


CELERY_ROOT_WARNING = "You're running the worker with superuser privileges"


def _worker_argv(settings: Settings, concurrency: int, loglevel: str, similarity: bool) -> list[str]:
    queues = [settings.task_queue, *([settings.similarity_queue] if similarity else [])]
    return [
        "-m", "celery", "-A", "grader.celery_app", "worker",
        "-Q", ",".join(queues), "--concurrency", str(concurrency), "--loglevel", loglevel,
        "--without-gossip", "--without-mingle",
    ]


@app.command("reconcile")
def reconcile_command(loop: Annotated[bool, typer.Option(help="run forever")] = False) -> None:
    """Send again the runs the queue forgot (broker down at upload, dead workers), each at the
    front of its queue; every line on stderr carries its time and says why a run was sent."""
    settings = get_settings()
    log_reconciler()
    sessions = make_session_factory(make_engine(settings))
    celery = make_celery(settings)
    last_collect = float("-inf")
    while True:
        reconcile(settings, sessions, celery)  # logs each run it sends, and why
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
        reconciler_log.warning("collector pass failed: %s", exc)
        return
    if report.blobs or report.temp_files or report.job_folders:
        reconciler_log.info("collector: %s", report.summary())


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
    rubric = load_rubric(assignment or settings.rubrics[0], search=settings.rubric_dirs)
    gpu = gpu_snapshot(settings.gpu_index)
    chosen = list(submissions or [])
    if not chosen:
        typer.echo(f"no --from submissions: calibrating from {assignment_of(rubric).calibration_warning}")
    with tempfile.TemporaryDirectory(prefix="kg-calibrate-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandbox user must reach its job folders
        measurements = _measure_for_calibration(settings, rubric, chosen, work)
        peak = _copy_peak(settings, work / "copy-peak")
    targets = calibrated_targets(rubric, measurements, margin)
    details = {"gpu": gpu, "source": [p.name for p in chosen] or "reference kit",
               "measured": [{"problem": m.problem_id, "figures": {name: f.to_dict() for name, f in m.figures.items()}}
                            for m in measurements],
               "peak_copy": peak, "bandwidth": reference_bandwidths(measurements)}
    with session_scope(make_session_factory(make_engine(settings))) as session:
        save_calibration(session, rubric.slug, str(gpu.get("name")), targets, margin, details)
    for pid, target in sorted(targets.items()):
        typer.echo(f"{pid}: target {target:.2f}x (rubric {next(p.reference_speedup for p in rubric.problems if p.id == pid)}x)")
    typer.echo(f"stored for {gpu.get('name')}")


def _copy_peak(settings: Settings, work: Path) -> dict:
    """The GPU's peak copy bandwidth (worker.gpu.copy_peak) as stored with the calibration, or
    why it could not be measured (the calibration stands without it)."""
    stage = gpu_stage_config(settings)
    try:
        peak = measure_copy_peak(Sandbox(stage.limits, stage.policy), work, settings.gpu_index)
    except Exception as exc:  # noqa: BLE001 - any failure only leaves the figure out
        typer.echo(f"peak copy bandwidth not measured: {exc}", err=True)
        return {"error": str(exc)[:500]}
    typer.echo(f"peak copy bandwidth: {peak.gb_s:.0f} GB/s [{peak.low:.0f}, {peak.high:.0f}]")
    return peak.to_dict()


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the web app and API with uvicorn (forwarded headers are read by the app alone,
    from KG_TRUSTED_PROXIES: grader/auth/client_address.py)."""
    import uvicorn

    from grader.app import create_app

    uvicorn.run(create_app(get_settings()), host=host, port=port, proxy_headers=False)


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
    passwords, tokens, held = _dev_accounts(sessions, settings.argon2)
    _echo_dev_logins(host, port, passwords, tokens, held)
    if demo and settings.rubrics[0] not in held:
        demo = False
        typer.echo(_no_demo(sessions, settings.rubrics[0]), err=True)
        if exit_after_demo:
            raise typer.Exit(1)
    worker_log, worker_proc = _start_dev_worker(settings)
    stop = _start_reconciler(settings, sessions)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning",
                                            proxy_headers=False))
    if demo:
        threading.Thread(
            target=_demo_submission, daemon=True,
            args=(server, f"http://{host}:{port}", tokens["student"],
                  load_rubric(settings.rubrics[0], search=settings.rubric_dirs), exit_after_demo),
        ).start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # Ctrl-C: uvicorn has shut down, then passes the signal on; a stop, not an error
    finally:
        stop.set()
        worker_proc.terminate()
        worker_proc.wait(timeout=30)
        worker_log.close()
    typer.echo(f"kernelgrade stopped (the worker's log: {settings.data_dir / 'worker.log'})")


def _dev_accounts(sessions: sessionmaker[Session], cost: Argon2Settings
                  ) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """`student` and `instructor` in the dev course with new passwords (each start) and a token
    each: (name -> password, name -> token, the slugs of the assignments the course holds)."""
    passwords = {name: secrets.token_urlsafe(9) for name in ("student", "instructor")}
    with session_scope(sessions) as session:
        course = course_of_free_assignments(session, DEV_COURSE, "Development course")
        accounts = {name: get_or_create_user(session, name, role, [course])
                    for name, role in (("student", Role.student), ("instructor", Role.instructor))}
        for name, user in accounts.items():
            change_password(session, user, passwords[name], cost)
        tokens = {name: issue_token(session, user, "dev") for name, user in accounts.items()}
        return passwords, tokens, [assignment.slug for assignment in course.assignments]


def _echo_dev_logins(host: str, port: int, passwords: dict[str, str], tokens: dict[str, str],
                     held: list[str]) -> None:
    typer.echo(f"kernelgrade (embedded) on http://{host}:{port}/  docs: http://{host}:{port}/docs")
    typer.echo(f"  course {DEV_COURSE}, holding {', '.join(held) or 'no assignment'} (it takes every assignment "
               "no other course holds)")
    typer.echo(f"  log in as student / {passwords['student']}  or  instructor / {passwords['instructor']}")
    typer.echo(f"  student token:    {tokens['student']}\n  instructor token: {tokens['instructor']}")


def _no_demo(sessions: sessionmaker[Session], slug: str) -> str:
    """Why the demo upload to `slug` cannot be made: another course holds it (or nothing grades it)."""
    with session_scope(sessions) as session:
        holder = course_holding(session, slug)
    if holder is None:
        return f"demo: not run: there is no assignment {slug} (KG_RUBRICS)"
    return (f"demo: not run: {slug} is an assignment of the course {holder.slug}, not of {DEV_COURSE}, so "
            f"{DEV_COURSE}'s student cannot upload to it (`grader user enroll student {holder.slug}` lets them; "
            "a new KG_DATA_DIR starts afresh)")


def _start_dev_worker(settings: Settings) -> tuple[BinaryIO, subprocess.Popen[bytes]]:
    """The embedded worker's process and its open log (the caller closes it after the process).

    The worker's banner and shutdown notes go to a log in the data dir, its warnings and errors
    to this console. Celery's warning about root is left out: as root the sandbox can run each
    child as KG_SANDBOX_USER, which is why one runs the worker so (README, Deploying)."""
    worker_log = private_file(settings.data_dir / "worker.log").open("ab")
    worker_proc = subprocess.Popen(
        [sys.executable, "-W", f"ignore:{CELERY_ROOT_WARNING}", *_worker_argv(settings, 1, "warning", similarity=True)],
        cwd=Path.cwd(), stdout=worker_log)
    return worker_log, worker_proc


def _start_reconciler(settings: Settings, sessions: sessionmaker[Session]) -> threading.Event:
    """A daemon thread reconciling every KG_RECONCILE_INTERVAL_S until the returned event is set;
    its lines go to this console with their time."""
    log_reconciler()
    stop = threading.Event()
    celery = make_celery(settings)

    def reconcile_forever() -> None:
        while not stop.wait(settings.reconcile_interval_s):
            reconcile(settings, sessions, celery)

    threading.Thread(target=reconcile_forever, daemon=True, name="reconciler").start()
    return stop


def _demo_submission(server: object, base_url: str, token: str, rubric: Rubric, exit_after: bool) -> None:
    """Zip the assignment's reference kit as a student would, upload it, and print the run when
    final (nothing, if the service stops first)."""
    try:
        _demo_run(server, base_url, token, rubric, exit_after)
    except httpx.TransportError:
        if not getattr(server, "should_exit", False):
            raise


def _demo_run(server: object, base_url: str, token: str, rubric: Rubric, exit_after: bool) -> None:
    while not getattr(server, "started", False):
        time.sleep(0.2)
    folder = assignment_of(rubric).zip_folder
    with tempfile.TemporaryDirectory() as tmp:
        archive = zip_tree(rubric.starter_dir, Path(tmp) / f"{folder}.zip", folder)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client, archive.open("rb") as fh:
            answer = client.post("/api/v1/submissions", files={"file": (archive.name, fh)})
            if answer.status_code != 201:
                typer.echo(f"demo: the upload was refused ({answer.status_code}): {answer.text[:300]}", err=True)
                if exit_after:
                    server.should_exit = True  # type: ignore[attr-defined]
                return
            created = answer.json()
            typer.echo(f"demo: the reference kit uploaded as `student`: run {created['run_id']} at "
                       f"{base_url}/runs/{created['run_id']}")
            while True:
                run = client.get(created["run_url"]).json()
                if run["state"] in FINAL_STATES:
                    break
                time.sleep(1)
    toolchain = run.get("toolchain") or {}
    cached = toolchain.get("build_cached") or {}
    built = ", ".join(f"{name} from the build cache" if cached.get(name) else f"{name} {seconds:.1f} s"
                      for name, seconds in (toolchain.get("build_seconds") or {}).items())
    why = f" ({run['error_class']}: {run['message']})" if run.get("error_class") else ""
    typer.echo(f"demo: run {run['id']} is {run['state']}{why}{f' (nvcc: {built})' if built else ''}; "
               f"its record: GET {created['run_url']} with the student token")
    if exit_after:
        server.should_exit = True  # type: ignore[attr-defined]
