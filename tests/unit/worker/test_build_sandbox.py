"""Submission builds in the sandbox (worker.build.Confinement, worker.pipeline), with the real
nvcc and the real sandbox: no host secret or environment reaches the student's build log, a
compile-time loop stops at the wall limit, paths read relative to the submission root, and
ordinary builds still succeed in parallel and hit the cache.

As root (what production runs the worker as) builds drop to 'nobody'; elsewhere they run as
the current user and the parts about the uid drop skip.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_build import BROKEN, FLAGS, GOOD, HEADER, NVCC, call_int, needs_nvcc, write_tree

from grader.pages.run_view import stage_logs as _stage_logs
from grader.runs.engine_config import build_policy, pipeline_config
from grader.settings import Settings
from tests.fixtures import cpu_standin
from worker.build import Confinement, KernelTarget, Toolchain, ToolchainFault, build_kernels, cuda_include_dirs
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.pipeline import PipelineConfig, grade_submission
from worker.rubric import Rubric, load_rubric
from worker.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxPolicy
from worker.starter_kit import zip_tree
from worker.states import ErrorClass, RunState
from worker.unpack import UnpackLimits

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not IS_ROOT, reason="only root can drop a build to the sandbox user 'nobody' (the worker runs as root)")
MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=180.0, cpu_s=180, memory_bytes=4096 * MiB, max_processes=64, file_size_bytes=256 * MiB)
POLICY = SandboxPolicy(user="nobody" if IS_ROOT else None)
CANARY_VAR = "KG_TEST_BUILD_CANARY"
# Instantiates 2^40 distinct templates: the compiler would run for days.
COMPILE_FOREVER = """template <int N, unsigned long long M> struct Tree {
  static constexpr unsigned long long value = Tree<N - 1, 2 * M>::value + Tree<N - 1, 2 * M + 1>::value;
};
template <unsigned long long M> struct Tree<0, M> { static constexpr unsigned long long value = M; };
static_assert(Tree<40, 1>::value != 0, "never done");
"""


def _confine(job: Path, limits: SandboxLimits = LIMITS) -> Confinement:
    return Confinement(Sandbox(limits, POLICY), job / "build")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder everyone can traverse (pytest's own are 0700 as root), for files the sandbox
    user must reach: fake compilers, or a secret that only its mode protects. Not under /tmp:
    the sandbox sees a fresh, empty /tmp."""
    path = cpu_standin.sandbox_visible_dir("kg-build-sandbox-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


# A fake compiler's answer to our toolchain probe (worker.build.PROBE): an empty library where -o
# says, so that its failures on a submission's sources stay the submission's.
PROBE_BUILDS = 'case "$*" in *kg_toolchain_probe*) for a; do [ "$o" = -o ] && : > "$a"; o="$a"; done; exit 0;; esac'


def _script(path: Path, body: str, probe: str = PROBE_BUILDS) -> str:
    """An executable "nvcc" that answers --version, builds our toolchain probe (`probe`), and
    otherwise runs `body`."""
    path.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake, release 0.0"; exit 0; fi\n{probe}\n{body}\n')
    path.chmod(0o755)
    return str(path)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _holding(folder: Path, needle: bytes) -> list[str]:
    return [rel for rel in _files(folder) if needle in (folder / rel).read_bytes()]


def test_the_worker_builds_submissions_in_the_configured_sandbox() -> None:
    settings = Settings(sandbox={"user": "kg-build", "isolate_network": False}, nvcc_timeout_s=77,
                        build={"cpu_s": 55, "memory_bytes": 3 * MiB, "max_processes": 9, "file_size_bytes": 2 * MiB})
    config = pipeline_config(settings, load_rubric("hw4"))
    assert config.build_limits == SandboxLimits(wall_s=77, cpu_s=55, memory_bytes=3 * MiB, max_processes=9,
                                                file_size_bytes=2 * MiB)
    assert config.build_policy == SandboxPolicy(user="kg-build", isolate_network=False)
    docker = build_policy(Settings(sandbox={"backend": "docker", "docker_gpu": "3"}, build={"docker_image": "with-nvcc"}))
    assert docker.docker is not None and docker.docker.image == "with-nvcc" and docker.docker.gpu is None
    assert docker.user == "nobody" and docker.isolate_network and docker.gpu_index is None


# ---------------------------------------------------------------- environment (no nvcc needed)


def test_the_build_sees_only_path_home_and_tmpdir(tmp_path: Path, shared: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(CANARY_VAR, canary)
    nvcc = _script(shared / "nvcc", "env; echo uid=$(id -u); exit 3")
    root = write_tree(tmp_path / "sub", {"src/k.cu": "int k;\n"})
    (result,) = build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(nvcc, ()),
                              confine=_confine(tmp_path / "job"))
    assert not result.ok and result.returncode == 3
    assert canary not in result.log and CANARY_VAR not in result.log
    env = dict(line.split("=", 1) for line in result.log.splitlines() if "=" in line)
    assert env["HOME"] == ".kg-home" and env["TMPDIR"] == ".kg-tmp"
    assert env["PATH"].split(os.pathsep)[0] == str(shared)  # nvcc's folder first
    assert set(env) - {"PATH", "HOME", "TMPDIR", "uid"} <= {"PWD", "OLDPWD", "SHLVL", "_"}  # what sh adds itself
    if IS_ROOT:
        assert int(env["uid"]) == pwd.getpwnam("nobody").pw_uid


@needs_nvcc
@pytest.mark.parametrize("whose", ["self", "worker"])
def test_including_proc_environ_does_not_show_the_workers_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whose: str) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(CANARY_VAR, canary)
    proc = "self" if whose == "self" else str(os.getpid())
    source = f'#include "/proc/{proc}/environ"\n' + GOOD.format(func="answer")
    root = write_tree(tmp_path / "sub", {"src/k.cu": source, "src/includes/common.h": HEADER.format(value=1)})
    (result,) = build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(NVCC or "", FLAGS),
                              confine=_confine(tmp_path / "job"))
    assert canary not in result.log
    assert not _holding(tmp_path, canary.encode())  # nor in the library, nor anywhere in the job
    if IS_ROOT and whose == "worker":  # another user's process: not in the build's /proc (its own PID namespace)
        assert not result.ok and "No such file or directory" in result.log


