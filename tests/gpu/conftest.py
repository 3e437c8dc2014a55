"""GPU suite fixtures: the reference kit (starter/hw4) built with nvcc once per session.

Runs on the bare GPU machine: only the standard library, PyYAML, numpy and the project's
own dependency-free modules are imported here.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from worker.build import Toolchain, build_kernels, cuda_include_dirs
from worker.rubric import load_rubric

GPU_ARCH = os.environ.get("KG_CUDA_ARCH", "native")


@pytest.fixture(scope="session")
def kit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of starter/hw4 (the full reference solution) with its three .so files built."""
    rubric = load_rubric("hw4")
    root = tmp_path_factory.mktemp("kit") / "llmsys_hw4"
    shutil.copytree(rubric.starter_dir, root, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    toolchain = Toolchain(
        nvcc=os.environ.get("KG_NVCC", "nvcc"),
        flags=(*rubric.nvcc_flags, f"-arch={GPU_ARCH}"),
        include_dirs=cuda_include_dirs(),
    )
    results = build_kernels(root, list(rubric.kernels), toolchain)
    failed = [r for r in results if not r.ok]
    if failed:
        pytest.fail("reference kit failed to build:\n" + "\n".join(f"{r.name}:\n{r.log}" for r in failed))
    for r in results:
        print(f"built {r.name} in {r.seconds:.1f} s")
    return root


@pytest.fixture()
def in_kit(kit_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cwd = the built kit and its minitorch importable, as the course's code expects."""
    monkeypatch.chdir(kit_root)
    monkeypatch.syspath_prepend(str(kit_root))
    for name in [m for m in sys.modules if m == "minitorch" or m.startswith("minitorch.")]:
        del sys.modules[name]
    return kit_root
