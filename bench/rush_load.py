"""Deadline rush on loopback: many students upload at once while the gradebook is being read.

    .venv/bin/python bench/rush_load.py [--uploads 500] [--students 120] [--burst 20]
        [--window 300] [--clients 64] [--record]

Starts the production profile on this machine: `grader serve` (uvicorn, one process) on a free
loopback port, a fresh PostgreSQL database on 127.0.0.1:5432 and a queue of its own on the
Redis at 127.0.0.1:6379, with no worker, so every task stays in the broker for inspection.
One student sends a burst of --burst uploads at the start; the rest arrive from the other
students over --window seconds, denser towards the deadline (arrival time = window * u^(1/3)),
through at most --clients concurrent connections. Every client reads its run's status right
after its upload; two staff readers fetch the gradebook (JSON) in a loop throughout.

Then it checks that nothing was lost: every upload answered 201, has its row and its blob
(same sha256 and size), and its place in line: with fair share, each student's first run is
in the broker queue exactly once and the others wait in the database to follow it. It also reports
what the dispatcher did for fair share: how many runs each student has in flight and how many
of the burst student's runs are queued ahead of the other students' first uploads.
Prints a table; --record files it in docs/benchmarks/uploads.md with machine, date and commit.
The database and the queue are removed at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections import Counter, defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT_ROOT), str(PROJECT_ROOT / "bench")]  # also imported by tests/service/test_rush_load.py

import httpx  # noqa: E402
import psycopg  # noqa: E402
from benchmarks_md import add_smoke_flag, record_section, smoke  # noqa: E402
from kombu import Connection  # noqa: E402
from sqlalchemy import select  # noqa: E402

from grader.auth.credentials import issue_token  # noqa: E402
from grader.celery_app import REDIS_PRIORITY_STEPS  # noqa: E402
from grader.cli.main import init_database  # noqa: E402
from grader.course.courses import course_of_free_assignments  # noqa: E402
from grader.course.membership import get_or_create_user  # noqa: E402
from grader.db import make_engine, make_session_factory, session_scope  # noqa: E402
from grader.models import Role, Run, Submission  # noqa: E402
from grader.runs.dispatch import queue_keys  # noqa: E402
from grader.settings import Settings  # noqa: E402
from grader.storage.blobstore import BlobStore  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402

PG_ADMIN_URL = os.environ.get("KG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("KG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass(frozen=True)
class RushConfig:
    uploads: int = 500
    students: int = 120
    burst: int = 20  # uploads of the one student who sends them all at the start
    window_s: float = 300.0
    clients: int = 64
    readers: int = 2
    seed: int = 11868


@dataclass
class Timings:
    upload_ms: list[float] = field(default_factory=list)
    status_ms: list[float] = field(default_factory=list)
    gradebook_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))


@dataclass
class RushResult:
    config: RushConfig
    seconds: float
    timings: Timings
    accepted: dict[int, dict]  # run id -> the 201 body
    lost: list[str]  # every way an upload answered 201 went missing
    in_flight_max: int  # most runs of one student in the broker at once
    burst_ahead: int  # the burst student's runs queued ahead of the median other student's first


def kit_zip() -> bytes:
    root = load_rubric("hw4").starter_dir
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
                zf.write(path, "llmsys_hw4/" + path.relative_to(root).as_posix())
    return buf.getvalue()


def unique_upload(base: bytes, tag: str) -> bytes:
    buf = io.BytesIO(base)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("llmsys_hw4/NOTES.txt", tag)
    return buf.getvalue()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """A fresh database, a queue and `grader serve` on loopback; `close()` removes them."""

    def __init__(self, config: RushConfig) -> None:
        self.db_name = f"kg_rush_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
        base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
        self.data_dir = Path(tempfile.mkdtemp(prefix="kg-rush-"))
        self.port = _free_port()
        self.env = {
            "KG_DATABASE_URL": f"{base}/{self.db_name}", "KG_BROKER_URL": REDIS_URL,
            "KG_DATA_DIR": str(self.data_dir), "KG_TASK_QUEUE": f"kg-rush-{uuid.uuid4().hex[:8]}",
        }
        self.settings = Settings(_env_file=None, **{k[3:].lower(): v for k, v in self.env.items()})  # type: ignore[arg-type,call-arg]
        init_database(self.settings)
        self.engine = make_engine(self.settings)
        self.sessions = make_session_factory(self.engine)
        self.tokens = self._people(config.students)
        self.students = sorted(k for k in self.tokens if k != "staff")  # the first one sends the burst
        self.log = (self.data_dir / "serve.log").open("wb")
        self.server = subprocess.Popen(
            [sys.executable, "-c", "from grader.cli.main import app; app()", "serve", "--host", "127.0.0.1",
             "--port", str(self.port)],
            cwd=PROJECT_ROOT, env={**os.environ, **self.env}, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_until_up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _people(self, students: int) -> dict[str, str]:
        with session_scope(self.sessions) as session:
            course_of_free_assignments(session, "rush", "Rush")  # new users join every course: this one
            tokens = {f"s{i:03d}": issue_token(session, get_or_create_user(session, f"s{i:03d}", Role.student), "rush")
                      for i in range(students)}
            tokens["staff"] = issue_token(session, get_or_create_user(session, "staff", Role.instructor), "rush")
        return tokens

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"grader serve exited: {(self.data_dir / 'serve.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise TimeoutError("grader serve did not come up in 60 s")

    def queued_run_ids(self) -> list[int]:
        """The broker queue's run ids, in the order a worker would take them: kombu keeps one list
        per priority step and pops the lowest step's first, each from its right end."""
        with Connection(REDIS_URL, transport_options={"priority_steps": REDIS_PRIORITY_STEPS}) as connection:
            channel = connection.default_channel
            keys = [channel._q_for_pri(self.env["KG_TASK_QUEUE"], step) for step in channel.priority_steps]
            raw = [m for key in keys for m in reversed(channel.client.lrange(key, 0, -1))]
        return [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in raw]

    def close(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.log.close()
        with Connection(REDIS_URL, transport_options={"priority_steps": REDIS_PRIORITY_STEPS}) as connection:
            channel = connection.default_channel
            channel.client.delete(*queue_keys(channel, [self.env["KG_TASK_QUEUE"]]))
        self.engine.dispose()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        shutil.rmtree(self.data_dir, ignore_errors=True)


def schedule(config: RushConfig, students: list[str]) -> list[tuple[float, str]]:
    """(start second, student) of every upload: the burst at 0, the rest towards the deadline."""
    rng = random.Random(config.seed)
    heavy, others = students[0], students[1:]
    plan = [(0.0, heavy)] * config.burst
    plan += [(config.window_s * rng.random() ** (1 / 3), others[i % len(others)])
             for i in range(config.uploads - config.burst)]
    return sorted(plan)


async def _timed(timings: list[float], failures: dict[str, int], what: str,
                 call: Awaitable[httpx.Response]) -> httpx.Response | None:
    """The response, its latency recorded; None (counted as a failure) when the connection failed."""
    started = time.perf_counter()
    try:
        response = await call
    except httpx.TransportError as exc:
        failures[f"{what} {type(exc).__name__}"] += 1
        return None
    timings.append((time.perf_counter() - started) * 1000)
    if response.status_code >= 400:
        failures[f"{what} {response.status_code}"] += 1
    return response


async def _rush(service: Service, config: RushConfig, base_zip: bytes) -> tuple[Timings, dict[int, dict]]:
    timings, accepted = Timings(), {}
    gate = asyncio.Semaphore(config.clients)
    done = asyncio.Event()
    # Idle connections are dropped before uvicorn's 5 s keep-alive ends, so that no request is
    # sent on a connection the server is closing at that moment.
    limits = httpx.Limits(max_connections=config.clients + config.readers, max_keepalive_connections=config.clients,
                          keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=service.url, timeout=120, limits=limits) as client:
        start = time.monotonic()

        async def upload(at: float, student: str, n: int) -> None:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - start)))
            async with gate:
                headers = {"Authorization": f"Bearer {service.tokens[student]}"}
                data = unique_upload(base_zip, f"{student} upload {n}")
                response = await _timed(timings.upload_ms, timings.failures, "upload", client.post(
                    "/api/v1/submissions", headers=headers, files={"file": ("llmsys_hw4.zip", data)}))
                if response is None or response.status_code != 201:
                    return
                body = response.json()
                accepted[body["run_id"]] = {**body, "student": student, "bytes": len(data)}
                await _timed(timings.status_ms, timings.failures, "status", client.get(body["run_url"], headers=headers))

        async def read_gradebook() -> None:
            headers = {"Authorization": f"Bearer {service.tokens['staff']}"}
            while not done.is_set():
                await _timed(timings.gradebook_ms, timings.failures, "gradebook",
                             client.get("/api/v1/assignments/hw4/gradebook", headers=headers))
                await asyncio.sleep(0.5)

        readers = [asyncio.create_task(read_gradebook()) for _ in range(config.readers)]
        plan = schedule(config, service.students)
        await asyncio.gather(*(upload(at, who, n) for n, (at, who) in enumerate(plan)))
        done.set()
        await asyncio.gather(*readers)
    return timings, accepted


