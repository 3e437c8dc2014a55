"""A sandboxed child (worker.gpu.child) serves the operations an assignment names: a module of
the project, or a .py file copied into the child's tree (an assignment kept beside its rubric,
as tests/assignments/reduce). No GPU: the operations here only compute."""
from __future__ import annotations

import textwrap
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
