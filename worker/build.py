"""nvcc builds of a submission's kernel sources: parallel, cached by content hash, logs kept.

A submission's build is untrusted: nvcc quotes the lines of any file a source `#include`s in
its error log, which the student sees. With a `Confinement`, every nvcc runs in the sandbox
(worker/sandbox/: the sandbox user, no network, rlimits, a watchdog) with an environment of
PATH, HOME and TMPDIR only, in a fresh folder of the job that holds a copy of exactly the
files its cache key hashes (the source and every header); the trusted parent then copies the
library out of it into the submission's tree and the build cache, which the sandbox user never
gets. Without one (our reference kit), nvcc runs directly in the tree.

Either way nvcc is given paths relative to the submission root, so logs name files as the
student knows them (`src/softmax_kernel.cu(12): error ...`).

A fault of the toolchain is never the student's: nvcc missing or not runnable, or a submission
build that failed where our own probe source (PROBE_SOURCE, including every system header the
assignment's kit includes: a toolchain without cuBLAS's headers fails it) fails too, in the same
sandbox with the same flags, raises ToolchainFault, an infrastructure fault (the run is retried
elsewhere).
The probe decides, not the log's words: a submission can print anything, even "nvcc fatal".

Pure standard library on purpose: the GPU test suite imports this module on a machine that
has none of the service's packages.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from worker.job_files import JobFileError, JobFileMissing, read_job_file
from worker.sandbox import Sandbox, SandboxError, usable_by

HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".inl")
# Inside a confined build's folder (its cwd; relative, so they work whatever the modes of the
# folders above it): nvcc's output, its temporary files, its home.
LOG_NAME = ".kg-build.log"
TMP_NAME = ".kg-tmp"
HOME_NAME = ".kg-home"
LOG_READ_LIMIT = 1 << 20  # the most of a confined build's log that is read back
_SPAWN_LOCK = threading.Lock()  # one fork+exec at a time: the sandbox's pre-exec hook runs in the fork
_STOPPED = {
    "timeout": "it ran past the wall-time limit",
    "cpu": "it used up its CPU time",
    "memory": "it used too much memory",
    "processes": "it started too many processes",
    "file_size": "it wrote a file over the size limit",
    "disk": "it filled its scratch space",
}


class ToolchainFault(Exception):
    """The CUDA toolchain cannot build at all (nvcc missing or not runnable, or failing on our own
    probe source): an infrastructure fault, never the student's."""


@dataclass(frozen=True)
class KernelTarget:
    """One shared library to build: `source` and `output` are relative to the submission root."""

    name: str
    source: str
    output: str
    missing_hint: str = ""  # what to tell a student whose submission lacks `source`


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...] = ()
    timeout_s: float = 300.0  # a trusted build's; a confined one has its sandbox's wall time, the per-file budget
    # Headers of the system the assignment's kit includes (system_includes): our probe source
    # includes them too, so a toolchain that lacks one fails the probe, not the student
    probe_includes: tuple[str, ...] = ()

    def command(self, source: Path, output: Path) -> list[str]:
        includes = [f"-I{d}" for d in self.include_dirs]
        return [self.nvcc, *self.flags, *includes, "-o", str(output), str(source)]

    def host_paths(self) -> tuple[str, ...]:
        """What a confined nvcc reads beyond the system's folders: nvcc's folder, the toolkit's
        root when that folder is its `bin`, and the include folders."""
        found = shutil.which(self.nvcc)
        folders = list(self.include_dirs)
        if found:
            folder = Path(os.path.realpath(found)).parent
            folders += [str(folder), *([str(folder.parent)] if folder.name == "bin" else [])]
        return tuple(folders)


@dataclass(frozen=True)
class Confinement:
    """How an untrusted build runs: every nvcc in `sandbox`, each target in a fresh folder
    under `scratch` (in the job folder; made private to the worker, so that no other sandboxed
    process can reach into it)."""

    sandbox: Sandbox
    scratch: Path


@dataclass
class BuildResult:
    name: str
    ok: bool
    log: str
    seconds: float
    cached: bool = False
    returncode: int | None = None
    command: list[str] = field(default_factory=list)
    over_budget_s: float | None = None  # the wall budget of one nvcc that this build ran past, if it did


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
    return (release or lines)[-1] if lines else None


CUDA_HEADERS = ("cublas_v2.h", "curand_kernel.h")  # what the assignments include beyond the CUDA runtime


