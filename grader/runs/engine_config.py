"""The settings turned into the engine's configuration: the pipeline's (unpack limits, nvcc,
build cache and the build's sandbox) and the assignment's stage's (sandbox limits and policy,
seed, timing CPUs), and the stage a worker runs, if any (the rubric's plug-in makes it:
worker.assignment).

Free of the database and of pydantic (Settings is only a type here): bench/fidelity.py loads
these functions on a bare GPU machine, from this file when the import fails.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from worker.affinity import choose_timing_cpus
from worker.assignment import StageConfig, assignment_of
from worker.build import Toolchain, cuda_include_dirs
from worker.pipeline import GpuStage, PipelineConfig
from worker.rubric import Rubric
from worker.sandbox import DockerOptions, SandboxLimits, SandboxPolicy
from worker.telemetry import gpu_count
from worker.unpack import UnpackLimits

if TYPE_CHECKING:
    from grader.settings import Settings


def pipeline_config(settings: Settings, rubric: Rubric) -> PipelineConfig:
    return PipelineConfig(
        limits=UnpackLimits(
            max_total_bytes=settings.unpack_max_total_bytes,
            max_file_bytes=settings.unpack_max_file_bytes,
            max_files=settings.unpack_max_files,
            max_depth=settings.unpack_max_depth,
            max_ratio=settings.unpack_max_ratio,
        ),
        toolchain=Toolchain(
            nvcc=settings.nvcc,
            flags=(*rubric.nvcc_flags, f"-arch={settings.cuda_arch}"),
            include_dirs=cuda_include_dirs(),
            timeout_s=settings.nvcc_timeout_s,
        ),
        build_cache_dir=settings.build_cache_dir,
        build_jobs=settings.build_jobs,
        log_limit_bytes=settings.stage_log_limit_bytes,
        build_limits=SandboxLimits(
            wall_s=min(settings.build_file_timeout_s, settings.nvcc_timeout_s),  # the per-file budget
            cpu_s=settings.build_cpu_s,
            memory_bytes=settings.build_memory_bytes,
            max_processes=settings.build_max_processes,
            file_size_bytes=settings.build_file_size_bytes,
            disk_bytes=settings.sandbox_disk_bytes,
        ),
        build_policy=build_policy(settings),
    )


def docker_options(settings: Settings) -> DockerOptions | None:
    """The docker backend's options from the settings, or None for the process backend."""
    if settings.sandbox_backend != "docker":
        return None
    return DockerOptions(image=settings.sandbox_docker_image, cpus=settings.sandbox_docker_cpus,
                         gpu=settings.sandbox_docker_gpu or str(settings.gpu_index))


def build_policy(settings: Settings) -> SandboxPolicy:
    """The sandbox of a submission's nvcc: the GPU stage's user and network isolation, no GPU;
    with the docker backend, a container of the build image (the sandbox image has no nvcc)."""
    docker = docker_options(settings)
    return SandboxPolicy(
        user=settings.sandbox_user,
        isolate_network=settings.sandbox_isolate_network,
        require_namespaces=settings.sandbox_require_namespaces,
        docker=None if docker is None else replace(docker, image=settings.build_docker_image, gpu=None),
    )


def gpu_available(settings: Settings) -> bool:
    return settings.gpu_grading == "on" or (settings.gpu_grading == "auto" and gpu_count() > 0)


def gpu_stage_config(settings: Settings) -> StageConfig:
    return StageConfig(
        limits=SandboxLimits(
            wall_s=settings.sandbox_wall_s,
            cpu_s=settings.sandbox_cpu_s,
            memory_bytes=settings.sandbox_memory_bytes,
            max_processes=settings.sandbox_max_processes,
            file_size_bytes=settings.sandbox_file_size_bytes,
            disk_bytes=settings.sandbox_disk_bytes,
        ),
        policy=SandboxPolicy(
            user=settings.sandbox_user,
            isolate_network=settings.sandbox_isolate_network,
            require_namespaces=settings.sandbox_require_namespaces,
            gpu_index=settings.gpu_index,
            docker=docker_options(settings),
        ),
        seed=settings.grading_seed,
        timing_cpus=choose_timing_cpus(settings.timing_cpus, settings.gpu_index),
    )


def gpu_stage_for(settings: Settings, rubric: Rubric,
                  on_problem: Callable[[str], None] = lambda _pid: None) -> GpuStage | None:
    """The assignment's stage when this worker can run it (a GPU stage needs GPU grading on),
    else None (runs end `built`). `on_problem` is called with each problem id before that
    problem is measured; the stage runs only the problems whose kernels built."""
    assignment = assignment_of(rubric)
    if assignment.make_stage is None or (assignment.stage_needs_gpu and not gpu_available(settings)):
        return None
    return assignment.make_stage(gpu_stage_config(settings), on_problem)
