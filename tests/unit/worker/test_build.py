"""worker.build with the real nvcc (no GPU needed to compile); nvcc tests skip where it is absent.

nvcc calls cost seconds each, so the compiling tests share one parallel build where they can.
"""
from __future__ import annotations

import ctypes
import shutil
import time
from pathlib import Path

import pytest

from worker.build import (
    BuildResult,
    KernelTarget,
    Toolchain,
    ToolchainFault,
    build_kernels,
    cache_key,
    cuda_include_dirs,
    nvcc_version,
    toolkit_has_cuda_headers,
    wheel_include_dirs,
)

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH; the build tests need the real compiler")
FLAGS = ("--shared", "-Xcompiler", "-fPIC", "-arch=sm_90")

HEADER = "#pragma once\n#define ANSWER {value}\n"
GOOD = """#include "includes/common.h"
__global__ void scale(float* x, int n) {{ int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }}
extern "C" int {func}() {{ return ANSWER; }}
"""
BROKEN = """extern "C" int broken() {
  int fine = 1;
  return fine + not_declared_anywhere;
}
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def call_int(so: Path, func: str, tmp: Path) -> int:
    """Load a built library under a fresh name (dlopen caches by path) and call `func`."""
    copy = tmp / f"load-{time.monotonic_ns()}-{so.name}"
    shutil.copyfile(so, copy)
    fn = getattr(ctypes.CDLL(str(copy)), func)
    fn.restype = ctypes.c_int
    return fn()


def counting_nvcc(folder: Path) -> str:
    """An nvcc that runs the real one and notes each call's arguments (compiles() counts them)."""
    assert NVCC is not None
    folder.mkdir(parents=True)
    script = folder / "nvcc"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{folder}/calls"\nexec "{NVCC}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def compiles(nvcc: str) -> int:
    """The calls of a counting_nvcc that compiled something (not `--version`)."""
    calls = Path(nvcc).with_name("calls")
    return sum(line.strip() != "--version" for line in calls.read_text().splitlines()) if calls.exists() else 0


def _toolchain(nvcc: str | None = NVCC) -> Toolchain:
    assert nvcc is not None
    return Toolchain(nvcc=nvcc, flags=FLAGS, timeout_s=120)


# ---------------------------------------------------------------- without nvcc


def test_toolchain_command() -> None:
    tc = Toolchain(nvcc="nvcc", flags=FLAGS, include_dirs=("/inc/a", "inc b"))
    assert tc.command(Path("src/k.cu"), Path("out/k.so")) == [
        "nvcc", *FLAGS, "-I/inc/a", "-Iinc b", "-o", "out/k.so", "src/k.cu",
    ]


def test_missing_nvcc_is_a_toolchain_fault_not_a_failed_build(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "sub", {"src/a.cu": "int a;\n", "src/b.cu": "int b;\n"})
    targets = [KernelTarget("b", "src/b.cu", "lib/b.so"), KernelTarget("a", "src/a.cu", "lib/a.so")]
    with pytest.raises(ToolchainFault, match="nvcc not found or not runnable") as fault:
        build_kernels(root, targets, _toolchain(str(tmp_path / "no" / "nvcc")))
    assert str(tmp_path / "no" / "nvcc") in str(fault.value)
    assert not (root / "lib").exists()


def test_nvcc_version_of_a_missing_compiler_is_none(tmp_path: Path) -> None:
    assert nvcc_version(str(tmp_path / "nvcc")) is None
    assert nvcc_version("definitely-not-a-compiler-kg") is None


def test_cuda_include_dirs_are_existing_folders() -> None:
    dirs = cuda_include_dirs()
    assert isinstance(dirs, tuple)
    assert all(Path(d).is_dir() for d in dirs)
    assert len(set(dirs)) == len(dirs)


def _nvcc_answering(folder: Path, status: int) -> str:
    """An nvcc whose every call exits with `status` (0: it found the headers it was asked for)."""
    folder.mkdir(parents=True)
    (folder / "nvcc").write_text(f"#!/bin/sh\nexit {status}\n")
    (folder / "nvcc").chmod(0o755)
    return str(folder / "nvcc")


def test_a_toolkit_with_the_cuda_headers_needs_no_include_folder(tmp_path: Path) -> None:
    nvcc = _nvcc_answering(tmp_path / "full", 0)
    assert toolkit_has_cuda_headers(nvcc) and cuda_include_dirs(nvcc) == ()


