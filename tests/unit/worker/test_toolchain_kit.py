"""A worker proves its toolchain on the assignment, not on a toy (issue 54): our probe source
includes every system header the kit includes, and a worker builds each assignment's kit in the
build's sandbox before its first job. Drilled with the real nvcc and a toolkit that lacks
cuBLAS's headers (an nvcc that never gets the header wheels' folders, as after a plain
`pip install -e .` where the toolkit has no math libraries): the check refuses, naming the
header, and a submission that fails on that header is the toolchain's fault, not the student's."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_build import NVCC, needs_nvcc

from grader.runs.worker_start import toolchain_check
from grader.settings import Settings
from tests.fixtures import cpu_standin
from tests.unit.worker.sandbox.test_sandbox import IS_ROOT
from worker.build import (
    Confinement,
    KernelTarget,
    Toolchain,
    ToolchainFault,
    build_kernels,
    system_includes,
    toolkit_has_cuda_headers,
)
from worker.rubric import load_rubric
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy
from worker.toolchain import check_toolchain

HW4 = load_rubric("hw4")
# nvcc without any -I: the build gets none of the header wheels' folders
WITHOUT_INCLUDES = """#!/bin/bash
args=(); for a in "$@"; do [[ $a == -I* ]] || args+=("$a"); done
exec {nvcc} "${{args[@]}}"
"""
needs_a_bare_toolkit = pytest.mark.skipif(
    NVCC is None or toolkit_has_cuda_headers(NVCC),
    reason="needs an nvcc whose toolkit lacks cuBLAS's headers (they come from the wheels here)")


def test_the_kits_system_headers_are_the_ones_it_does_not_carry() -> None:
    found = system_includes(HW4.starter_dir)
    assert {"cublas_v2.h", "cub/cub.cuh", "cuda_runtime.h", "cooperative_groups.h"} <= set(found)
    assert not [h for h in found if h.startswith("includes/") or h == "common.h"], found


@pytest.fixture
def bare_nvcc() -> Iterator[str]:
    assert NVCC is not None
    folder = cpu_standin.sandbox_visible_dir("kg-bare-nvcc-")  # the build's sandbox runs it
    script = folder / "nvcc"
    script.write_text(WITHOUT_INCLUDES.format(nvcc=shutil.which(NVCC)))
    script.chmod(0o755)
    yield str(script)
    shutil.rmtree(folder, ignore_errors=True)


@needs_nvcc
@needs_a_bare_toolkit
def test_a_toolchain_without_the_kits_headers_is_refused_naming_the_header(bare_nvcc: str) -> None:
    flags = (*HW4.nvcc_flags, "-arch=sm_90")
    toy = Toolchain(bare_nvcc, flags, timeout_s=120)
    assert "builds for sm_90" in check_toolchain([toy], "sm_90", None)  # the toy probe alone passes (the drill)
    with pytest.raises(ToolchainFault, match=r"with the assignment's flags and the headers its kit includes: .*"
                                             r"cublas_v2\.h: No such file or directory"):
        check_toolchain([Toolchain(bare_nvcc, flags, timeout_s=120, probe_includes=system_includes(HW4.starter_dir))],
                        "sm_90", None)


@needs_nvcc
@needs_a_bare_toolkit
@pytest.mark.skipif(not IS_ROOT, reason="the build's sandbox needs a root parent")
def test_a_submission_failing_on_a_header_the_kit_needs_is_the_toolchains_fault(bare_nvcc: str,
                                                                               tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    shutil.copytree(HW4.starter_dir, kit)
    toolchain = Toolchain(bare_nvcc, (*HW4.nvcc_flags, "-arch=sm_90"), timeout_s=120,
                          probe_includes=system_includes(HW4.starter_dir))
    cublas = next(k for k in HW4.kernels if "includes/cuda_util.h" in (kit / k.source).read_text())  # cuBLAS's header
    limits = SandboxLimits(wall_s=120, cpu_s=120, memory_bytes=4 << 30, max_processes=64, file_size_bytes=1 << 29)
    confine = Confinement(Sandbox(limits, SandboxPolicy()), tmp_path / "build")
    with pytest.raises(ToolchainFault, match="our own probe source does not build with this toolchain either: .*"
                                             "cublas_v2.h"):
        build_kernels(kit, [KernelTarget(cublas.name, cublas.source, cublas.output)], toolchain, None, 1, confine)


@needs_nvcc
@needs_a_bare_toolkit
@pytest.mark.skipif(not IS_ROOT, reason="the build's sandbox needs a root parent")
def test_the_workers_start_check_refuses_the_bare_toolkit_and_passes_the_real_one(bare_nvcc: str,
                                                                                  tmp_path: Path) -> None:
    real = Settings.from_variables({"KG_DATA_DIR": str(tmp_path / "data"), "KG_GPU_GRADING": "off"})
    assert toolchain_check(real).endswith("; every assignment's reference kit builds in the sandbox")
    bare = real.model_copy(update={"nvcc": bare_nvcc})
    with pytest.raises(ToolchainFault, match=r"cublas_v2\.h: No such file or directory"):
        toolchain_check(bare)