@functools.cache
def toolkit_has_cuda_headers(nvcc: str) -> bool:
    """Whether `nvcc` finds CUDA_HEADERS by itself (its toolkit's include folder, or the
    system's, where a distribution's packages put them): it preprocesses a file that includes
    them. Asked once per nvcc and process (about a second)."""
    if shutil.which(nvcc) is None and not Path(nvcc).is_file():
        return False
    with tempfile.TemporaryDirectory(prefix="kg-cuda-headers-") as folder:
        source = Path(folder) / "headers.cu"
        source.write_text("".join(f"#include <{header}>\n" for header in CUDA_HEADERS))
        try:
            done = subprocess.run([nvcc, "-E", "-x", "cu", str(source), "-o", os.devnull],
                                  capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


def wheel_include_dirs() -> tuple[str, ...]:
    """Header folders of the nvidia-cublas / nvidia-curand wheels in this interpreter's
    `nvidia` package: the wheels installed whole (pyproject's `cuda-headers` extra), or only
    their headers, as tools/cuda_headers.py unpacks them for `make dev`."""
    try:
        import nvidia  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return ()
    found: list[str] = []
    for base in getattr(nvidia, "__path__", []):
        for include in sorted(Path(base).glob("*/include")) + sorted(Path(base).glob("*/*/include")):
            if any((include / header).exists() for header in CUDA_HEADERS) and str(include) not in found:
                found.append(str(include))
    return tuple(found)


def cuda_include_dirs(nvcc: str = "nvcc") -> tuple[str, ...]:
    """The include folders a build of the assignments needs beyond nvcc's own: none where
    `nvcc` finds cublas_v2.h and curand_kernel.h by itself (the system's toolkit), else the
    wheels' (a bare toolkit, as NVIDIA's runfile installs without its math libraries, lacks them)."""
    return () if toolkit_has_cuda_headers(nvcc) else wheel_include_dirs()


def build_inputs(root: Path, target: KernelTarget) -> list[str]:
    """What a target's build reads from the tree, relative to `root`: its source, then every
    header of the tree in a stable order. The cache key hashes exactly these, and a confined
    build sees exactly these."""
    headers = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if p.suffix in HEADER_SUFFIXES and p.is_file())
    return [target.source, *headers]


def cache_key(root: Path, target: KernelTarget, toolchain: Toolchain, version: str) -> str:
    """Hash of everything that determines the output: the source, every header in the
    submission's tree, the compiler version, flags and include folders."""
    digest = hashlib.sha256()
    for part in (version, *toolchain.flags, *toolchain.include_dirs, target.source):
        digest.update(part.encode() + b"\0")
    source, *headers = build_inputs(root, target)
    digest.update((root / source).read_bytes())
    for header in headers:
        digest.update(header.encode() + b"\0")
        digest.update((root / header).read_bytes())
    return digest.hexdigest()


def _relative(log: str, folder: Path) -> str:
    """Paths under `folder` (where nvcc ran) as the student knows them: relative to the
    submission root. Also keeps job folders out of logs the build cache hands to other runs."""
    return log.replace(f"{folder}{os.sep}", "")


# What a build run returns: its log, nvcc's exit status (None: it did not finish) and the wall
# budget it ran past (None: it did not).
_Ran = tuple[str, int | None, float | None]


def _run_trusted(root: Path, command: list[str], timeout_s: float) -> _Ran:
    """nvcc directly in the tree (our own kit)."""
    try:
        proc = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        partial = (exc.stdout or b"") + (exc.stderr or b"")
        text = partial.decode(errors="replace") if isinstance(partial, bytes) else str(partial)
        return _relative(text, root) + f"\nnvcc timed out after {timeout_s:.0f} s\n", None, timeout_s
    except OSError as exc:
        return f"cannot run nvcc: {exc}\n", None, None
    return _relative(proc.stdout + proc.stderr, root), proc.returncode, None


def _search_path(nvcc: str) -> str:
    """The confined build's PATH: nvcc's folder, then the worker's PATH (the host compiler, sh)."""
    found = shutil.which(nvcc)
    folders = [str(Path(found).parent)] if found else []
    return os.pathsep.join([*folders, os.environ.get("PATH", os.defpath)])


