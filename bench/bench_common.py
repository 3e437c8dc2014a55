"""What the fidelity and gaming benches share: the timestamped log line, the results file
rewritten after every result, and the run's description (GPU, commit, command line).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks_md import current_commit

ROOT = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class ResultStore:
    """The results so far, rewritten to `path` (atomically) after every change."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {"meta": meta, "harness": {}, "grader": {}}
        self._lock = threading.Lock()
        self.write()

    def update(self, change: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            change(self.data)
            self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def gpu_description() -> str:
    if shutil.which("nvidia-smi") is None:
        return "no GPU (no nvidia-smi)"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown GPU"
    first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if not first:
        return "no GPU (nvidia-smi found none)"
    name, _, driver = first.partition(",")
    return f"{name.strip()} (driver {driver.strip()})" if driver else name.strip()


def safe_commit() -> str:
    """benchmarks_md.current_commit, or "" where git is missing (a copy of the tree without it)."""
    try:
        return current_commit()
    except OSError:
        return ""


def command_line(argv: list[str]) -> str:
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(ROOT)
    except ValueError:
        pass
    return shlex.join(["python3", script.as_posix(), *argv[1:]])
