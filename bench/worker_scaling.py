"""Throughput of the control plane with several workers on one queue, and the scaling model.

    .venv/bin/python bench/worker_scaling.py [--runs 50] [--workers 1,2,4] [--record]

Production profile on this machine: a fresh PostgreSQL database, a queue of its own on the
Redis at 127.0.0.1:6379, the web app in-process, and N `grader worker` processes started as
docker-compose.yml starts them. There is no GPU here, so every run ends `built`: what is
measured is everything around the GPU stage (upload, queue, claim, unpack, stage, the build
cache, results, heartbeats), i.e. the load a run puts on the shared parts. The kit is built
once before the timed rounds, so the rounds hit the build cache, as re-grades and the many
near-identical uploads of a deadline do.

For each N: --runs uploads from as many students at once, then the wall time until all are
final; runs per hour, and per run the PostgreSQL commits and Redis commands it cost. The
model then combines them with the GPU stage times measured on the H200 (docs/benchmarks/grade-time.md):
grades per hour per GPU, and how many GPUs the shared parts would feed at this cost.
Prints a table; --record files it in docs/benchmarks/capacity.md with machine, date and commit.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import date
from pathlib import Path

import psycopg
import redis
from fastapi.testclient import TestClient

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT_ROOT), str(PROJECT_ROOT / "bench")]

from benchmarks_md import add_smoke_flag, current_commit, publish, smoke  # noqa: E402

from grader.app import create_app  # noqa: E402
from grader.auth.credentials import issue_token  # noqa: E402
from grader.cli.main import init_database  # noqa: E402
from grader.course.courses import course_of_free_assignments  # noqa: E402
from grader.course.membership import get_or_create_user  # noqa: E402
from grader.db import make_engine, make_session_factory, session_scope  # noqa: E402
from grader.models import Role  # noqa: E402
from grader.settings import Settings  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.starter_kit import zip_tree  # noqa: E402

PG_ADMIN_URL = os.environ.get("KG_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("KG_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
GRADER = Path(sys.executable).with_name("grader")
# the console script where the project is installed; else the CLI through this interpreter (a bare GPU machine)
GRADER_COMMAND = [str(GRADER)] if GRADER.exists() else [sys.executable, "-c", "from grader.cli.main import app; app()"]
FINAL = ("built", "scored", "failed")
# GPU stage seconds per run on one H200 (docs/benchmarks/grade-time.md, "Two-phase GPU stage"): the four
# kernel problems (median of the two kernel-only re-grades) and the whole grade.
GPU_STAGE_S = {"kernel problems": 62.0, "full grade (with Problem 3)": 113.2}
# A count unchanged for this long has settled (idle backends report within about a second);
# one still moving after the limit is read as it stands.
STATS_SETTLE_S = 1.5
STATS_SETTLE_LIMIT_S = 20.0


@contextmanager
def fresh_database() -> Iterator[str]:
    name = f"kg_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_commits(database_url: str) -> int:
    """The database's committed transactions, once the count has settled: a backend reports its
    counts to pg_stat_database about a second after it goes idle (PostgreSQL 15), so a count read
    at once misses the last second's commits (a short round read that way came out negative)."""
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        def read() -> int:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
            return int(row[0]) if row else 0
        deadline, last = time.monotonic() + STATS_SETTLE_LIMIT_S, read()
        while time.monotonic() < deadline:
            time.sleep(STATS_SETTLE_S)
            now = read()
            if now == last:
                return now
            last = now
        return last


def redis_commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


@contextmanager
def workers(count: int, env: dict[str, str], logs: Path, gpus: int = 0) -> Iterator[None]:
    """`count` `grader worker` processes, the i-th on GPU i (with `gpus`, GPU i mod `gpus`: several
    workers share a GPU), until the block ends."""
    procs = []
    try:
        for i in range(count):
            log = logs / f"worker-{count}-{i}.log"
            gpu = str(i % gpus if gpus else i)
            procs.append((subprocess.Popen([*GRADER_COMMAND, "worker"], env={**env, "CUDA_VISIBLE_DEVICES": gpu},
                                           stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True), log))
        deadline = time.monotonic() + 120
        while not all(" ready." in log.read_text(errors="replace") for _, log in procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
                raise RuntimeError("a worker did not start: " + procs[0][1].read_text(errors="replace")[-2000:])
            time.sleep(0.2)
        yield
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            proc.wait(timeout=60)


def upload_all(client: TestClient, tokens: list[str], archive: bytes) -> list[tuple[str, int]]:
    runs = []
    for token in tokens:
        reply = client.post("/api/v1/submissions", headers={"Authorization": f"Bearer {token}"},
                            files={"file": ("llmsys_hw4.zip", archive, "application/zip")})
        if reply.status_code != 201:
            raise RuntimeError(f"upload: {reply.status_code} {reply.text[:300]}")
        runs.append((token, int(reply.json()["run_id"])))
    return runs


def wait_final(client: TestClient, runs: list[tuple[str, int]], timeout: float) -> tuple[list[dict], int]:
    """The runs once all are final, and how many status requests that took."""
    deadline = time.monotonic() + timeout
    pending: list[tuple[str, int]] = list(runs)
    done: list[dict] = []
    polls = 0
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} runs not final after {timeout:.0f} s")
        still: list[tuple[str, int]] = []
        for token, run_id in pending:
            run = client.get(f"/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"}).json()
            polls += 1
            if run["state"] in FINAL:
                done.append(run)
            else:
                still.append((token, run_id))
        pending = still
        if pending:
            time.sleep(0.2)
    return done, polls