def audit(service: Service, accepted: dict[int, dict]) -> list[str]:
    """Every way an accepted upload is missing: its row, its blob, or its place in line. With
    fair share each student has exactly one run in the broker (once) and the rest wait in the
    database, unsent, to follow it."""
    lost = []
    blobs = BlobStore(service.settings.blob_dir)
    with session_scope(service.sessions) as session:
        rows = {r.id: r for r in session.scalars(select(Run))}
        subs = {s.id: s for s in session.scalars(select(Submission))}
    for run_id, body in accepted.items():
        run, sub = rows.get(run_id), subs.get(body["submission_id"])
        if run is None or sub is None or sub.sha256 != body["sha256"]:
            lost.append(f"run {run_id}: no row")
        elif not blobs.exists(sub.sha256) or blobs.path(sub.sha256).stat().st_size != body["bytes"]:
            lost.append(f"run {run_id}: no blob")
        elif run.state.value != "queued":
            lost.append(f"run {run_id}: state {run.state.value}")
    in_broker = Counter(service.queued_run_ids())
    by_student: dict[str, list[int]] = defaultdict(list)
    for run_id, body in accepted.items():
        by_student[body["student"]].append(run_id)
    for student, run_ids in by_student.items():
        sent = [r for r in run_ids if in_broker[r]]
        if len(sent) != 1 or in_broker[sent[0]] != 1:
            lost.append(f"{student}: runs in the broker {[(r, in_broker[r]) for r in sent]}, want one, once")
        lost += [f"run {r}: marked sent but not in the broker" for r in run_ids
                 if not in_broker[r] and r in rows and rows[r].enqueued_at is not None]
    lost += [f"run {r}: waiting, broker unreachable at upload" for r, b in accepted.items() if not b["queued"]]
    return lost


