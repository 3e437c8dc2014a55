"""What a sandbox is asked for and what it reports: the limits of one child, the policy (user,
network, GPU, backend), how a child ended, and the one error for a sandbox that could not be
set up. Shared by both backends."""
from __future__ import annotations

from dataclasses import dataclass

# A namespaced job's own small tmpfs for the grader's files (a profiler's temporary files): apart
# from the `disk_bytes` the submission may fill, so a full scratch space cannot break them.
GRADER_TMP = "/kg-tmp"
GRADER_TMP_BYTES = 256 << 20


class SandboxError(RuntimeError):
    """The sandbox could not be set up as asked (unknown user, unusable cwd, ...)."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float            # parent kills the whole process group after this
    cpu_s: int               # RLIMIT_CPU
    memory_bytes: int        # summed resident memory of the child's processes (watchdog)
    max_processes: int       # processes of the child (watchdog) and RLIMIT_NPROC when uid-dropped
    file_size_bytes: int     # RLIMIT_FSIZE
    open_files: int = 256    # RLIMIT_NOFILE
    disk_bytes: int = 1 << 30  # all the job may write (job folder, /tmp, ...): a tmpfs of this size (namespaces only)


@dataclass(frozen=True)
class DockerOptions:
    """The "docker" backend: every spawn is a fresh container of `image` (see DockerProcess)."""
    image: str
    gpu: str | None = None         # `--gpus device=GPU` (host index or UUID); None: no GPU
    cpus: float = 4.0              # --cpus
    tmp_bytes: int = 1 << 30       # size of the container's /tmp (tmpfs)
    docker: str = "docker"         # the docker CLI
    python: str = "python3"        # interpreter in the image that runs the fd hand-over shim


@dataclass(frozen=True)
class SandboxPolicy:
    user: str | None = "nobody"   # drop to this uid/gid when running as root (None = stay)
    isolate_network: bool = True  # unshare(CLONE_NEWNET) when permitted; recorded on the process
    # The GPU the child may use: CUDA_VISIBLE_DEVICES and, namespaced, /dev/nvidia* and /sys in
    # its view (view.py). None: no GPU (a build).
    gpu_index: int | None = None
    docker: DockerOptions | None = None  # None: the process backend
    # Without PID/mount namespaces on this host the process backend refuses to run (False: it
    # runs without them, with only what the preexec hook applies; see `isolation`).
    require_namespaces: bool = True
    # Host paths the child may read besides the system's and the Python runtime's (namespaced
    # process backend: see view.py), e.g. a build's CUDA toolkit and include folders.
    read_only: tuple[str, ...] = ()


@dataclass(frozen=True)
class SandboxExit:
    returncode: int | None
    reason: str   # "exited" | "signal" | "timeout" | "memory" | "processes" | "cpu" | "file_size" | "disk"
    detail: str
    isolation: tuple[str, ...] = ()  # what was applied: see SandboxedProcess.isolation
    # What the syscall filter refused (namespaced process backend), "family: call" with a count
    # past one, e.g. ("tracing: ptrace x3",): syscall_filter.py
    refused: tuple[str, ...] = ()


def nproc_limit(max_processes: int) -> int:
    """RLIMIT_NPROC (process backend) and the pids cgroup (docker): both count threads, so a
    backstop with headroom over the watchdog's cap of `max_processes`."""
    return 2 * max_processes + 64


def counted(word: str, n: int) -> str:
    """`word` with its count past one: "tracing: ptrace x3", "symbolic link"."""
    return word + (f" x{n}" if n > 1 else "")


def size_words(n: int) -> str:
    """A byte count as people say it: "32 GiB", "512 MiB"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"