def test_a_toolkit_without_them_gets_the_wheels_include_folders(tmp_path: Path) -> None:
    nvcc = _nvcc_answering(tmp_path / "bare", 1)
    assert not toolkit_has_cuda_headers(nvcc) and cuda_include_dirs(nvcc) == wheel_include_dirs()
    assert not toolkit_has_cuda_headers(str(tmp_path / "no-nvcc-here"))


class TestCacheKey:
    target = KernelTarget("combine", "src/combine.cu", "lib/combine.so")
    tc = Toolchain(nvcc="nvcc", flags=FLAGS)

    def _root(self, tmp_path: Path) -> Path:
        return write_tree(tmp_path / "sub", {
            "src/combine.cu": GOOD.format(func="answer"),
            "src/includes/common.h": HEADER.format(value=1),
            "notes.txt": "not part of the build\n",
        })

    def test_stable(self, tmp_path: Path) -> None:
        root = self._root(tmp_path)
        key = cache_key(root, self.target, self.tc, "V13.0")
        assert key == cache_key(root, self.target, self.tc, "V13.0")
        assert len(key) == 64

    def test_same_tree_elsewhere_gives_the_same_key(self, tmp_path: Path) -> None:
        a = self._root(tmp_path / "a")
        b = self._root(tmp_path / "b")
        assert cache_key(a, self.target, self.tc, "V") == cache_key(b, self.target, self.tc, "V")

    @pytest.mark.parametrize(
        "change",
        ["header", "new header", "header renamed", "source", "version", "flags", "includes"],
    )
    def test_inputs_change_the_key(self, tmp_path: Path, change: str) -> None:
        root = self._root(tmp_path)
        before = cache_key(root, self.target, self.tc, "V13.0")
        tc, version = self.tc, "V13.0"
        if change == "header":
            (root / "src/includes/common.h").write_text(HEADER.format(value=2))
        elif change == "new header":
            write_tree(root, {"other/extra.cuh": "// new\n"})
        elif change == "header renamed":
            (root / "src/includes/common.h").rename(root / "src/includes/common2.h")
        elif change == "source":
            (root / "src/combine.cu").write_text(GOOD.format(func="answer2"))
        elif change == "version":
            version = "V13.1"
        elif change == "flags":
            tc = Toolchain(nvcc="nvcc", flags=(*FLAGS, "-O3"))
        elif change == "includes":
            tc = Toolchain(nvcc="nvcc", flags=FLAGS, include_dirs=("/opt/inc",))
        assert cache_key(root, self.target, tc, version) != before

    def test_non_header_files_do_not_change_the_key(self, tmp_path: Path) -> None:
        root = self._root(tmp_path)
        before = cache_key(root, self.target, self.tc, "V")
        (root / "notes.txt").write_text("edited\n")
        write_tree(root, {"minitorch/ops.py": "x = 1\n"})
        assert cache_key(root, self.target, self.tc, "V") == before


# ---------------------------------------------------------------- with nvcc


@needs_nvcc
def test_nvcc_version_is_a_release_line() -> None:
    version = nvcc_version(NVCC or "")
    assert version and "\n" not in version


