"""Problem 3 on the GPU: the reference kit's DecoderLM at the course configuration (vocab 10000,
n_embd 256, 8 heads, 40 positions, batch 128) on CudaKernelOps, in the sandboxed child,
measured by rubrics.hw4.problem3 within its 3-minute budget: every check passes and the fused
model's forward+backward step is faster than the unfused one."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rubrics.hw4.problem3 import HANDLERS, Problem3Config, arena_bytes, measure_problem3
from worker.gpu.client import ChildClient
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy
from worker.telemetry import gpu_snapshot

pytestmark = pytest.mark.gpu

GiB = 1 << 30
LIMITS = SandboxLimits(wall_s=420, cpu_s=20000, memory_bytes=48 * GiB, max_processes=64,
                       file_size_bytes=4 * GiB, open_files=1024)


def test_course_config_within_budget(kit_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "llmsys_hw4"
    shutil.copytree(kit_root, root, ignore=shutil.ignore_patterns("__pycache__", ".kg-arena"))
    config = Problem3Config()  # the course's configuration, CUDA backend, 180 s budget
    sandbox = Sandbox(LIMITS, SandboxPolicy(user=None, gpu_index=0))  # a policy without a GPU gives the child none
    with ChildClient(sandbox, root, (HANDLERS,), arena_bytes(config), gpu_index=0) as client:
        m = measure_problem3(client, config, np.random.default_rng(11868), telemetry=lambda: gpu_snapshot(0))
    info = m.telemetry["problem3"]
    for case in m.cases_by("binding"):
        print(case.describe())
    print("speedup (unfused/fused step):", m.figure("student").describe() if m.figure("student") else None)
    print(json.dumps({k: info.get(k) for k in ("setup_s", "first_steps", "losses", "causality", "timing", "memory",
                                         "elapsed_s")},
                     default=str, indent=1))
    assert m.status == "ok", m.log_tail
    assert m.all_passed, [c.describe() for c in m.failed_cases]
    assert info["elapsed_s"] <= config.budget_s + 5, info["timing"]
    s = m.figure("student")
    assert s is not None and s.trials >= config.min_pairs
    assert s.speedup > 1.0
    for model in ("unfused", "fused"):  # each step's own peaks, the device's sampled in the checked steps
        peak = info["memory"][model]
        assert peak["host_peak_mib"] > 0 and peak["device_used_peak_mib"] > 0, info["memory"]
