"""Private Redis and PostgreSQL servers for fault injection, so restarting them disturbs no
one else: the machine's own services (127.0.0.1:6379 and :5432) serve every other test, and
on a shared development machine other people's tests at the same time.

They are started with the machine's own commands (the environment page's Redis command line;
PostgreSQL's pg_ctl as the `postgres` user) on a free port and a folder of their own, and
`stop()` always leaves nothing running. Needs root (PostgreSQL runs as `postgres`).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, up: bool, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            if up:
                return
        except OSError:
            if not up:
                return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} did not go {'up' if up else 'down'} in {timeout} s")


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kg-fault-redis-"))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(self.port),
                        "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                        "--logfile", str(self.dir / "redis.log"), "--pidfile", str(self.dir / "redis.pid")],
                       check=True)
        _wait_for(self.port, up=True)

    def stop(self) -> None:
        """Shut down without saving: every message in the broker is lost, as in a crash."""
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], capture_output=True)
        _wait_for(self.port, up=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivatePostgres:
    """A throw-away cluster (initdb, trust auth) owned by the `postgres` user."""

    def __init__(self) -> None:
        versions = sorted(PG_BIN.iterdir(), key=lambda p: int(p.name)) if PG_BIN.is_dir() else []
        if not versions:
            raise FileNotFoundError("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin = versions[-1] / "bin"
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kg-fault-pg-"))
        self.dir.chmod(0o755)
        self.data = self.dir / "data"
        shutil.chown(self.dir, "postgres", "postgres")
        self._as_postgres([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                           "--no-sync"])

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, argv: list[str]) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, cwd=self.dir)

    def _ctl(self, *args: str) -> None:
        self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args])

    def start(self) -> None:
        self._ctl("-l", str(self.dir / "postgres.log"), "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        _wait_for(self.port, up=True)

    def stop(self) -> None:
        """An immediate stop: every connection is cut, as in a crash."""
        if (self.data / "postmaster.pid").exists():
            self._ctl("-m", "immediate", "stop")
        _wait_for(self.port, up=False)

    def stop_argv(self) -> list[str]:
        """The command line of `stop`, for another process to run at the moment it chooses (see
        tests/faults/small_worker.py, KG_FAULT_STOP_DB_AFTER_CLAIM)."""
        return ["runuser", "-u", "postgres", "--", str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60",
                "-m", "immediate", "stop"]

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
