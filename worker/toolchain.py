"""Is this worker's CUDA toolchain fit to build submissions? Checked once when a worker starts,
before it takes a job (grader/runs/worker_start.py); a worker that fails refuses every job.

- nvcc is there and runs (`nvcc --version`; its release is reported);
- it builds our probe source (worker.build.PROBE_SOURCE) with each assignment's flags and
  `-arch=KG_CUDA_ARCH`: it can target that architecture and its host compiler works;
- on a GPU worker: code built for KG_CUDA_ARCH runs on this GPU (its compute capability, from
  NVML, is not older than the architecture's; an `a` architecture must be the GPU's own, an `f`
  one of its family), and nvcc can build for the GPU's own architecture.

A failed check raises ToolchainFault with one sentence that says what to fix. Standard library
only, like worker.build.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from pathlib import Path

from worker.build import Toolchain, ToolchainFault, nvcc_version, probe_toolchain

_ARCH = re.compile(r"(?:sm|compute)_(\d{2,3})([af]?)")


def arch_capability(arch: str) -> tuple[tuple[int, int], str] | None:
    """((major, minor), variant) of an architecture name: sm_90 -> ((9, 0), ""), compute_100a
    -> ((10, 0), "a"), sm_120f -> ((12, 0), "f"); None for anything else ("native", "all")."""
    found = _ARCH.fullmatch(arch)
    if found is None:
        return None
    digits = found.group(1)
    return (int(digits[:-1]), int(digits[-1])), found.group(2)


def runs_on(arch: str, gpu: tuple[int, int]) -> bool:
    """Whether code built for `arch` runs on a GPU of compute capability `gpu` (an architecture
    we cannot read is left to the probe build and the stage)."""
    parsed = arch_capability(arch)
    if parsed is None:
        return True
    made_for, variant = parsed
    if variant == "a":
        return made_for == gpu
    if variant == "f":
        return made_for[0] == gpu[0] and made_for[1] <= gpu[1]
    return made_for <= gpu


def check_toolchain(toolchains: list[Toolchain], arch: str, gpu: tuple[int, int] | None) -> str:
    """Check the worker's toolchains (one per assignment it grades; `arch` is KG_CUDA_ARCH, in
    their flags) and, with `gpu` (this worker's GPU's compute capability), that GPU; what was
    found, in words. Raises ToolchainFault."""
    nvcc = toolchains[0].nvcc
    version = nvcc_version(nvcc)
    if version is None:
        raise ToolchainFault(f"nvcc not found or not runnable: {nvcc} (KG_NVCC)")
    with tempfile.TemporaryDirectory(prefix="kg-toolchain-check-") as tmp:
        for i, toolchain in enumerate(dict.fromkeys(toolchains)):
            failure = probe_toolchain(toolchain, Path(tmp) / f"probe-{i}")
            if failure is not None:
                raise ToolchainFault(f"nvcc ({version}) cannot build for {arch} (KG_CUDA_ARCH) with the assignment's "
                                     f"flags and the headers its kit includes: {failure}")
        found = f"{nvcc} ({version}) builds for {arch}"
        if gpu is None:
            return found
        gpu_arch = f"sm_{gpu[0]}{gpu[1]}"
        if not runs_on(arch, gpu):
            raise ToolchainFault(f"code built for {arch} (KG_CUDA_ARCH) does not run on this GPU, of compute capability "
                                 f"{gpu[0]}.{gpu[1]}: set KG_CUDA_ARCH={gpu_arch}")
        failure = probe_toolchain(replace(toolchains[0], flags=("-cubin", f"-arch={gpu_arch}")), Path(tmp) / "probe-gpu")
        if failure is not None:
            raise ToolchainFault(f"nvcc ({version}) cannot build for this GPU, of compute capability {gpu[0]}.{gpu[1]} "
                                 f"({gpu_arch}): {failure}; install a CUDA toolkit that supports it")
    other = "" if arch == gpu_arch else f" (KG_CUDA_ARCH={arch} is not its own architecture, which runs best)"
    return f"{found}; this GPU ({gpu_arch}) is supported{other}"
