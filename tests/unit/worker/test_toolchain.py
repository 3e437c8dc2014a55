"""A worker's toolchain check at start (worker/toolchain.py), with the real nvcc where one is
installed (no GPU needed to compile): the GPU's compute capability is given as NVML would
report it."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_build import NVCC, needs_nvcc

from worker.build import Toolchain, ToolchainFault
from worker.rubric import load_rubric
from worker.toolchain import arch_capability, check_toolchain, runs_on


def _hw4(arch: str, nvcc: str | None = NVCC) -> list[Toolchain]:
    return [Toolchain(nvcc or "", (*load_rubric("hw4").nvcc_flags, f"-arch={arch}"), timeout_s=120)]


def test_architecture_names_and_what_runs_where() -> None:
    assert arch_capability("sm_90") == ((9, 0), "")
    assert arch_capability("compute_100a") == ((10, 0), "a")
    assert arch_capability("sm_121f") == ((12, 1), "f")
    assert arch_capability("native") is None and arch_capability("sm_9") is None
    assert runs_on("sm_80", (9, 0)) and runs_on("sm_90", (9, 0)) and not runs_on("sm_90", (8, 6))
    assert runs_on("sm_90a", (9, 0)) and not runs_on("sm_90a", (10, 0))
    assert runs_on("sm_100f", (10, 3)) and not runs_on("sm_100f", (12, 0))
    assert runs_on("native", (7, 5))


def test_a_missing_nvcc_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ToolchainFault, match=r"nvcc not found or not runnable: .*/no/nvcc \(KG_NVCC\)"):
        check_toolchain(_hw4("sm_90", str(tmp_path / "no" / "nvcc")), "sm_90", None)


@needs_nvcc
def test_the_real_nvcc_passes_for_the_configured_architecture_and_this_gpu() -> None:
    found = check_toolchain(_hw4("sm_90"), "sm_90", (9, 0))
    assert f"{NVCC} (" in found and "builds for sm_90" in found and "this GPU (sm_90) is supported" in found
    assert "not its own" not in found
    assert "not its own architecture" in check_toolchain(_hw4("sm_80"), "sm_80", (9, 0))


@needs_nvcc
def test_an_architecture_this_nvcc_cannot_target_is_refused() -> None:
    with pytest.raises(ToolchainFault, match=r"cannot build for sm_35 \(KG_CUDA_ARCH\) with the assignment's flags and the headers its kit includes: "
                                             r".*(sm_35|compute_35)"):
        check_toolchain(_hw4("sm_35"), "sm_35", None)


@needs_nvcc
def test_a_gpu_older_than_the_architecture_is_refused_with_the_setting_to_use() -> None:
    with pytest.raises(ToolchainFault, match=r"code built for sm_90 \(KG_CUDA_ARCH\) does not run on this GPU, of "
                                             r"compute capability 8\.6: set KG_CUDA_ARCH=sm_86"):
        check_toolchain(_hw4("sm_90"), "sm_90", (8, 6))


@needs_nvcc
def test_a_gpu_newer_than_this_nvcc_knows_is_refused() -> None:
    """Code for sm_90 would still run there (through the driver's JIT), but this nvcc cannot
    build for the GPU's own architecture: a toolkit too old for the GPU."""
    with pytest.raises(ToolchainFault, match=r"cannot build for this GPU, of compute capability 19\.0 \(sm_190\): "
                                             r".*install a CUDA toolkit that supports it"):
        check_toolchain(_hw4("sm_90"), "sm_90", (19, 0))
