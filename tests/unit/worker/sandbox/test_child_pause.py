"""A paused sandboxed child makes no progress, descendants included, until it is resumed."""
from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy

MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=30, cpu_s=30, memory_bytes=512 * MiB, max_processes=16, file_size_bytes=16 * MiB)
# The child and a forked grandchild each count up in their own file as fast as they can.
COUNTER = textwrap.dedent("""
    import os, sys
    name = "child.txt" if os.fork() else "grandchild.txt"
    n = 0
    while True:
        n += 1
        if n % 1000 == 0:
            with open(name + ".tmp", "w") as f:
                f.write(str(n))
            os.replace(name + ".tmp", name)
""")


def _job_view(pid: int, cwd: Path) -> Path:
    """The job folder as the sandboxed job sees it, live (its own mount namespace: what it writes
    reaches the real folder only when it ends), through its namespace's init, the launcher's child."""
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    return Path(f"/proc/{name}/root{cwd}")
        except (OSError, ValueError, IndexError):
            continue
    raise AssertionError("the sandbox's init is gone")


def _counts(cwd: Path) -> tuple[int, int]:
    return tuple(int((cwd / name).read_text() or 0) for name in ("child.txt", "grandchild.txt"))  # type: ignore[return-value]


def _wait_for_files(cwd: Path) -> None:
    deadline = time.monotonic() + 10
    while not all((cwd / n).exists() for n in ("child.txt", "grandchild.txt")):
        assert time.monotonic() < deadline, "the counters never started"
        time.sleep(0.05)


def test_pause_freezes_the_child_and_its_descendants(tmp_path: Path) -> None:
    proc = Sandbox(LIMITS, SandboxPolicy(user=None, isolate_network=False)).spawn(
        [sys.executable, "-I", "-c", COUNTER], cwd=tmp_path, env={})
    view = _job_view(proc.pid, tmp_path)
    try:
        _wait_for_files(view)
        proc.pause()
        time.sleep(0.2)  # a write in flight lands
        frozen = _counts(view)
        time.sleep(0.5)
        assert _counts(view) == frozen
        proc.resume()
        time.sleep(0.5)
        after = _counts(view)
        assert after[0] > frozen[0] and after[1] > frozen[1], (frozen, after)
    finally:
        proc.kill()
        proc.wait(timeout=10)