def _run_confined(root: Path, target: KernelTarget, command: list[str], toolchain: Toolchain,
                  confine: Confinement) -> _Ran:
    """nvcc in the sandbox, in a fresh folder holding a copy of the target's inputs; on success
    the library is copied into the tree at `target.output`. The sandbox's wall time is the
    per-file budget."""
    folder = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=confine.scratch))
    for rel in build_inputs(root, target):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, folder / rel)
    for sub in (TMP_NAME, HOME_NAME, str(Path(target.output).parent)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    argv = ["sh", "-c", f'exec "$@" >{LOG_NAME} 2>&1', "nvcc", *command]
    env = {"PATH": _search_path(toolchain.nvcc), "HOME": HOME_NAME, "TMPDIR": TMP_NAME}
    with _SPAWN_LOCK:
        process = confine.sandbox.spawn(argv, cwd=folder, env=env)
    ended = process.wait()
    try:
        raw = read_job_file(folder, LOG_NAME, LOG_READ_LIMIT + 1, cut=True)
    except JobFileError:  # no log, or nothing the parent may read
        raw = b""
    log = raw[:LOG_READ_LIMIT].decode(errors="replace") + process.output_tail()
    if len(raw) > LOG_READ_LIMIT:
        log += f"\n[build log cut at {LOG_READ_LIMIT} bytes]\n"
    if ended.reason != "exited":
        why = _STOPPED.get(ended.reason, "nvcc was killed")
        over = confine.sandbox.limits.wall_s if ended.reason == "timeout" else None
        return _relative(log, folder) + f"\nerror: the build was stopped: {why} ({ended.detail})\n", None, over
    if ended.returncode == 0:
        try:
            library = read_job_file(folder, target.output, confine.sandbox.limits.file_size_bytes)
        except JobFileMissing:
            log += f"\nerror: nvcc left no library at {target.output}\n"
        except JobFileError as exc:
            log += f"\nerror: {exc}\n"
        else:
            (root / target.output).write_bytes(library)
    return _relative(log, folder), ended.returncode, None


def _check_usable(nvcc: str, sandbox: Sandbox) -> None:
    """A worker whose sandbox user cannot run nvcc is misconfigured: raise (an infrastructure
    fault) rather than fail every submission as a build error. Under the docker backend nvcc
    is the image's."""
    found = shutil.which(nvcc)
    if sandbox.ids is not None and sandbox.policy.docker is None and (found is None or not usable_by(Path(found), *sandbox.ids)):
        raise SandboxError(f"the sandbox user cannot run nvcc ({found or nvcc}): make it and its folders reachable")


def _build_one(root: Path, target: KernelTarget, toolchain: Toolchain, version: str, cache_dir: Path | None,
               confine: Confinement | None) -> BuildResult:
    output = root / target.output
    if not (root / target.source).is_file():
        return BuildResult(target.name, False, f"missing kernel source: {target.source}\n", 0.0)
    output.parent.mkdir(parents=True, exist_ok=True)
    key = cache_key(root, target, toolchain, version)
    command = toolchain.command(Path(target.source), Path(target.output))
    cached_so = cache_dir / f"{key}.so" if cache_dir else None
    cached_log = cache_dir / f"{key}.log" if cache_dir else None
    if cached_so is not None and cached_log is not None and cached_so.exists() and cached_log.exists():
        shutil.copyfile(cached_so, output)
        return BuildResult(target.name, True, cached_log.read_text(), 0.0, cached=True, returncode=0, command=command)

    output.unlink(missing_ok=True)  # whatever is there now comes from this build
    started = time.monotonic()
    if confine is None:
        log, returncode, over_budget_s = _run_trusted(root, command, toolchain.timeout_s)
    else:
        log, returncode, over_budget_s = _run_confined(root, target, command, toolchain, confine)
    seconds = time.monotonic() - started
    ok = returncode == 0 and output.is_file()
    if ok and cached_so is not None and cached_log is not None:
        _store_atomically(log.encode(), cached_log)  # before the library: a reader trusts the pair once the .so is there
        _store_atomically(output.read_bytes(), cached_so)
    return BuildResult(target.name, ok, log, seconds, False, returncode, command, over_budget_s)


def _store_atomically(data: bytes, dest: Path) -> None:
    """`data` at `dest` whole or not at all, owner-only: the cache lives in the service's data
    dir, 0700 (made so here if missing) with 0600 files (mkstemp's), whatever the umask."""
    dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, dest)


STUB_SOURCE = "// kernelgrade: stands in for a kernel that did not build; it exports nothing.\n"