# ---------------------------------------------------------------- host files (root: uid drop)


def _kit_rubric() -> Rubric:
    """hw4 with only its fastest kernel (combine.cu) to build."""
    rubric = load_rubric("hw4")
    return dataclasses.replace(rubric, kernels=tuple(k for k in rubric.kernels if k.name == "combine"))


def _kit_zip(dest: Path, combine_prefix: str = "", combine_suffix: str = "") -> Path:
    tree = dest.parent / f"{dest.stem}-tree"
    shutil.copytree(load_rubric("hw4").starter_dir, tree, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    combine = tree / "src" / "combine.cu"
    combine.write_text(combine_prefix + combine.read_text() + combine_suffix)
    return zip_tree(tree, dest)


def _pipeline_config(cache: Path | None, nvcc: str | None = NVCC, limits: SandboxLimits = LIMITS) -> PipelineConfig:
    rubric = load_rubric("hw4")
    toolchain = Toolchain(nvcc or "", (*rubric.nvcc_flags, "-arch=sm_90"), cuda_include_dirs())
    return PipelineConfig(UnpackLimits(200 * MiB, 50 * MiB, 5000, 24, 100.0), toolchain, cache, 3, 65536,
                          build_limits=limits, build_policy=POLICY)


@needs_root
@needs_nvcc
@pytest.mark.parametrize("how", ["include", "incbin"])
def test_a_root_only_file_never_reaches_the_student(tmp_path: Path, shared: Path, how: str) -> None:
    token = f"kg_secret_{uuid.uuid4().hex}"
    secret = shared / "secret.h"
    secret.write_text(f"int {token} = not_code;\n")  # invalid: nvcc would quote it in its error
    secret.chmod(0o600)
    prefix, suffix = (f'#include "{secret}"\n', "") if how == "include" else (
        "", f'\nasm(".section .rodata\\n.incbin \\"{secret}\\"\\n.previous");\n')
    archive = _kit_zip(tmp_path / "up.zip", prefix, suffix)
    job = tmp_path / "job"
    outcome = grade_submission(archive, _kit_rubric(), job, _pipeline_config(tmp_path / "cache"))
    log = outcome.stages["build"].log
    assert outcome.state is RunState.failed and outcome.error_class is ErrorClass.build_error, log
    assert token not in log and token not in outcome.message
    assert not _holding(job, token.encode()) and not _holding(tmp_path / "cache", token.encode())
    assert str(shared) in log  # the student's own #include or .incbin line, which names it
    assert "combine did not compile" in outcome.message


# ---------------------------------------------------------------- limits


@needs_nvcc
def test_a_compile_time_loop_is_stopped_at_the_wall_limit(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "sub", {"src/forever.cu": COMPILE_FOREVER})
    limits = dataclasses.replace(LIMITS, wall_s=5.0)
    started = time.monotonic()
    (result,) = build_kernels(root, [KernelTarget("forever", "src/forever.cu", "lib/forever.so")],
                              Toolchain(NVCC or "", FLAGS), confine=_confine(tmp_path / "job", limits))
    elapsed = time.monotonic() - started
    assert not result.ok and result.returncode is None
    assert "error: the build was stopped: it ran past the wall-time limit (killed after 5.0 s wall time)" in result.log
    assert elapsed < 5.0 + 20, f"stopped only after {elapsed:.1f} s"
    assert not (root / "lib" / "forever.so").exists()


# ---------------------------------------------------------------- ordinary builds


@needs_nvcc
def test_confined_builds_succeed_in_parallel_and_fill_a_cache_the_sandbox_cannot_touch(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "sub", {
        "src/includes/common.h": HEADER.format(value=42),
        "src/zeta.cu": GOOD.format(func="zeta_answer"),
        "src/broken.cu": BROKEN,
        "src/alpha.cu": GOOD.format(func="alpha_answer"),
    })
    targets = [KernelTarget("zeta", "src/zeta.cu", "build/zeta.so"),
               KernelTarget("broken", "src/broken.cu", "build/broken.so"),
               KernelTarget("alpha", "src/alpha.cu", "build/alpha.so")]
    cache, job = tmp_path / "cache", tmp_path / "job"
    toolchain = Toolchain(NVCC or "", FLAGS)
    first = build_kernels(root, targets, toolchain, cache, confine=_confine(job))
    assert [r.ok for r in first] == [True, False, True] and not any(r.cached for r in first)
    assert call_int(root / "build" / "zeta.so", "zeta_answer", tmp_path) == 42
    assert call_int(root / "build" / "alpha.so", "alpha_answer", tmp_path) == 42

    broken = first[1]
    assert "src/broken.cu(3): error" in broken.log and "not_declared_anywhere" in broken.log
    assert str(tmp_path) not in broken.log  # no job or scratch paths
    assert first[0].command[-3:] == ["-o", "build/zeta.so", "src/zeta.cu"]

    # each build saw its own source and the headers, nothing else of the tree
    (zeta_dir,) = (job / "build").glob("zeta-*")
    assert "src/alpha.cu" not in _files(zeta_dir) and "src/zeta.cu" in _files(zeta_dir)
    assert "src/includes/common.h" in _files(zeta_dir)

    worker_uid = os.geteuid()
    for path in (root, root / "build" / "zeta.so", cache, *cache.iterdir()):  # the sandbox user owns none
        assert path.stat().st_uid == worker_uid
    assert not cache.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    assert (job / "build").stat().st_mode & 0o777 == 0o700
    if IS_ROOT:
        assert zeta_dir.stat().st_uid == pwd.getpwnam("nobody").pw_uid

    for name in ("zeta.so", "alpha.so"):
        (root / "build" / name).unlink()
    second = build_kernels(root, targets, toolchain, cache, confine=_confine(tmp_path / "job2"))
    assert [(r.ok, r.cached) for r in second] == [(True, True), (False, False), (True, True)]
    assert [r.log for r in second[::2]] == [r.log for r in first[::2]]
    # only the broken one compiled again: a compile gets a scratch folder, a cache hit none
    assert not [*(tmp_path / "job2" / "build").glob("zeta-*"), *(tmp_path / "job2" / "build").glob("alpha-*")]
    assert [*(tmp_path / "job2" / "build").glob("broken-*")]
    assert call_int(root / "build" / "zeta.so", "zeta_answer", tmp_path) == 42


USES_CUDA_HEADERS = """#include <cublas_v2.h>
#include <curand_kernel.h>
extern "C" int uses_answer() { return CUBLAS_STATUS_SUCCESS == 0 && sizeof(curandState) > 0 ? 7 : 0; }
"""


@needs_nvcc
def test_a_submission_build_finds_the_cuda_headers_the_assignment_includes(tmp_path: Path) -> None:
    """cublas_v2.h and curand_kernel.h, in the build's sandbox, with the worker's toolchain: from
    nvcc's own toolkit where it has them, else from the include folders cuda_include_dirs names
    (the nvidia wheels' headers, which `make dev` unpacks where the toolkit lacks them)."""
    root = write_tree(tmp_path / "sub", {"src/uses.cu": USES_CUDA_HEADERS})
    toolchain = pipeline_config(Settings(nvcc=NVCC or "nvcc"), load_rubric("hw4")).toolchain
    (result,) = build_kernels(root, [KernelTarget("uses", "src/uses.cu", "build/uses.so")], toolchain,
                              confine=_confine(tmp_path / "job"))
    assert result.ok, result.log
    assert call_int(root / "build" / "uses.so", "uses_answer", tmp_path) == 7


# ---------------------------------------------------------------- paths shown to the student


@needs_nvcc
def test_a_compile_error_names_the_file_from_the_submission_root_and_the_page_links_it(tmp_path: Path) -> None:
    archive = _kit_zip(tmp_path / "up.zip", combine_suffix="\nint oops = this_is_not_cuda;\n")
    job = tmp_path / "job"
    outcome = grade_submission(archive, _kit_rubric(), job, _pipeline_config(None))
    assert outcome.error_class is ErrorClass.build_error
    log = outcome.stages["build"].log
    assert str(job.resolve()) not in log and str(job) not in log
    assert "combine did not compile: src/combine.cu(" in outcome.message
    (stage,) = [s for s in _stage_logs({n: r.as_dict() for n, r in outcome.stages.items()}) if s["name"] == "build"]
    error = stage["first_error"]
    first = stage["lines"][error.log_line - 1]
    assert first.startswith("src/combine.cu(") and "error" in first and "this_is_not_cuda" in first
    assert error.file == "src/combine.cu" and error.line is not None


def test_gpu_stage_logs_and_messages_name_files_from_the_submission_root(tmp_path: Path, shared: Path) -> None:
    """Log tails and crash messages of the sandboxed children carry their job paths: the
    pipeline shows them relative to the submission root (fake nvcc: an empty library)."""
    nvcc = _script(shared / "nvcc", 'for a; do [ "$p" = "-o" ] && : > "$a"; p=$a; done; exit 0')
    job = tmp_path / "job"

    def gpu_stage(rubric: Rubric, staged: Path, reference: Path, work: Path,
                  problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        trace = (f'Traceback (most recent call last):\n  File "{work}/problem-1.1/minitorch/cuda_kernel_ops.py", '
                 f'line 12, in launch\nRuntimeError: bad launch at {staged}/src/softmax_kernel.cu:204\n')
        crash = CaseOutcome("c1", (2, 3), False, message=f"crashed in {work.resolve()}/problem-1.1/minitorch/x.py")
        return [ProblemMeasurement(p.id, status="error", log_tail=trace, first_failure=crash, routes={"binding": [crash]})
                for p in rubric.problems]

    archive = _kit_zip(tmp_path / "up.zip")
    outcome = grade_submission(archive, _kit_rubric(), job, _pipeline_config(None, nvcc), gpu_stage=gpu_stage)
    assert outcome.state is RunState.scored, outcome.message
    shown = json.dumps([outcome.stages["run"].as_dict(), outcome.report,
                        [dataclasses.asdict(p) for p in outcome.problems]])
    assert str(job) not in shown and str(job.resolve()) not in shown
    run_log = outcome.stages["run"].log
    assert 'File "minitorch/cuda_kernel_ops.py", line 12, in launch' in run_log
    assert "bad launch at src/softmax_kernel.cu:204" in run_log
    assert "crashed in minitorch/x.py" in shown


@needs_root
def test_an_nvcc_the_sandbox_user_cannot_run_is_an_infrastructure_fault(tmp_path: Path) -> None:
    """Not every submission's build error: tmp_path's folders are private to root."""
    nvcc = _script(tmp_path / "nvcc", "exit 0")
    root = write_tree(tmp_path / "sub", {"src/k.cu": "int k;\n"})
    with pytest.raises(SandboxError, match="the sandbox user cannot run nvcc"):
        build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(nvcc, ()),
                      confine=_confine(tmp_path / "job"))


# ---------------------------------------------------------------- toolchain faults are not the student's


def test_a_toolchain_that_builds_nothing_is_a_toolchain_fault_not_a_build_error(tmp_path: Path, shared: Path) -> None:
    """An nvcc that fails on our own probe source too, in the same sandbox (here it fails on
    everything, as a broken install does): ToolchainFault, whatever the log says, and the
    pipeline raises it (an infrastructure fault) instead of ending the run `build_error`."""
    nvcc = _script(shared / "nvcc", "echo \"nvcc fatal   : Unsupported gpu architecture 'compute_90'\"; exit 1", probe="")
    root = write_tree(tmp_path / "sub", {"src/k.cu": "int k;\n"})
    with pytest.raises(ToolchainFault, match="our own probe source does not build with this toolchain either: "
                                             "nvcc fatal   : Unsupported gpu architecture 'compute_90'"):
        build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(nvcc, ()),
                      confine=_confine(tmp_path / "job"))
    with pytest.raises(ToolchainFault):
        grade_submission(_kit_zip(tmp_path / "up.zip"), _kit_rubric(), tmp_path / "job2", _pipeline_config(None, nvcc))


