"""The capacity model against a real run with several workers: predicted vs measured waits.

    .venv/bin/python bench/capacity_check.py [--workers 3] [--students 30] [--per-student 2]
        [--window 60] [--shape 1,2,4] [--grade 4:12] [--profile production|embedded] [--seed 0] [--record]

Starts the service on this machine (production profile: a fresh PostgreSQL database and a queue
of its own on the Redis at 127.0.0.1; embedded: SQLite and the SQLite broker in a temporary data
dir), the web app in-process and --workers `grader worker` processes, grading a stand-in
assignment (bench/capacity_standin/: each grade holds its worker for the seconds its upload
names, drawn uniformly from --grade, and passes). So what is measured is the queue itself: the
broker, fair share, the claims and the workers, with a grade time the bench knows. On a GPU
machine, `--assignment hw4 --zip a.zip --zip b.zip ... --gpus 1` grades those uploads for real
instead, the workers sharing the GPU(s) (worker i on GPU i mod --gpus).

1. Warm-up: --warmup uploads at once (4 per worker); their claim-to-result times are the "recent scored
   runs" the model reads (grader.reads.grade_times), as `grader capacity` would.
2. Burst: --students x --per-student uploads at times drawn from the deadline shape (--shape
   over --window seconds, grader.capacity.model.Shape), each student's runs under fair share.
3. Measured: each run's wait (upload to claim) and result (upload to end), from the database.
4. Predicted three ways by grader.capacity.model.simulate with the same number of workers:
   replay (the measured upload times and each run's own measured grade time: the queue's
   mechanics alone), model (the measured upload times, grade times drawn from the warm-up's, 20
   seeded replications: the run page's and `grader capacity`'s inputs), plan (`grader capacity`'s
   own answer before the burst: upload times drawn from the shape too).
Prints the table; --record files it in docs/benchmarks/capacity.md with machine, date, commit and command.
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import shlex
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import numpy as np
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT_ROOT), str(PROJECT_ROOT / "bench")]

from bench_common import gpu_description  # noqa: E402
from benchmarks_md import add_smoke_flag, current_commit, publish, smoke  # noqa: E402
from worker_scaling import REDIS_URL, fresh_database, wait_final, workers  # noqa: E402

from grader.app import create_app  # noqa: E402
from grader.auth.credentials import issue_token  # noqa: E402
from grader.capacity.model import Course, Job, Planner, Shape, simulate  # noqa: E402
from grader.cli.main import init_database  # noqa: E402
from grader.course.courses import course_of_free_assignments  # noqa: E402
from grader.course.membership import get_or_create_user  # noqa: E402
from grader.db import make_engine, make_session_factory, session_scope  # noqa: E402
from grader.models import Role, Run, RunState, Submission  # noqa: E402
from grader.reads.grade_times import grade_seconds  # noqa: E402
from grader.service import get_assignment  # noqa: E402
from grader.settings import Settings  # noqa: E402

STANDIN = PROJECT_ROOT / "bench" / "capacity_standin"
SLUG = "capacity-standin"
REPLICATIONS = 20


class Uploads:
    """What each upload sends: a stand-in zip holding its grade's seconds (drawn uniformly from
    `grade`), or, given real zips, those in turn, each made its own bytes by a note."""

    def __init__(self, rng: np.random.Generator, grade: tuple[float, float], zips: list[Path]) -> None:
        self.rng, self.grade, self.zips, self.sent = rng, grade, [z.read_bytes() for z in zips], 0

    def next(self, tag: str) -> bytes:
        buf = io.BytesIO(self.zips[self.sent % len(self.zips)] if self.zips else b"")
        self.sent += 1
        with zipfile.ZipFile(buf, "a" if self.zips else "w") as zf:
            if not self.zips:
                zf.writestr(f"{SLUG}/grade_seconds.txt", f"{self.rng.uniform(*self.grade):.3f}\n")
            zf.writestr("KG_BENCH_NOTE.txt", tag)  # outside the assignment's folder: never graded
        return buf.getvalue()


def post(client: TestClient, token: str, data: bytes) -> int:
    reply = client.post("/api/v1/submissions", headers={"Authorization": f"Bearer {token}"},
                        files={"file": ("upload.zip", data, "application/zip")})
    if reply.status_code != 201:
        raise RuntimeError(f"upload: {reply.status_code} {reply.text[:300]}")
    return int(reply.json()["run_id"])


def send_at(client: TestClient, schedule: list[tuple[float, str, bytes]]) -> list[tuple[str, int]]:
    """Each upload at its time (seconds from now), in one thread: a late one is sent at once."""
    started, runs = time.monotonic(), []
    for at, token, data in schedule:
        time.sleep(max(0.0, started + at - time.monotonic()))
        runs.append((token, post(client, token, data)))
    return runs


def measured(settings: Settings, run_ids: list[int]) -> list[tuple[float, int, float, float]]:
    """(upload, student, start, end) seconds of each run, from the first upload."""
    with session_scope(make_session_factory(make_engine(settings))) as session:
        rows = session.execute(
            select(Run.created_at, Submission.user_id, Run.started_at, Run.finished_at, Run.state)
            .join(Submission, Run.submission_id == Submission.id).where(Run.id.in_(run_ids)).order_by(Run.id)).all()
    if any(state != RunState.scored for *_, state in rows):
        raise RuntimeError(f"runs ended {sorted({state.value for *_, state in rows})}, not all scored")
    zero = min(created for created, *_ in rows)
    return [((c - zero).total_seconds(), user, (s - zero).total_seconds(), (f - zero).total_seconds())  # type: ignore[operator]  # scored: started and finished
            for c, user, s, f, _ in rows]


def percentiles(values: np.ndarray) -> tuple[float, float]:
    p50, p95 = np.percentile(values, [50, 95])
    return float(p50), float(p95)


@contextmanager
def profile_env(profile: str, data: Path) -> Iterator[dict[str, str]]:
    if profile == "embedded":
        yield {}
        return
    queue = f"kg-bench-cap-{uuid.uuid4().hex[:8]}"
    with fresh_database() as url:
        try:
            yield {"KG_DATABASE_URL": url, "KG_BROKER_URL": REDIS_URL, "KG_TASK_QUEUE": queue}
        finally:
            redis.Redis.from_url(REDIS_URL).delete(queue)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--per-student", type=int, default=2)
    parser.add_argument("--window", type=float, default=60.0, help="seconds the burst spreads over")
    parser.add_argument("--shape", default="1,2,4")
    parser.add_argument("--grade", default="4:12", help="a grade's seconds, uniform in LOW:HIGH")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up uploads (default: 4 per worker)")
    parser.add_argument("--zip", type=Path, action="append", default=[],
                        help="grade these uploads instead of the stand-in (repeat; with --assignment)")
    parser.add_argument("--assignment", default=SLUG, help="the assignment the --zip uploads are for, e.g. hw4")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs the workers share (worker i on GPU i mod this)")
    parser.add_argument("--profile", choices=("production", "embedded"), default="production")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", action="store_true")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.workers, args.students, args.per_student, args.window, args.grade, args.warmup = 1, 2, 1, 2.0, "0.1:0.2", 1
    low, high = (float(x) for x in args.grade.split(":"))
    if (args.assignment == SLUG) == bool(args.zip):
        parser.error("--zip uploads are for another --assignment; the stand-in's are made here")
    shape = Shape.parse(args.shape, args.window)
    rng = np.random.default_rng(args.seed)
    uploads = Uploads(rng, (low, high), args.zip)
    standin = args.assignment == SLUG
    with tempfile.TemporaryDirectory(prefix="kg-bench-cap-") as tmp, profile_env(args.profile, Path(tmp)) as extra:
        data = Path(tmp) / "data"
        env = {**os.environ, **extra, "KG_DATA_DIR": str(data), "KG_UPLOAD_RATE_LIMIT": "0",
               "KG_UPLOAD_DEDUP_WINDOW_S": "0", "KG_REUSE_MEASUREMENTS": "false", "KG_RUBRICS": f'["{args.assignment}"]', "KG_RUBRIC_DIRS": f'["{STANDIN}"]',
               **({"KG_GPU_GRADING": "off"} if standin else {})}
        settings = Settings.from_variables({k: v for k, v in env.items() if k.startswith("KG_") and "RUBRIC" not in k},
                                           rubrics=[args.assignment], rubric_dirs=[STANDIN])
        init_database(settings)
        with session_scope(make_session_factory(make_engine(settings))) as session:
            course_of_free_assignments(session, "bench", "Capacity bench")  # users join every course there is
            users = [get_or_create_user(session, f"cap{i:03d}", Role.student) for i in range(args.students)]
            warm_count = args.warmup or 4 * args.workers
            warmers = [get_or_create_user(session, f"warm{i:02d}", Role.student) for i in range(warm_count)]
            tokens = {u.username: issue_token(session, u, "bench") for u in [*users, *warmers]}
            assignment_id = get_assignment(session, args.assignment).id
        with TestClient(create_app(settings)) as client, workers(args.workers, env, Path(tmp), args.gpus):
            warm = [(tokens[u.username], post(client, tokens[u.username], uploads.next(u.username))) for u in warmers]
            wait_final(client, warm, timeout=600)
            with session_scope(make_session_factory(make_engine(settings))) as session:
                sample = grade_seconds(session, 200, assignment_id, states=(RunState.scored,))
            counts = rng.permutation(np.repeat(np.arange(args.students), args.per_student))
            times = np.sort(shape.sample(rng, len(counts)))
            schedule = [(float(t), tokens[f"cap{s:03d}"], uploads.next(f"{s}-{i}"))
                        for i, (t, s) in enumerate(zip(times, counts))]
            started = time.monotonic()
            burst = send_at(client, schedule)
            wait_final(client, burst, timeout=3600)
            wall = time.monotonic() - started
        runs = measured(settings, [run_id for _, run_id in burst])

    waits = np.array([r[2] - r[0] for r in runs])
    results = np.array([r[3] - r[0] for r in runs])
    replay = simulate([Job(a, student, end - start) for a, student, start, end in runs], args.workers)
    draws = np.random.default_rng(args.seed + 1)
    model = [simulate([Job(a, student, float(draws.choice(sample))) for a, student, _, _ in runs], args.workers)
             for _ in range(REPLICATIONS)]
    plan = Planner(Course(args.students, args.per_student, shape), sample, args.seed, REPLICATIONS).waits(args.workers)
    rows = [("measured", waits, results),
            ("replay: measured uploads and grade times", replay.waits, replay.results),
            ("model: measured uploads, warm-up grade times", np.concatenate([m.waits for m in model]),
             np.concatenate([m.results for m in model]))]
    w50, w95 = percentiles(waits)

    def cells(w: tuple[float, float], r: tuple[float, float]) -> str:
        ratio = f"{w[0] / w50:.2f} / {w[1] / w95:.2f}" if w50 > 0 and w95 > 0 else "-"
        return f"{w[0]:.1f} | {w[1]:.1f} | {r[0]:.1f} | {r[1]:.1f} | {ratio} |"

    grades = (f"Stand-in grade (bench/capacity_standin: holds its worker {low:g}-{high:g} s, uniform)." if standin else
              f"Real grades of {args.assignment} ({len(args.zip)} zips in turn), {args.workers} workers on {args.gpus} GPU(s).")
    command = shlex.join([".venv/bin/python", "bench/capacity_check.py", *sys.argv[1:]])
    lines = [
        f"### Capacity model vs a run with {args.workers} workers, {args.profile} profile ({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, {gpu_description()}; commit {current_commit()}. "
        f"{grades} {len(runs)} uploads from {args.students} students ({args.per_student} each, fair share) over {args.window:g} s, "
        f"shape {args.shape}; warm-up: {len(sample)} grades, claim to result median {np.median(sample):.1f} s "
        f"(the burst's own: median {np.median([r[3] - r[2] for r in runs]):.1f} s). "
        f"Burst to the last result: {wall:.0f} s. Wait: upload to claim; result: upload to result; seconds.",
        f"Command: `{command}`",
        "",
        "| | wait p50 | wait p95 | result p50 | result p95 | wait p50 / p95 vs measured |",
        "| --- | --- | --- | --- | --- | --- |",
        *(f"| {label} | {cells(percentiles(w), percentiles(r))}" for label, w, r in rows),
        f"| plan: `grader capacity`'s answer (uploads drawn from the shape) | "
        f"{cells((plan.wait_p50, plan.wait_p95), (plan.result_p50, plan.result_p95))}",
        "",
        f"Per run, replay vs measured wait: mean absolute difference {np.mean(np.abs(replay.waits - waits)):.2f} s.",
    ]
    publish(lines, args.record, "capacity")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