def build_stub(toolchain: Toolchain, folder: Path, cache_dir: Path | None = None) -> Path:
    """A shared library that exports nothing, built (trusted, cached) with the submission's
    toolchain in `folder`: it takes the place of a kernel that did not build, so that a
    MiniTorch that loads every library at import still imports, and only a call into that
    kernel fails (an undefined symbol). Raises RuntimeError when even this does not build."""
    (folder / "src").mkdir(parents=True, exist_ok=True)
    (folder / "src" / "kg_stub.cu").write_text(STUB_SOURCE)
    target = KernelTarget("stub", "src/kg_stub.cu", "kg_stub.so")
    (result,) = build_kernels(folder, [target], toolchain, cache_dir, 1)
    if not result.ok:
        raise ToolchainFault(f"the empty stand-in library did not build: {result.log.strip()[-500:]}")
    return folder / target.output


def build_kernels(
    root: Path,
    targets: list[KernelTarget],
    toolchain: Toolchain,
    cache_dir: Path | None = None,
    jobs: int | None = None,
    confine: Confinement | None = None,
) -> list[BuildResult]:
    """Build every target in parallel; results come back in the order of `targets`. With
    `confine` (every submission), nvcc runs sandboxed; without, directly (our own kit)."""
    root = root.resolve()
    version = nvcc_version(toolchain.nvcc)
    if version is None:
        raise ToolchainFault(f"nvcc not found or not runnable: {toolchain.nvcc}")
    if confine is not None:
        _check_usable(toolchain.nvcc, confine.sandbox)
        confine.scratch.mkdir(parents=True, exist_ok=True)
        confine.scratch.chmod(0o700)
        sandbox = confine.sandbox
        policy = replace(sandbox.policy, read_only=(*sandbox.policy.read_only, *toolchain.host_paths()))
        confine = Confinement(Sandbox(sandbox.limits, policy), confine.scratch.resolve())
    workers = max(1, min(jobs or len(targets), len(targets)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_build_one, root, t, toolchain, version, cache_dir, confine) for t in targets]
        results = [f.result() for f in futures]
    if confine is not None and any(not r.ok and r.returncode is not None and r.over_budget_s is None for r in results):
        # nvcc ran to its end and failed: the submission's doing, unless our probe fails there too
        failure = probe_toolchain(toolchain, Path(tempfile.mkdtemp(prefix="probe-", dir=confine.scratch)), confine)
        if failure is not None:
            raise ToolchainFault(f"our own probe source does not build with this toolchain either: {failure}")
    return results


INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


@functools.cache
def system_includes(kit: Path) -> tuple[str, ...]:
    """The headers the kit's sources include that are none of its own files (cuBLAS's, CUB's,
    the C++ library's, ...): any toolchain that builds the kit has them."""
    files = [p for p in kit.rglob("*") if p.is_file()]
    own = {p.relative_to(kit).as_posix() for p in files}
    included = {name for p in files if p.suffix in (".cu", ".cpp", *HEADER_SUFFIXES)
                for name in INCLUDE_LINE.findall(p.read_text(errors="replace"))}
    return tuple(sorted(name for name in included if not any(o == name or o.endswith("/" + name) for o in own)))


PROBE_SOURCE = """// kernelgrade's toolchain probe: if this does not build, the toolchain is at fault
__global__ void kg_probe(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" void kg_probe_launch(float* x) { kg_probe<<<1, 32>>>(x); }
"""
PROBE = KernelTarget("toolchain-probe", "src/kg_toolchain_probe.cu", "kg_toolchain_probe.so")


def probe_toolchain(toolchain: Toolchain, folder: Path, confine: Confinement | None = None) -> str | None:
    """Build PROBE_SOURCE, after an #include of each of `toolchain.probe_includes`, with
    `toolchain` in the fresh folder `folder` (sandboxed like a submission with `confine`,
    already set up by build_kernels), uncached: None when it built,
    else the line of its log that says why (nvcc's first error or fatal line, else its last)."""
    version = nvcc_version(toolchain.nvcc)
    if version is None:
        return f"nvcc not found or not runnable: {toolchain.nvcc}"
    folder = folder.resolve()
    (folder / PROBE.source).parent.mkdir(parents=True, exist_ok=True)
    (folder / PROBE.source).write_text("".join(f"#include <{h}>\n" for h in toolchain.probe_includes) + PROBE_SOURCE)
    result = _build_one(folder, PROBE, toolchain, version, None, confine)
    if result.ok:
        return None
    lines = [line.strip() for line in result.log.splitlines() if line.strip()]
    return next((line for line in lines if "fatal" in line or "error" in line), lines[-1] if lines else "no output")
