"""The settings turned into the engine's configuration: the pipeline's (unpack limits, nvcc,
build cache and the build's sandbox) and the assignment's stage's (sandbox limits and policy,
seed, timing CPUs, GPU time budget, compute-sanitizer), and the stage a worker runs, if any (the rubric's plug-in makes it:
worker.assignment).

Free of the database and of pydantic (Settings is only a type here): bench/production_config.py
(the fidelity and gaming benches) loads these functions on a bare GPU machine, from this file
when the import fails.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from worker.affinity import choose_timing_cpus
from worker.assignment import GpuStage, StageConfig, StageProgress, assignment_of
from worker.build import Toolchain, cuda_include_dirs, system_includes
from worker.gpu.gpu_lock import GpuLock
from worker.pipeline import PipelineConfig
from worker.rubric import Rubric
from worker.sandbox import DockerOptions, SandboxLimits, SandboxPolicy
from worker.sanitizer import sanitizer_config
from worker.states import Piece
from worker.telemetry import gpu_count
from worker.unpack import UnpackLimits

if TYPE_CHECKING:
    from grader.settings import ChildSettings, Settings


def pipeline_config(settings: Settings, rubric: Rubric, piece: Piece = Piece.whole) -> PipelineConfig:
    """The pipeline's configuration; a piece of a split grade holds this GPU's lock."""
    return PipelineConfig(
        gpu_lock=None if piece is Piece.whole else GpuLock(settings.gpu_lock_dir, settings.gpu_index),
        limits=UnpackLimits(
            max_total_bytes=settings.unpack.max_total_bytes,
            max_file_bytes=settings.unpack.max_file_bytes,
            max_files=settings.unpack.max_files,
            max_depth=settings.unpack.max_depth,
            max_ratio=settings.unpack.max_ratio,
        ),
        toolchain=Toolchain(
            nvcc=settings.nvcc,
            flags=(*rubric.nvcc_flags, f"-arch={settings.cuda_arch}"),
            include_dirs=cuda_include_dirs(settings.nvcc),
            timeout_s=settings.nvcc_timeout_s,
            probe_includes=system_includes(rubric.starter_dir),
        ),
        build_cache_dir=settings.build_cache_dir,
        build_jobs=settings.build.jobs,
        log_limit_bytes=settings.stage_log_limit_bytes,
        # the per-file budget, below the ceiling of every nvcc
        build_limits=child_limits(settings.build, min(settings.build.file_timeout_s, settings.nvcc_timeout_s),
                                  settings.sandbox.disk_bytes),
        build_policy=build_policy(settings),
    )


def child_limits(child: ChildSettings, wall_s: float, disk_bytes: int) -> SandboxLimits:
    """The limits of one kind of sandboxed child (the build's or the sandbox's settings)."""
    return SandboxLimits(wall_s=wall_s, cpu_s=child.cpu_s, memory_bytes=child.memory_bytes,
                         max_processes=child.max_processes, file_size_bytes=child.file_size_bytes,
                         disk_bytes=disk_bytes)


def docker_options(settings: Settings) -> DockerOptions | None:
    """The docker backend's options from the settings, or None for the process backend."""
    sandbox = settings.sandbox
    if sandbox.backend != "docker":
        return None
    return DockerOptions(image=sandbox.docker_image, cpus=sandbox.docker_cpus,
                         gpu=sandbox.docker_gpu or str(settings.gpu_index))


def sandbox_policy(settings: Settings, gpu_index: int | None, docker: DockerOptions | None) -> SandboxPolicy:
    """The sandbox's user, network isolation and namespace demand, with this GPU and container."""
    sandbox = settings.sandbox
    return SandboxPolicy(user=sandbox.user, isolate_network=sandbox.isolate_network,
                         require_namespaces=sandbox.require_namespaces, gpu_index=gpu_index, docker=docker)


def build_policy(settings: Settings) -> SandboxPolicy:
    """The sandbox of a submission's nvcc: the GPU stage's user and network isolation, no GPU;
    with the docker backend, a container of the build image (the sandbox image has no nvcc)."""
    docker = docker_options(settings)
    return sandbox_policy(settings, None,
                          None if docker is None else replace(docker, image=settings.build.docker_image, gpu=None))


def gpu_available(settings: Settings) -> bool:
    return settings.gpu_grading == "on" or (settings.gpu_grading == "auto" and gpu_count() > 0)


def gpu_stage_config(settings: Settings, piece: Piece = Piece.whole) -> StageConfig:
    return StageConfig(
        piece=piece,
        gpu_lock=GpuLock(settings.gpu_lock_dir, settings.gpu_index) if piece is Piece.timing else None,
        limits=child_limits(settings.sandbox, settings.sandbox.wall_s, settings.sandbox.disk_bytes),
        policy=sandbox_policy(settings, settings.gpu_index, docker_options(settings)),
        seed=settings.grading_seed,
        timing_cpus=choose_timing_cpus(settings.timing_cpus, settings.gpu_index),
        budget_s=settings.gpu_budget_s,
        sanitizer=sanitizer_config(settings.sanitizer, settings.sanitizer_cap_s, settings.nvcc),
    )


def gpu_stage_for(settings: Settings, rubric: Rubric, progress: StageProgress = StageProgress(),
                  piece: Piece = Piece.whole) -> GpuStage | None:
    """The assignment's stage when this worker can run it (a GPU stage needs GPU grading on),
    else None (runs end `built`); it tells `progress` what it measures (grader.runs.progress)
    and runs only the problems whose kernels built, measuring `piece` of them."""
    assignment = assignment_of(rubric)
    if assignment.make_stage is None or (assignment.stage_needs_gpu and not gpu_available(settings)):
        return None
    return assignment.make_stage(gpu_stage_config(settings, piece), progress)
