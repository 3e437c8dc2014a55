"""Memory and latency of the upload path: a streamed upload must not grow the server with its size.

    .venv/bin/python bench/upload_memory.py [--sizes 1,16,64,256] [--repeats 3] [--record]

Starts `grader serve` (uvicorn, one process, embedded profile in a temp folder, no worker) on a
free loopback port, creates a student and a token with the CLI, then uploads zips of growing
size (one member of random, incompressible bytes) over real HTTP, streamed from disk by httpx.
After each size it reads the server's peak resident memory (VmHWM in /proc) and reports, per
size, the median upload time, the throughput and the peak RSS so far. Peak RSS only grows, so
a flat column is the proof that no upload was held in memory whole.
Prints a table; --record files it in docs/benchmarks/uploads.md with machine, date and commit.
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import date
from pathlib import Path

import httpx

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "bench"))
from benchmarks_md import add_smoke_flag, current_commit, publish, smoke  # noqa: E402

GRADER = Path(sys.executable).with_name("grader")
MiB = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_zip(path: Path, size_mib: int) -> Path:
    """A zip holding `size_mib` MiB of random bytes, stored (compression cannot shrink it)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf, zf.open("llmsys_hw4/blob.bin", "w", force_zip64=True) as member:
        for _ in range(size_mib):
            member.write(os.urandom(MiB))
    return path


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def cli(env: dict[str, str], *args: str) -> str:
    return subprocess.run([str(GRADER), *args], env=env, check=True, capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,16,64,256", help="upload sizes in MiB, ascending")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", action="store_true")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.sizes, args.repeats = "1", 1
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="kg-bench-mem-") as tmp:
        work = Path(tmp)
        port = free_port()
        env = {**os.environ, "KG_DATA_DIR": str(work / "data"), "KG_MAX_UPLOAD_BYTES": str((max(sizes) + 1) * MiB),
               "KG_UPLOAD_RATE_LIMIT": "0"}
        cli(env, "migrate")
        # a course holding hw4: the new student joins the one course there is
        cli(env, "course", "create", "bench", "--title", "Upload bench", "--assignment", "hw4")
        cli(env, "user", "add", "bench-student")
        token = cli(env, "token", "create", "bench-student").splitlines()[-1]
        server = subprocess.Popen([str(GRADER), "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        rows = []
        try:
            with httpx.Client(base_url=base, timeout=300) as http:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        http.get("/api/v1/health")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                idle = peak_rss_mib(server.pid)
                for size in sizes:
                    archive = random_zip(work / f"upload-{size}.zip", size)
                    seconds = []
                    for _ in range(args.repeats):
                        with archive.open("rb") as fh:
                            started = time.perf_counter()
                            reply = http.post("/api/v1/submissions", headers={"Authorization": f"Bearer {token}"},
                                              files={"file": ("llmsys_hw4.zip", fh, "application/zip")})
                            seconds.append(time.perf_counter() - started)
                        if reply.status_code != 201:
                            raise RuntimeError(f"{size} MiB upload: {reply.status_code} {reply.text[:300]}")
                    median = statistics.median(seconds)
                    rows.append((size, median, min(seconds), max(seconds), archive.stat().st_size / MiB / median,
                                 peak_rss_mib(server.pid)))
                    archive.unlink()
        finally:
            server.terminate()
            server.wait(timeout=30)

    commit = current_commit()
    table = [
        f"### Upload memory and latency, streamed uploads ({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}; commit {commit}. "
        f"`grader serve` (uvicorn, one process, embedded profile), uploads over loopback HTTP streamed from disk; "
        f"{args.repeats} uploads per size. Server peak RSS idle: {idle:.0f} MiB.",
        f"Command: `.venv/bin/python bench/upload_memory.py --sizes {args.sizes} --repeats {args.repeats} --record`",
        "",
        "| upload (MiB) | time, median (min, max) s | MiB/s | server peak RSS so far (MiB) |",
        "| --- | --- | --- | --- |",
    ]
    for size, median, lo, hi, rate, peak in rows:
        table.append(f"| {size} | {median:.2f} ({lo:.2f}, {hi:.2f}) | {rate:.0f} | {peak:.0f} |")
    publish(table, args.record, "uploads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
