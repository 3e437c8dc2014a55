"""The worker's sandbox canary (worker/sandbox/canary.py) on a GPU host, as the worker runs it
before its first job: under the GPU stage's policy (the GPU's device files in the view) and the
build's (the CUDA toolkit read-only), the child has every namespace of its own, the syscall
filter, the control group caps, and cannot see a host file planted beside it. Standard library
and the engine only (the bare GPU machine)."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.sandbox import SandboxPolicy, cgroups
from worker.sandbox.canary import prove_sandbox

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need a root parent")]
USER = os.environ.get("KG_SANDBOX_USER", "nobody") or None
NVCC = shutil.which(os.environ.get("KG_NVCC", "nvcc"))


@pytest.fixture
def host_secret() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="kg-canary-gpu-"))
    folder.chmod(0o755)
    path = folder / ".env"
    path.write_text("KG_SECRET_KEY=canary\n")
    path.chmod(0o644)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def test_the_gpu_stage_policy_proves_itself(host_secret: Path) -> None:
    assert cgroups.available(), "the GPU host offers no cgroup v2 controllers to the worker"
    assert prove_sandbox(SandboxPolicy(user=USER, gpu_index=0), [host_secret]) == []


@pytest.mark.skipif(NVCC is None, reason="no nvcc here")
def test_the_build_policy_proves_itself(host_secret: Path) -> None:
    toolkit = str(Path(NVCC).resolve().parents[1])  # type: ignore[arg-type]
    assert prove_sandbox(SandboxPolicy(user=USER, read_only=(toolkit,)), [host_secret]) == []
