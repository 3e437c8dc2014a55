"""A sandboxed child (worker.gpu.child) serves the operations an assignment names: a module of
the project, or a .py file copied into the child's tree (an assignment kept beside its rubric,
as tests/assignments/reduce). No GPU: the operations here only compute."""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from worker.gpu.client import ChildClient, StudentError
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy

MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=60, cpu_s=60, memory_bytes=1024 * MiB, max_processes=16, file_size_bytes=16 * MiB)
OPERATIONS = textwrap.dedent("""
    from worker.gpu.child import handler

    @handler("twice")
    def twice(state, msg):
        return {"value": 2 * msg["x"], "root": str(state.root)}
""")


def test_operations_from_a_file_in_the_tree_are_served(tmp_path: Path) -> None:
    (tmp_path / "kg_ops.py").write_text(OPERATIONS)
    sandbox = Sandbox(LIMITS, SandboxPolicy(user=None, isolate_network=False))
    with ChildClient(sandbox, tmp_path, (str(tmp_path / "kg_ops.py"),), 4096) as child:
        assert child.call({"op": "ready"}, 60)["python"]
        assert child.call({"op": "twice", "x": 21}, 30) == {"value": 42, "root": str(tmp_path), "ok": True}
        with pytest.raises(StudentError, match="unknown operation 'thrice'"):
            child.call({"op": "thrice", "x": 1}, 30)


LINGERING = textwrap.dedent("""
    import threading, time
    from worker.gpu.child import handler

    @handler("linger")
    def linger(state, msg):
        threading.Thread(target=time.sleep, args=(120,)).start()  # the process outlives its channel
        return {}
""")


def test_a_child_slow_to_exit_is_killed_not_a_failed_grade(tmp_path: Path) -> None:
    """A child that does not exit when its channel closes (as one tearing down CUDA on a busy host
    did, past 10 s) is killed once the wait is over; closing it never raises."""
    (tmp_path / "kg_ops.py").write_text(LINGERING)
    sandbox = Sandbox(LIMITS, SandboxPolicy(user=None, isolate_network=False))
    child = ChildClient(sandbox, tmp_path, (str(tmp_path / "kg_ops.py"),), 4096)
    child.call({"op": "linger"}, 30)
    started = time.monotonic()
    child.close(wait_s=1.0)
    assert time.monotonic() - started < 10 and not child.process.alive
