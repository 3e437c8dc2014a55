"""nvcc builds of a submission's kernel sources: parallel, cached by content hash, logs kept.

Pure standard library on purpose: the GPU test suite imports this module on a machine that
has none of the service's packages.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".inl")


@dataclass(frozen=True)
class KernelTarget:
    """One shared library to build: `source` and `output` are relative to the submission root."""

    name: str
    source: str
    output: str


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...] = ()
    timeout_s: float = 300.0

    def command(self, source: Path, output: Path) -> list[str]:
        includes = [f"-I{d}" for d in self.include_dirs]
        return [self.nvcc, *self.flags, *includes, "-o", str(output), str(source)]


@dataclass
class BuildResult:
    name: str
    ok: bool
    log: str
    seconds: float
    cached: bool = False
    returncode: int | None = None
    command: list[str] = field(default_factory=list)


def nvcc_version(nvcc: str) -> str | None:
    """The release line of `nvcc --version`, or None when nvcc cannot be run."""
    if shutil.which(nvcc) is None and not Path(nvcc).is_file():
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    release = [ln for ln in lines if "release" in ln]  # "Cuda compilation tools, release 13.0, V13.0.88"
    return (release or lines or [None])[-1]


def cuda_include_dirs() -> tuple[str, ...]:
    """Header folders of the pip-installed cuBLAS/cuRAND packages, when present.

    A bare CUDA toolkit may lack cublas_v2.h and curand_kernel.h, which the assignment's
    headers include; the nvidia-cublas / nvidia-curand wheels ship them.
    """
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return ()
    found: list[str] = []
    for base in getattr(nvidia, "__path__", []):
        for include in sorted(Path(base).glob("*/include")) + sorted(Path(base).glob("*/*/include")):
            if (include / "cublas_v2.h").exists() or (include / "curand_kernel.h").exists():
                if str(include) not in found:
                    found.append(str(include))
    return tuple(found)


def cache_key(root: Path, target: KernelTarget, toolchain: Toolchain, version: str) -> str:
    """Hash of everything that determines the output: the source, every header in the
    submission's tree, the compiler version, flags and include folders."""
    digest = hashlib.sha256()
    for part in (version, *toolchain.flags, *toolchain.include_dirs, target.source):
        digest.update(part.encode() + b"\0")
    digest.update((root / target.source).read_bytes())
    for header in sorted(p for p in root.rglob("*") if p.suffix in HEADER_SUFFIXES and p.is_file()):
        digest.update(str(header.relative_to(root)).encode() + b"\0")
        digest.update(header.read_bytes())
    return digest.hexdigest()


def _build_one(
    root: Path, target: KernelTarget, toolchain: Toolchain, version: str, cache_dir: Path | None
) -> BuildResult:
    source = root / target.source
    output = root / target.output
    if not source.is_file():
        return BuildResult(target.name, False, f"missing kernel source: {target.source}\n", 0.0)
    output.parent.mkdir(parents=True, exist_ok=True)
    key = cache_key(root, target, toolchain, version)
    cached_so = cache_dir / f"{key}.so" if cache_dir else None
    cached_log = cache_dir / f"{key}.log" if cache_dir else None
    if cached_so is not None and cached_log is not None and cached_so.exists() and cached_log.exists():
        shutil.copyfile(cached_so, output)
        return BuildResult(target.name, True, cached_log.read_text(), 0.0, cached=True, returncode=0)

    command = toolchain.command(source, output)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command, cwd=root, capture_output=True, text=True, timeout=toolchain.timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        partial = (exc.stdout or b"") + (exc.stderr or b"")
        text = partial.decode(errors="replace") if isinstance(partial, bytes) else str(partial)
        log = text + f"\nnvcc timed out after {toolchain.timeout_s:.0f} s\n"
        return BuildResult(target.name, False, log, time.monotonic() - started, command=command)
    except OSError as exc:
        return BuildResult(target.name, False, f"cannot run nvcc: {exc}\n", 0.0, command=command)
    seconds = time.monotonic() - started
    log = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and output.exists()
    if ok and cached_so is not None and cached_log is not None:
        cached_log.parent.mkdir(parents=True, exist_ok=True)
        cached_log.write_text(log)  # before the library: a reader trusts the pair once the .so is there
        _store_atomically(output, cached_so)
    return BuildResult(target.name, ok, log, seconds, False, proc.returncode, command)


def _store_atomically(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    os.close(fd)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def build_kernels(
    root: Path,
    targets: list[KernelTarget],
    toolchain: Toolchain,
    cache_dir: Path | None = None,
    jobs: int | None = None,
) -> list[BuildResult]:
    """Build every target in parallel; results come back in the order of `targets`."""
    root = root.resolve()
    version = nvcc_version(toolchain.nvcc)
    if version is None:
        message = f"nvcc not found or not runnable: {toolchain.nvcc}\n"
        return [BuildResult(t.name, False, message, 0.0) for t in targets]
    workers = max(1, min(jobs or len(targets), len(targets)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_build_one, root, t, toolchain, version, cache_dir) for t in targets]
        return [f.result() for f in futures]
