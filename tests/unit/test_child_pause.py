"""A paused sandboxed child makes no progress, descendants included, until it is resumed."""
from __future__ import annotations

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
    try:
        _wait_for_files(tmp_path)
        proc.pause()
        time.sleep(0.2)  # a write in flight lands
        frozen = _counts(tmp_path)
        time.sleep(0.5)
        assert _counts(tmp_path) == frozen
        proc.resume()
        time.sleep(0.5)
        after = _counts(tmp_path)
        assert after[0] > frozen[0] and after[1] > frozen[1], (frozen, after)
    finally:
        proc.kill()
        proc.wait(timeout=10)