def fairness(service: Service, accepted: dict[int, dict]) -> tuple[int, int]:
    """(most runs of one student in the broker, burst runs ahead of the median other student's
    first run in the broker's order)."""
    queued = service.queued_run_ids()
    owner = {r: accepted[r]["student"] for r in queued if r in accepted}
    per_student: dict[str, int] = defaultdict(int)
    for student in owner.values():
        per_student[student] += 1
    heavy = service.students[0]
    firsts, heavy_seen = [], 0
    seen: set[str] = set()
    for run_id in queued:
        student = owner.get(run_id)
        if student == heavy:
            heavy_seen += 1
        elif student is not None and student not in seen:
            seen.add(student)
            firsts.append(heavy_seen)
    return max(per_student.values(), default=0), int(statistics.median(firsts)) if firsts else 0


def run_rush(config: RushConfig) -> RushResult:
    service = Service(config)
    try:
        return _measure(service, config)
    except BaseException:
        print("grader serve's log, last lines:\n" + (service.data_dir / "serve.log").read_text()[-6000:], file=sys.stderr)
        raise
    finally:
        service.close()


def _measure(service: Service, config: RushConfig) -> RushResult:
    started = time.monotonic()
    timings, accepted = asyncio.run(_rush(service, config, kit_zip()))
    seconds = time.monotonic() - started
    lost = audit(service, accepted)
    in_flight, ahead = fairness(service, accepted)
    return RushResult(config, seconds, timings, accepted, lost, in_flight, ahead)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def table(result: RushResult) -> str:
    c = result.config
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=PROJECT_ROOT).stdout.strip()
    zip_kib = next(iter(result.accepted.values()))["bytes"] // 1024 if result.accepted else 0
    rows = [(f"upload (POST /api/v1/submissions, ~{zip_kib} KiB zip)", result.timings.upload_ms),
            ("run status (GET /api/v1/runs/{id})", result.timings.status_ms),
            ("gradebook JSON (staff, read in a loop)", result.timings.gradebook_ms)]
    lines = [
        f"### Deadline rush, {c.uploads} uploads from {c.students} students in {c.window_s:g} s, PostgreSQL + Redis "
        f"({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}; commit {commit}. "
        f"`grader serve` (one uvicorn process) on loopback, no worker (tasks stay in Redis for the audit); "
        f"one student sends {c.burst} uploads at once at the start, the others' arrive denser towards the deadline "
        f"(time = window x u^(1/3)) through at most {c.clients} concurrent clients, each reading its run's status "
        f"after the upload; {c.readers} staff clients read the gradebook throughout. Took {result.seconds:.0f} s.",
        f"Command: `.venv/bin/python bench/rush_load.py --uploads {c.uploads} --students {c.students} "
        f"--burst {c.burst} --window {c.window_s:g} --clients {c.clients} --record`",
        "",
        "| request | count | p50 ms | p99 ms | max ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, values in rows:
        lines.append(f"| {name} | {len(values)} | {_pct(values, 0.5):.1f} | {_pct(values, 0.99):.1f} | "
                     f"{max(values, default=float('nan')):.1f} |")
    failures = ", ".join(f"{n} x {what}" for what, n in sorted(result.timings.failures.items()))
    lines += [
        "",
        f"Stored and queued: {len(result.accepted)} of {c.uploads} uploads answered 201, each with its row, its blob "
        f"and its place in line (one run per student in the broker, the rest waiting); lost after a 201: {len(result.lost)}; "
        f"refused or failed requests: {failures or 'none'}. Fair share: at most {result.in_flight_max} run(s) of one "
        f"student in the broker at once; the median other student's first upload queued behind "
        f"{result.burst_ahead} of the burst student's runs"
        + (" (not enforced: the dispatcher sends every upload at once; grader/runs/fairshare.py, once wired, "
           "keeps both at 1)." if result.in_flight_max > 1 else "."),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=500)
    parser.add_argument("--students", type=int, default=120)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--window", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--record", action="store_true", help="file the table in docs/benchmarks/uploads.md")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.uploads, args.students, args.burst, args.window, args.clients = 10, 3, 2, 2.0, 2
    result = run_rush(RushConfig(args.uploads, args.students, args.burst, args.window, args.clients))
    text = table(result)
    print(text)
    if args.record:  # failures too: they are the finding
        print(f"recorded in {record_section(text, 'uploads')}")
    if result.lost or result.timings.failures:
        print("LOST:", *result.lost[:20], "FAILED:", dict(result.timings.failures), sep="\n  ")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