def test_a_submission_that_prints_a_toolchain_fatal_is_still_its_own_build_error(tmp_path: Path, shared: Path) -> None:
    """The probe decides, not the log's words: a toolchain that builds our probe and fails on
    the submission's file with "nvcc fatal" (a student can make a build print anything) is the
    submission's failure."""
    nvcc = _script(shared / "nvcc", "echo \"nvcc fatal   : Unsupported gpu architecture 'compute_90'\"; exit 1")
    root = write_tree(tmp_path / "sub", {"src/k.cu": "int k;\n"})
    (result,) = build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(nvcc, ()),
                              confine=_confine(tmp_path / "job"))
    assert not result.ok and result.returncode == 1 and "nvcc fatal" in result.log


@needs_nvcc
def test_the_real_nvcc_asked_for_an_architecture_it_lacks_is_a_toolchain_fault(tmp_path: Path) -> None:
    """The real compiler, misconfigured (KG_CUDA_ARCH it cannot target): a student's correct
    file fails, our probe fails the same way, so the fault is the toolchain's."""
    root = write_tree(tmp_path / "sub", {"src/k.cu": GOOD.format(func="answer"),
                                         "src/includes/common.h": HEADER.format(value=1)})
    flags = (*FLAGS[:-1], "-arch=sm_35")  # this toolkit has dropped sm_35
    with pytest.raises(ToolchainFault, match="sm_35|compute_35"):
        build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(NVCC or "", flags),
                      confine=_confine(tmp_path / "job"))