@pytest.fixture(scope="module")
def parallel_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[BuildResult], float]:
    """One parallel build of two good targets and one broken one, listed out of name order."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH; the build tests need the real compiler")
    root = write_tree(tmp_path_factory.mktemp("parallel") / "sub", {
        "src/includes/common.h": HEADER.format(value=42),
        "src/zeta.cu": GOOD.format(func="zeta_answer"),
        "src/broken.cu": BROKEN,
        "src/alpha.cu": GOOD.format(func="alpha_answer"),
    })
    targets = [
        KernelTarget("zeta", "src/zeta.cu", "build/zeta.so"),
        KernelTarget("broken", "src/broken.cu", "build/broken.so"),
        KernelTarget("alpha", "src/alpha.cu", "build/alpha.so"),
    ]
    started = time.monotonic()
    results = build_kernels(root, targets, _toolchain())
    return root, results, time.monotonic() - started


def test_results_come_back_in_target_order(parallel_build: tuple[Path, list[BuildResult], float]) -> None:
    _, results, _ = parallel_build
    assert [r.name for r in results] == ["zeta", "broken", "alpha"]
    assert [r.ok for r in results] == [True, False, True]


def test_valid_source_builds_a_loadable_library(
    parallel_build: tuple[Path, list[BuildResult], float], tmp_path: Path
) -> None:
    root, results, _ = parallel_build
    zeta = results[0]
    assert zeta.ok and not zeta.cached and zeta.returncode == 0
    assert zeta.seconds > 0
    assert isinstance(zeta.log, str)
    assert zeta.command[0] == NVCC and "--shared" in zeta.command and "-arch=sm_90" in zeta.command
    so = root / "build" / "zeta.so"
    assert so.read_bytes()[:4] == b"\x7fELF"
    assert call_int(so, "zeta_answer", tmp_path) == 42  # host code runs without a GPU
    assert call_int(root / "build" / "alpha.so", "alpha_answer", tmp_path) == 42


def test_broken_source_fails_with_the_compiler_error(parallel_build: tuple[Path, list[BuildResult], float]) -> None:
    root, results, _ = parallel_build
    broken = results[1]
    assert not broken.ok and not broken.cached
    assert broken.returncode not in (0, None)
    assert "broken.cu(3): error" in broken.log  # file and line, as nvcc prints them
    assert "not_declared_anywhere" in broken.log
    assert not (root / "build" / "broken.so").exists()


@needs_nvcc
def test_missing_source_is_a_clear_failure(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "sub", {"src/other.cu": "int x;\n"})
    (result,) = build_kernels(root, [KernelTarget("softmax", "src/softmax_kernel.cu", "b/s.so")], _toolchain())
    assert not result.ok and result.name == "softmax"
    assert "missing kernel source: src/softmax_kernel.cu" in result.log
    assert result.returncode is None


@needs_nvcc
def test_cache_hit_then_header_change_rebuilds(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "sub", {
        "src/combine.cu": GOOD.format(func="answer"),
        "src/includes/common.h": HEADER.format(value=7),
    })
    cache = tmp_path / "cache"
    target = KernelTarget("combine", "src/combine.cu", "build/combine.so")
    tc = _toolchain(counting_nvcc(tmp_path / "bin"))
    version = nvcc_version(tc.nvcc)
    assert version is not None

    (first,) = build_kernels(root, [target], tc, cache_dir=cache)
    assert first.ok and not first.cached
    key = cache_key(root.resolve(), target, tc, version)
    assert sorted(p.name for p in cache.iterdir()) == [f"{key}.log", f"{key}.so"]
    assert (cache / f"{key}.log").read_text() == first.log

    (root / "build" / "combine.so").unlink()
    assert compiles(tc.nvcc) == 1
    (second,) = build_kernels(root, [target], tc, cache_dir=cache)
    assert second.ok and second.cached and second.returncode == 0
    assert second.log == first.log and second.command == first.command and second.command[0].endswith("nvcc")
    assert compiles(tc.nvcc) == 1  # the hit ran no compile
    assert call_int(root / "build" / "combine.so", "answer", tmp_path) == 7

    # a header the source includes changes: new key, real rebuild, new behaviour
    (root / "src/includes/common.h").write_text(HEADER.format(value=8))
    new_key = cache_key(root.resolve(), target, tc, version)
    assert new_key != key
    # a cache entry left half-written (library without its log) must not be trusted
    (cache / f"{new_key}.so").write_bytes(b"not a library")
    (third,) = build_kernels(root, [target], tc, cache_dir=cache)
    assert third.ok and not third.cached
    assert call_int(root / "build" / "combine.so", "answer", tmp_path) == 8
    assert (cache / f"{new_key}.log").exists()
    assert (cache / f"{new_key}.so").read_bytes()[:4] == b"\x7fELF"


@needs_nvcc
def test_failed_build_is_not_cached(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "sub", {"src/broken.cu": BROKEN})
    cache = tmp_path / "cache"
    target = KernelTarget("broken", "src/broken.cu", "build/broken.so")
    (result,) = build_kernels(root, [target], _toolchain(), cache_dir=cache)
    assert not result.ok
    assert not cache.exists() or list(cache.iterdir()) == []


def test_the_build_log_names_a_cached_librarys_command() -> None:
    """A library taken from the build cache shows the nvcc command it stands for (it used to
    show an empty `$` line) and says where it came from."""
    from worker.pipeline import _build_log

    command = ["nvcc", "--shared", "-o", "build/combine.so", "src/combine.cu"]
    log = _build_log([BuildResult("combine", True, "the first build's output\n", 0.0, cached=True, returncode=0,
                                  command=command)])
    assert log.startswith("== combine (cached, 0.0 s)\n$ nvcc --shared -o build/combine.so src/combine.cu (the same")
    assert "build cache" in log and "the first build's output" in log
    assert "\n$ \n" not in log
