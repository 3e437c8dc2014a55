"""Upload-to-build latency of the embedded service, cold and with the build cache warm.

    .venv/bin/python bench/upload_to_build.py [--repeats 3] [--record]

Starts the embedded profile (SQLite + SQLite broker in a temp folder, one Celery worker
process, the web app in-process), uploads the reference kit zipped as a student would, and
measures from the upload request to the run's final state. "cold" uploads carry a unique
comment in every kernel source, so nothing comes from the build cache; "cached" uploads
re-send identical sources. Prints a table; --record files it in docs/benchmarks/builds.md
with the machine, date and commit.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks_md import add_smoke_flag, publish, smoke  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

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

KERNEL_SOURCES = ("src/combine.cu", "src/softmax_kernel.cu", "src/layernorm_kernel.cu")


def kit_zip(dest: Path, unique: bool) -> Path:
    tree = dest.parent / (dest.stem + "-tree")
    shutil.copytree(load_rubric("hw4").starter_dir, tree, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    if unique:
        for rel in KERNEL_SOURCES:
            path = tree / rel
            path.write_text(path.read_text() + f"\n// {uuid.uuid4().hex}\n")
    return zip_tree(tree, dest)


def upload_and_wait(client: TestClient, headers: dict[str, str], archive: Path) -> dict[str, Any]:
    with archive.open("rb") as fh:
        created = client.post("/api/v1/submissions", headers=headers, files={"file": ("llmsys_hw4.zip", fh)}).json()
    while True:
        run: dict[str, Any] = client.get(created["run_url"], headers=headers).json()
        if run["state"] in ("built", "scored", "failed"):
            return run
        time.sleep(0.1)


def percentile_summary(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", action="store_true")
    add_smoke_flag(parser)
    args = parser.parse_args()
    quick = smoke(args, parser)  # one cold build (the cached zip's first), then it from the cache
    if quick:
        args.repeats = 1

    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp:
        data = Path(tmp) / "data"
        env = {**os.environ, "KG_DATA_DIR": str(data), "KG_DATABASE_URL": "", "KG_BROKER_URL": ""}
        settings = Settings(data_dir=data)
        init_database(settings)
        with session_scope(make_session_factory(make_engine(settings))) as session:
            course_of_free_assignments(session, "bench", "Bench")  # new users join every course: this one
            token = issue_token(session, get_or_create_user(session, "bench", Role.student), "bench")
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "grader.celery_app", "worker", "-Q", settings.task_queue,
             "--concurrency", "1", "--loglevel", "warning", "--without-gossip", "--without-mingle"],
            cwd=PROJECT_ROOT, env=env,
        )
        rows: dict[str, list[tuple[float, dict[str, float]]]] = {"cold": [], "cached": []}
        try:
            with TestClient(create_app(settings)) as client:
                headers = {"Authorization": f"Bearer {token}"}
                cached_zip = kit_zip(Path(tmp) / "cached.zip", unique=False)
                if not quick:
                    upload_and_wait(client, headers, cached_zip)  # warm the build cache, untimed
                for i in range(args.repeats):
                    for kind in ("cold", "cached"):
                        cold = kind == "cold" and not quick
                        archive = kit_zip(Path(tmp) / f"cold{i}.zip", True) if cold else cached_zip
                        started = time.monotonic()
                        run = upload_and_wait(client, headers, archive)
                        elapsed = time.monotonic() - started
                        assert run["state"] == "built", run
                        rows[kind].append((elapsed, run["toolchain"]["build_seconds"]))
        finally:
            worker.terminate()
            worker.wait(timeout=30)

    nproc = os.cpu_count()
    lines = [
        f"### Upload to build finished, embedded profile ({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {nproc} CPU cores, no GPU; "
        f"{subprocess.run(['nvcc', '--version'], capture_output=True, text=True).stdout.splitlines()[-2]}; "
        f"commit {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=PROJECT_ROOT).stdout.strip()}. "
        f"{args.repeats} uploads of each kind, median (min, max), seconds. "
        "The three nvcc builds run in parallel on the machine's cores, so per-file times include contention.",
        "Command: `.venv/bin/python bench/upload_to_build.py --repeats 3 --record`",
        "",
        "| kind | upload → built (s) | combine.cu (s) | softmax_kernel.cu (s) | layernorm_kernel.cu (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, samples in rows.items():
        total = [s[0] for s in samples]
        per = {name: [s[1][name] for s in samples] for name in ("combine", "softmax_kernel", "layernorm_kernel")}
        lines.append(
            f"| {kind} | {percentile_summary(total)} | {percentile_summary(per['combine'])} | "
            f"{percentile_summary(per['softmax_kernel'])} | {percentile_summary(per['layernorm_kernel'])} |"
        )
    publish(lines, args.record, "builds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
