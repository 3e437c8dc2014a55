"""A run whose tests need PostgreSQL or Redis, where one does not answer, stops before any test
in one line saying what to start and which variable points elsewhere (tests/conftest.py); a run
that needs neither is not stopped."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again once this returns: nothing listens there


def run_pytest(target: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target],
                          cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_postgres_and_redis_down_stop_the_run_in_one_line() -> None:
    pg, redis = closed_port(), closed_port()
    out = run_pytest("tests/service/test_api.py", KG_TEST_PG_URL=f"postgresql://postgres@127.0.0.1:{pg}/postgres",
                     KG_TEST_REDIS_URL=f"redis://127.0.0.1:{redis}/0")
    assert out.returncode == 4, out.stdout[-2000:]
    (line,) = [ln for ln in out.stdout.splitlines() if "not answering" in ln]
    assert f"PostgreSQL is not answering at 127.0.0.1:{pg}" in line and "set KG_TEST_PG_URL" in line
    assert f"Redis is not answering at 127.0.0.1:{redis}" in line and "set KG_TEST_REDIS_URL" in line
    assert "Traceback" not in out.stdout + out.stderr and " passed" not in out.stdout


def test_tests_that_need_neither_run_without_them() -> None:
    out = run_pytest("tests/unit/worker/test_checks.py",
                     KG_TEST_PG_URL=f"postgresql://postgres@127.0.0.1:{closed_port()}/x")
    assert out.returncode == 0 and "not answering" not in out.stdout, out.stdout[-2000:]