def commits_per_status_request(client: TestClient, database_url: str, token: str, run_id: int) -> float:
    """PostgreSQL commits one status request costs (this script's polling, not the system's)."""
    before = pg_commits(database_url)
    for _ in range(20):
        client.get(f"/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
    return (pg_commits(database_url) - before) / 20


def timed_round(client: TestClient, database_url: str, broker: redis.Redis, tokens: list[str], archive: bytes,
                count: int, poll_cost: float, held: AbstractContextManager[object]) -> tuple[int, float, float, float, float]:
    """One upload from every student at once while `held` holds `count` workers, until all are
    final: (workers, wall seconds, runs per hour, PostgreSQL commits and Redis commands per run)."""
    with held:
        commits, commands = float(pg_commits(database_url)), redis_commands(broker)
        started = time.monotonic()
        runs, polls = wait_final(client, upload_all(client, tokens, archive), timeout=1800)
        wall = time.monotonic() - started
        commits = pg_commits(database_url) - commits - polls * poll_cost
        commands = redis_commands(broker) - commands
    states = {r["state"] for r in runs}
    if states != {"built"}:
        raise RuntimeError(f"runs ended {states}")
    return count, wall, len(tokens) * 3600 / wall, commits / len(tokens), commands / len(tokens)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--record", action="store_true")
    add_smoke_flag(parser)
    args = parser.parse_args()
    quick = smoke(args, parser)
    if quick:
        args.runs, args.workers = 2, "1"
    counts = [int(n) for n in args.workers.split(",")]
    queue = f"kg-bench-{uuid.uuid4().hex[:8]}"
    broker = redis.Redis.from_url(REDIS_URL)
    rows = []
    with fresh_database() as database_url, tempfile.TemporaryDirectory(prefix="kg-bench-scale-") as tmp:
        data = Path(tmp) / "data"
        env = {**os.environ, "KG_DATABASE_URL": database_url, "KG_BROKER_URL": REDIS_URL, "KG_DATA_DIR": str(data),
               "KG_TASK_QUEUE": queue, "KG_GPU_GRADING": "off", "KG_UPLOAD_RATE_LIMIT": "0",
               # the warm-up's student uploads the same zip again in every round: a new run each time
               "KG_UPLOAD_DEDUP_WINDOW_S": "0"}
        settings = Settings(_env_file=None, database_url=database_url, broker_url=REDIS_URL,  # type: ignore[call-arg]
                            data_dir=data, task_queue=queue, gpu_grading="off", upload_rate_limit=0,
                            upload_dedup_window_s=0)
        init_database(settings)
        with session_scope(make_session_factory(make_engine(settings))) as session:
            course_of_free_assignments(session, "bench", "Bench")  # new users join every course: this one
            tokens = [issue_token(session, get_or_create_user(session, f"student{i:03d}", Role.student), "bench")
                      for i in range(args.runs)]
        archive = zip_tree(load_rubric("hw4").starter_dir, Path(tmp) / "kit.zip").read_bytes()
        try:
            with TestClient(create_app(settings)) as client:
                warm = ExitStack()  # a smoke run's one round keeps the warm-up's worker: one start less
                with warm:
                    warm.enter_context(workers(1, env, Path(tmp)))  # fill the build cache, untimed
                    first = upload_all(client, tokens[:1], archive)
                    wait_final(client, first, timeout=300)
                    if not quick:
                        warm.close()
                    poll_cost = commits_per_status_request(client, database_url, *first[0])
                    rows += [timed_round(client, database_url, broker, tokens, archive, count, poll_cost,
                                         nullcontext() if quick else workers(count, env, Path(tmp))) for count in counts]
        finally:
            broker.delete(queue)

    per_run_commits = statistics.median(r[3] for r in rows)
    per_run_commands = statistics.median(r[4] for r in rows)
    lines = [
        f"### Control-plane throughput with several workers on one queue ({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, no GPU; PostgreSQL and Redis on the same "
        f"machine; commit {current_commit()}. {args.runs} uploads from {args.runs} students at once per round, "
        "runs end `built` (no GPU stage), every kernel from the build cache. PostgreSQL commits "
        f"exclude this script's status polling ({poll_cost:.1f} per request, measured and subtracted).",
        f"Command: `.venv/bin/python bench/worker_scaling.py --runs {args.runs} --workers {args.workers} --record`",
        "",
        "| workers | uploads -> all final (s) | runs / hour | PostgreSQL commits / run | Redis commands / run |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {n} | {wall:.1f} | {rate:.0f} | {c:.1f} | {r:.0f} |" for n, wall, rate, c, r in rows),
        "",
        "Scaling model: each GPU worker spends its run's GPU stage alone on its GPU (builds come from the "
        "CPU build queue or the cache), so grades per hour per GPU = 3600 / GPU stage seconds (H200, "
        "docs/benchmarks/grade-time.md). The shared parts see only the per-run costs above plus a heartbeat commit every "
        f"{settings.heartbeat_interval_s:g} s per run in flight.",
        "",
        "| GPU stage | seconds (H200) | grades / hour / GPU | PostgreSQL commits / s at 100 GPUs | Redis commands / s at 100 GPUs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, seconds in GPU_STAGE_S.items():
        per_gpu = 3600 / seconds
        commits_100 = 100 * (per_gpu * per_run_commits / 3600 + 1 / settings.heartbeat_interval_s)
        commands_100 = 100 * per_gpu * per_run_commands / 3600
        lines.append(f"| {label} | {seconds:.0f} | {per_gpu:.0f} | {commits_100:.0f} | {commands_100:.0f} |")
    publish(lines, args.record, "capacity")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
