"""A worker's toolchain check at start on a real GPU (worker/toolchain.py): NVML's compute
capability, this nvcc building for the GPU's own architecture, and KG_CUDA_ARCH against the GPU.
Standard library and the engine only (the bare GPU machine)."""
from __future__ import annotations

import os

import pytest

from worker.build import Toolchain, ToolchainFault
from worker.rubric import load_rubric
from worker.telemetry import gpu_compute_capability
from worker.toolchain import check_toolchain

pytestmark = pytest.mark.gpu
NVCC = os.environ.get("KG_NVCC", "nvcc")


def _hw4(arch: str) -> list[Toolchain]:
    return [Toolchain(NVCC, (*load_rubric("hw4").nvcc_flags, f"-arch={arch}"), timeout_s=300)]


def _gpu() -> tuple[int, int]:
    gpu = gpu_compute_capability(0)
    if gpu is None:
        pytest.skip("NVML (pynvml) does not report GPU 0 here")
    return gpu


def test_this_gpus_own_architecture_passes() -> None:
    gpu = _gpu()
    own = f"sm_{gpu[0]}{gpu[1]}"
    found = check_toolchain(_hw4(own), own, gpu)
    print(found)
    assert f"builds for {own}" in found and f"this GPU ({own}) is supported" in found


def test_an_architecture_newer_than_this_gpu_is_refused_with_the_one_to_use() -> None:
    gpu = _gpu()
    newer = "sm_120" if gpu < (12, 0) else None
    if newer is None:
        pytest.skip("no architecture this nvcc knows is newer than this GPU")
    with pytest.raises(ToolchainFault, match=rf"does not run on this GPU, of compute capability {gpu[0]}\.{gpu[1]}: "
                                             rf"set KG_CUDA_ARCH=sm_{gpu[0]}{gpu[1]}"):
        check_toolchain(_hw4(newer), newer, gpu)
