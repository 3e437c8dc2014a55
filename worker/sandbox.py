"""How kernelgrade runs submitted code (standard library only): the "process" backend, described
here, and the "docker" backend (`SandboxPolicy.docker`; DockerProcess at the end of this module).

Every piece of submitted code runs in ONE fresh child per problem, started with fork+exec by
`subprocess.Popen` (never fork-without-exec; this module never touches CUDA).

Namespaces (the default; `namespaces_unavailable` probes once per process whether this host
has them): Popen starts a root launcher (worker/sandbox_init.py, whose docstring has the
details) after a pre-exec hook that sets only the rlimits below and PR_SET_PDEATHSIG. The
launcher gives the job its own PID namespace (its init reaps, and its end kills every process
the job started, daemons included), mount namespace (everything read-only; fresh empty /tmp,
/var/tmp, /dev/shm, /run; host file-system Unix sockets covered; a fresh /proc) and network
namespace, then drops to the sandbox user with no_new_privs and execs the program. All the job
writes lands in one tmpfs of `limits.disk_bytes` (an overlay on the job folder); when the job
ends, the watchdog thread merges what it wrote into the real job folder (`_merge_back`), so
callers find it there as before, but only then: during the job the parent sees its writes
only in files it has mapped (bound through, e.g. the GPU stage's arena). What was applied is
`SandboxedProcess.isolation` and `SandboxExit.isolation`.

Without namespaces the sandbox refuses to run (SandboxError) unless
`SandboxPolicy.require_namespaces` is False (KG_SANDBOX_REQUIRE_NAMESPACES=false); then, as
before namespaces, between fork and exec the child (in `_ChildSetup`, a pre-exec hook kept
free of imports and locks):

- gets rlimits: RLIMIT_CPU (soft cpu_s -> SIGXCPU, hard +1 s -> SIGKILL), RLIMIT_FSIZE,
  RLIMIT_NOFILE, RLIMIT_CORE=0, and RLIMIT_NPROC (only when dropping to the sandbox uid: the
  kernel counts it per uid and ignores it for root);
- leaves the network: unshare(CLONE_NEWNET) when permitted (root). A fresh network namespace
  has only a loopback that is down, so every connect fails. Whether it happened is reported
  back through a pipe and kept as `SandboxedProcess.network_isolated`; without permission
  (a non-root dev machine) the child runs with the host network and that flag is False;
- sets PR_SET_NO_NEW_PRIVS (setuid binaries cannot give root back), then setgroups([]),
  setgid, setuid to the sandbox user (`SandboxPolicy.user`, default "nobody") when running as
  root.

It starts a new session (so its pid is its process group and session id), with an EMPTY
environment plus exactly the `env` the caller passes (nothing is inherited from the grading
parent, so no secrets leak; CUDA_VISIBLE_DEVICES is set from `gpu_index`), stdin from
/dev/null, stdout+stderr into one pipe drained by a thread into a bounded tail buffer, and
every fd closed except the std streams and `pass_fds`.

A watchdog thread in the parent scans /proc every ~0.2 s for the child's processes (same
session or process group, plus descendants traced by parent pid, remembered by
(pid, start time) so a process that calls setsid() stays tracked once seen) and kills them
all when their summed resident memory passes `memory_bytes` (not RLIMIT_AS: CUDA reserves huge
virtual ranges), when there are more than `max_processes` of them, or after `wall_s`.
Leftover processes are killed when the main child exits, too.

What the deployer must ensure:
- The grading parent runs as root so the uid drop, RLIMIT_NPROC and the netns apply.
- The sandbox user owns nothing else: the blob store, database, hidden tests, other jobs'
  dirs and secrets are root-owned 0700/0600 (or otherwise unreadable to that uid).
  `spawn` chowns only the given cwd (recursively, never following symlinks, skipping
  hard-linked files) to the sandbox user, so anything the parent puts there is the
  child's to change: the parent must not trust files it reads back from cwd.
- Concurrent sandboxes should use distinct users (e.g. one per GPU slot): RLIMIT_NPROC
  counts all processes (threads, in fact) of a uid, and processes of one uid can signal
  and ptrace each other and read each other's job dirs.
- The interpreter/program in argv, and any trusted runner files it imports, must be
  readable and executable by the sandbox user along their whole path (see `usable_by`).
- `max_processes` is enforced by the watchdog on processes; RLIMIT_NPROC (threads of
  the whole uid) is set to 2*max_processes+64 as a backstop that bounds a fork bomb
  between scans.

Limits of the process backend (the docker backend has kernel-enforced memory and pids limits;
see ARCHITECTURE.md "Deployment"): the memory and process caps are polled, so a fast
allocator can overshoot the cap for up to one scan interval, and RSS of forked processes
double-counts shared pages (conservative); GPU memory is not counted, nor the tmpfs of the
write cap (RAM, up to disk_bytes per job); reads outside the hidden folders are restricted by
ordinary file permissions (the view is read-only, not empty); a Unix socket bound on the host
after the job started, or in another network namespace, is not covered unless it lies under
/run, /var/run, /tmp, /var/tmp or /dev/shm. Without namespaces (allowed by the policy): no
write cap, shared /tmp, host sockets reachable, and a process that calls setsid() and
double-forks within one scan interval can escape tracking (RLIMIT_NPROC still bounds it as root).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import os
import pwd
import resource
import signal
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from worker import sandbox_init
from worker.affinity import pin_process

if TYPE_CHECKING:
    from grader.settings import Settings

__all__ = ["SandboxLimits", "SandboxPolicy", "SandboxExit", "Sandbox", "SandboxedProcess", "SandboxError", "usable_by",
           "DockerOptions", "DockerProcess", "docker_command", "docker_options"]

CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
SCAN_INTERVAL_S = 0.2
TAIL_KEEP_BYTES = 64 * 1024
SPAWN_RETRY_S = 5.0
SANDBOX_LABEL = "kernelgrade.sandbox=1"  # on every sandbox container (for `docker ps --filter label=...`)
FD_SOCKET_NAME = ".kg-fds.sock"
HANDOVER_TIMEOUT_S = 120.0  # for a container to start and take its file descriptors
_PAGE = os.sysconf("SC_PAGE_SIZE")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def docker_options(settings: Settings) -> DockerOptions | None:
    """The docker backend's options from the settings, or None for the process backend."""
    if settings.sandbox_backend != "docker":
        return None
    return DockerOptions(image=settings.sandbox_docker_image, cpus=settings.sandbox_docker_cpus,
                         gpu=settings.sandbox_docker_gpu or str(settings.gpu_index))


@dataclass(frozen=True)
class SandboxPolicy:
    user: str | None = "nobody"   # drop to this uid/gid when running as root (None = stay)
    isolate_network: bool = True  # unshare(CLONE_NEWNET) when permitted; recorded on the process
    gpu_index: int | None = None  # sets CUDA_VISIBLE_DEVICES
    docker: DockerOptions | None = None  # None: the process backend
    # Without PID/mount namespaces on this host the process backend refuses to run (False: it
    # runs without them, with only what the preexec hook applies; see `isolation`).
    require_namespaces: bool = True


@dataclass(frozen=True)
class SandboxExit:
    returncode: int | None
    reason: str   # "exited" | "signal" | "timeout" | "memory" | "processes" | "cpu" | "file_size"
    detail: str
    isolation: tuple[str, ...] = ()  # what was applied: see SandboxedProcess.isolation


def _libc():
    name = ctypes.util.find_library("c") or "libc.so.6"
    return ctypes.CDLL(name, use_errno=True)


_LIBC = _libc()


def _unshare_net() -> bool:
    if hasattr(os, "unshare"):  # Python 3.12+
        try:
            os.unshare(CLONE_NEWNET)
            return True
        except OSError:
            return False
    return _LIBC.unshare(CLONE_NEWNET) == 0


def usable_by(path: Path, uid: int, gid: int, mode: int = os.R_OK | os.X_OK) -> bool:
    """True when `uid`/`gid` (without supplementary groups) can search every directory above
    `path` and has `mode` on `path` itself, by the permission bits (root always can).
    Symlinks are resolved first."""
    if uid == 0:
        return True
    target = Path(os.path.realpath(path))
    checks = [(p, os.X_OK) for p in reversed(target.parents)] + [(target, mode)]
    for p, want in checks:
        try:
            st = os.stat(p)
        except OSError:
            return False
        if st.st_uid == uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == gid:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        if bits & want != want:
            return False
    return True


def _nproc_limit(max_processes: int) -> int:
    return 2 * max_processes + 64


class _ChildSetup:
    """Runs in the child between fork and exec: no imports, no allocation-heavy work. With
    `namespaced`, only the rlimits and PR_SET_PDEATHSIG: the launcher (sandbox_init.py) must stay
    root to build the namespaces, and drops the job's privileges itself."""

    def __init__(self, limits: SandboxLimits, isolate_network: bool, ids: tuple[int, int] | None, report_fd: int,
                 namespaced: bool = False):
        self.rlimits = [
            (resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1)),
            (resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes)),
            (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        if ids is not None:
            # A backstop, not the cap: it counts threads (CUDA and BLAS runtimes start many)
            # and every process of the uid; the headroom also lets a fork bomb go past the
            # watchdog's cap (and get killed) instead of spinning against the rlimit.
            nproc = _nproc_limit(limits.max_processes)
            self.rlimits.append((resource.RLIMIT_NPROC, (nproc, nproc)))
        self.isolate_network = isolate_network
        self.ids = ids
        self.report_fd = report_fd
        self.namespaced = namespaced
        self.prctl = _LIBC.prctl
        self.parent = os.getpid()

    def __call__(self) -> None:
        for which, value in self.rlimits:
            resource.setrlimit(which, value)
        if not self.namespaced:
            isolated = self.isolate_network and _unshare_net()
            os.write(self.report_fd, b"1" if isolated else b"0")
        self.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if self.ids is not None and not self.namespaced:
            uid, gid = self.ids
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        # Dies with the worker (SIGKILL reaches it even while paused); set after the uid drop,
        # which clears it. A worker already gone by now: end here.
        self.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self.parent:
            os._exit(1)


@dataclass
class _ProcInfo:
    ppid: int
    pgrp: int
    sid: int
    state: str
    cpu_s: float
    start: int
    rss: int


def _read_stat(pid: int) -> _ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    try:
        return _ProcInfo(
            ppid=int(rest[1]), pgrp=int(rest[2]), sid=int(rest[3]), state=rest[0].decode(),
            cpu_s=(int(rest[11]) + int(rest[12])) / _CLK_TCK, start=int(rest[19]), rss=int(rest[21]) * _PAGE,
        )
    except (IndexError, ValueError):
        return None


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


# ---- namespaces (the launcher is worker/sandbox_init.py) -----------------------------------

LAUNCHER = Path(__file__).with_name("sandbox_init.py")
NAMESPACED = ("pid", "mount", "disk")  # isolation a namespaced job gets, with "network" unless disabled
OPAQUE_XATTR = "trusted.overlay.opaque"


def _mapped_files(cwd: Path) -> list[str]:
    """Files under `cwd` this process has mapped (the GPU stage's arena), relative to `cwd`:
    the launcher binds them through the job folder's overlay, so they stay shared."""
    prefix = f"{cwd}/"
    with open("/proc/self/maps") as f:
        paths = {line.split(None, 5)[5].strip() for line in f if line.count(" ") >= 5 and prefix in line}
    return sorted(p[len(prefix):] for p in paths if p.startswith(prefix) and os.path.isfile(p))


def _launch_namespaced(argv: list[str], cwd: Path, env: dict[str, str], pass_fds: tuple[int, ...],
                       config: dict[str, object], setup: Callable[[], None] | None,
                       out_w: int | None) -> tuple[subprocess.Popen, int]:
    """Start `argv` through the launcher; returns its Popen and the fd of the job's capped
    scratch folder (the overlay's upper layer). Raises SandboxError when the namespaces could
    not be built, and OSError (as Popen) when `argv` could not be executed."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours:
        try:
            popen = subprocess.Popen(
                [sys.executable, "-I", "-S", str(LAUNCHER), str(theirs.fileno())],
                cwd=cwd, env={}, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, close_fds=True,
                pass_fds=(*pass_fds, theirs.fileno()), start_new_session=True, preexec_fn=setup,
                restore_signals=True,
            )
        finally:
            theirs.close()
        try:
            ours.sendall(json.dumps({**config, "argv": argv, "env": env}).encode())
            return popen, _launch_report(ours, argv[0])
        except BaseException:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
            raise


def _launch_report(sock: socket.socket, program: str) -> int:
    message, fds, _, _ = socket.recv_fds(sock, 65536, 1)
    report = json.loads(message) if message else {"error": "the sandbox launcher ended without a word"}
    if report.get("ok") and len(fds) == 1:
        return fds[0]
    for fd in fds:
        os.close(fd)
    if "exec_errno" in report:
        errno = int(report["exec_errno"])
        raise OSError(errno, os.strerror(errno), program)
    raise SandboxError(str(report.get("error", report)))


PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _kept_paths(argv: list[str], env: dict[str, str]) -> list[str]:
    """Host folders the job must still read though they lie under a folder the sandbox gives it
    fresh (a CI checkout or a virtualenv under /tmp): this interpreter's prefixes, this
    project, the job's PYTHONPATH and its program's folder. Outermost folders only."""
    candidates = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), str(PROJECT_ROOT),
                  *env.get("PYTHONPATH", "").split(os.pathsep)}
    if os.path.isabs(argv[0]):
        candidates.add(os.path.dirname(os.path.realpath(argv[0])))
    found = {os.path.realpath(p) for p in candidates if p and os.path.isdir(p)}
    # Strictly below: a PYTHONPATH of "/tmp" itself must not hand the host's /tmp back.
    hidden = [p for p in found if any(p.startswith(f + "/") for f in sandbox_init.HIDDEN)]
    return sorted(p for p in hidden if not any(p.startswith(q + "/") for q in hidden))


@functools.cache
def namespaces_unavailable() -> str | None:
    """Why this host cannot give a sandboxed job its own PID, mount and network namespaces, or
    None when it can. Probed once per process by launching a job that does nothing."""
    if os.geteuid() != 0:
        return "the grading parent is not root"
    folder = Path(tempfile.mkdtemp(prefix="kg-sandbox-probe-"))
    argv = [sys.executable, "-I", "-S", "-c", ""]
    config = {"cwd": str(folder), "uid": None, "gid": None, "network": True, "disk_bytes": 1 << 20, "shared": [],
              "keep": _kept_paths(argv, {})}
    try:
        popen, scratch = _launch_namespaced(argv, folder, {}, (), config,
                                            None, subprocess.DEVNULL)
        os.close(scratch)
        return None if popen.wait(timeout=30) == 0 else "the probe job failed"
    except (OSError, SandboxError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _remove(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except IsADirectoryError:
        shutil.rmtree(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _open_dir(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def _is_opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, OPAQUE_XATTR) == b"y"
    except OSError:
        return False


def _merge_back(upper: int, cwd: Path, ids: tuple[int, int] | None) -> None:
    """Apply what the job wrote (the overlay's upper layer, fd `upper`) to the real job folder,
    so the parent finds it there as if the job had written in place: files and symlinks copied,
    whiteouts (char device 0:0) deleted, opaque folders emptied first. Runs after every process
    of the job is gone; all through directory fds without following links (the content is the
    job's). Iterative: the job may nest folders deeper than Python's recursion limit."""
    todo = [(upper, os.open(cwd, os.O_RDONLY | os.O_DIRECTORY))]
    while todo:
        src, dst = todo.pop()
        try:
            for entry in os.scandir(src):
                pair = _merge_entry(src, dst, entry, ids)
                if pair is not None:
                    todo.append(pair)
        finally:
            os.close(src)
            os.close(dst)


def _merge_entry(src: int, dst: int, entry: os.DirEntry, ids: tuple[int, int] | None) -> tuple[int, int] | None:
    """One entry of `_merge_back`; returns the (source, destination) folder fds to descend into."""
    name, st = entry.name, entry.stat(follow_symlinks=False)
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        _remove(dst, name)
        return None
    descend = None
    if stat.S_ISDIR(st.st_mode):
        try:
            os.mkdir(name, 0o700, dir_fd=dst)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=dst, follow_symlinks=False).st_mode):
                _remove(dst, name)
                os.mkdir(name, 0o700, dir_fd=dst)
        descend = (_open_dir(name, src), _open_dir(name, dst))
        os.fchmod(descend[1], st.st_mode & 0o777)
        if _is_opaque(descend[0]):  # the job replaced a folder of the real one
            for old in os.listdir(descend[1]):
                _remove(descend[1], old)
    elif stat.S_ISREG(st.st_mode):
        _remove(dst, name)
        fd_in = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=src)
        fd_out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst)
        with os.fdopen(fd_in, "rb") as fin, os.fdopen(fd_out, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            os.fchmod(fout.fileno(), st.st_mode & 0o777)
    elif stat.S_ISLNK(st.st_mode):
        _remove(dst, name)
        os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
    else:
        return None  # sockets, FIFOs, devices: not carried over
    if ids is not None:
        os.chown(name, *ids, dir_fd=dst, follow_symlinks=False)
    return descend


class Sandbox:
    def __init__(self, limits: SandboxLimits, policy: SandboxPolicy = SandboxPolicy()) -> None:
        self.limits = limits
        self.policy = policy
        self.ids: tuple[int, int] | None = None
        if policy.user is not None and os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(policy.user)
            except KeyError as exc:
                raise SandboxError(f"sandbox user {policy.user!r} does not exist") from exc
            if pw.pw_uid == 0:
                raise SandboxError(f"sandbox user {policy.user!r} is root")
            self.ids = (pw.pw_uid, pw.pw_gid)
        self.namespaced = policy.docker is None and namespaces_unavailable() is None
        if policy.docker is None and not self.namespaced and policy.require_namespaces:
            raise SandboxError(f"this host cannot give sandboxed jobs their own PID and mount namespaces "
                               f"({namespaces_unavailable()}); refusing to run submitted code without them "
                               f"(KG_SANDBOX_REQUIRE_NAMESPACES=false runs it with weaker isolation)")

    def _give_cwd(self, cwd: Path) -> None:
        """chown cwd and everything under it to the sandbox user, never following symlinks
        and leaving hard-linked files alone (they could be someone else's inode)."""
        uid, gid = self.ids  # type: ignore[misc]
        os.chown(cwd, uid, gid, follow_symlinks=False)
        os.chmod(cwd, 0o700)
        for root, dirs, files in os.walk(cwd, followlinks=False):
            for name in dirs + files:
                p = os.path.join(root, name)
                st = os.lstat(p)
                if not os.path.isdir(p) and not os.path.islink(p) and st.st_nlink > 1:
                    continue
                os.chown(p, uid, gid, follow_symlinks=False)

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> SandboxedProcess:
        cwd = Path(cwd)
        if not cwd.is_dir() or cwd.is_symlink():
            raise SandboxError(f"sandbox cwd {cwd} is not a directory")
        if self.ids is not None:
            self._give_cwd(cwd)
        child_env = {str(k): str(v) for k, v in env.items()}
        if self.policy.docker is not None:
            return self._spawn_container(self.policy.docker, argv, cwd, child_env, tuple(pass_fds))
        if self.policy.gpu_index is not None:
            child_env["CUDA_VISIBLE_DEVICES"] = str(self.policy.gpu_index)
        # execve fails with EAGAIN while the sandbox uid is at its RLIMIT_NPROC, e.g. just
        # after another sandbox of the same uid was killed and init has not reaped its
        # orphans yet: retry for a few seconds before giving up.
        deadline = time.monotonic() + SPAWN_RETRY_S
        while True:
            try:
                return self._spawn_once(argv, cwd, child_env, tuple(pass_fds))
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _spawn_container(self, options: DockerOptions, argv: list[str], cwd: Path, env: dict[str, str],
                         pass_fds: tuple[int, ...]) -> DockerProcess:
        if self.policy.gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = "0"  # the container's one GPU
        user = self.ids or (os.geteuid(), os.getegid())
        name = f"kg-sandbox-{uuid.uuid4().hex[:16]}"
        handover = _FdHandover(cwd, user if self.ids else None) if pass_fds else None
        command = docker_command(options, self.limits, name, argv, cwd, env, user,
                                 handover.path if handover else None, pass_fds)
        out_r, out_w = os.pipe()
        try:
            popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                     close_fds=True, start_new_session=True)
        except BaseException:
            os.close(out_r)
            if handover:
                handover.close()
            raise
        finally:
            os.close(out_w)
        process = DockerProcess(popen, name, options, self.limits, out_r, user[0])
        if handover is not None and not handover.give(pass_fds, popen):
            process.kill()
            try:
                process.wait()
            except SandboxError:
                pass
            raise SandboxError(f"sandbox container {name} did not take its file descriptors: {process.output_tail(2000)}")
        return process

    def _spawn_namespaced(self, argv: list[str], cwd: Path, child_env: dict[str, str],
                          pass_fds: tuple[int, ...]) -> SandboxedProcess:
        uid, gid = self.ids or (None, None)
        config = {"cwd": str(cwd), "uid": uid, "gid": gid, "network": self.policy.isolate_network,
                  "disk_bytes": self.limits.disk_bytes, "shared": _mapped_files(cwd), "keep": _kept_paths(argv, child_env)}
        setup = _ChildSetup(self.limits, False, self.ids, -1, namespaced=True)
        out_r, out_w = os.pipe()
        try:
            popen, scratch = _launch_namespaced(argv, cwd, child_env, pass_fds, config, setup, out_w)
        except BaseException:
            os.close(out_r)
            raise
        finally:
            os.close(out_w)
        isolation = (("network",) if self.policy.isolate_network else ()) + NAMESPACED
        return SandboxedProcess(popen, self.limits, out_r, isolation, self.ids, (scratch, cwd))

    def _spawn_once(self, argv: list[str], cwd: Path, child_env: dict[str, str], pass_fds: tuple[int, ...]) -> SandboxedProcess:
        if self.namespaced:
            return self._spawn_namespaced(argv, cwd, child_env, pass_fds)
        report_r, report_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            setup = _ChildSetup(self.limits, self.policy.isolate_network, self.ids, report_w)
            popen = subprocess.Popen(
                argv, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                close_fds=True, pass_fds=pass_fds, start_new_session=True, preexec_fn=setup,
                restore_signals=True,
            )
        except BaseException:
            os.close(out_r)
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
            os.close(out_w)
        try:
            isolated = os.read(report_r, 1) == b"1"
        finally:
            os.close(report_r)
        return SandboxedProcess(popen, self.limits, out_r, ("network",) if isolated else (), self.ids)


class _OutputTail:
    """Drains a pipe from a thread, keeping only the last TAIL_KEEP_BYTES."""

    def __init__(self, fd: int, name: str) -> None:
        self._chunks: deque[bytes] = deque()
        self._len = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(fd,), name=name, daemon=True)
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                with self._lock:
                    self._chunks.append(chunk)
                    self._len += len(chunk)
                    while self._len - len(self._chunks[0]) >= TAIL_KEEP_BYTES:
                        self._len -= len(self._chunks.popleft())
        finally:
            os.close(fd)

    def tail(self, limit: int) -> str:
        limit = min(limit, TAIL_KEEP_BYTES)
        with self._lock:
            data = b"".join(self._chunks)
        return data[-limit:].decode("utf-8", errors="replace") if limit > 0 else ""

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)


def _wait_within_wall_time(popen: subprocess.Popen, wall_s: float, started: float,
                           trip: Callable[[str, str], None], timeout: float | None) -> None:
    """Popen.wait, never past `wall_s` from `started` (then `trip` kills the child). With a
    `timeout` shorter than what is left of the wall time, raises subprocess.TimeoutExpired
    like Popen.wait when it runs out first."""
    remaining = wall_s - (time.monotonic() - started)
    if timeout is not None and timeout < remaining:
        popen.wait(timeout=max(timeout, 0))
        return
    try:
        popen.wait(timeout=max(remaining, 0) + 0.5)
    except subprocess.TimeoutExpired:
        trip("wall", f"killed after {wall_s:.1f} s wall time")
        popen.wait()


class SandboxedProcess:
    def __init__(self, popen: subprocess.Popen, limits: SandboxLimits, out_fd: int, isolation: tuple[str, ...],
                 ids: tuple[int, int] | None, scratch: tuple[int, Path] | None = None) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.limits = limits
        # What was applied: "network" (own network namespace), "pid" (own PID namespace: the
        # job's processes die with it), "mount" (read-only view, fresh /tmp & co., host sockets
        # hidden), "disk" (writes capped at limits.disk_bytes).
        self.isolation = isolation
        self.network_isolated = "network" in isolation
        self._ids = ids
        self._scratch = scratch  # (fd of the job's overlay upper layer, real job folder)
        self.uid: int | None = ids[0] if ids else None
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._violation: str | None = None
        self._violation_detail = ""
        self._known: dict[int, int] = {}  # pid -> start time of every process seen in the sandbox
        self._max_cpu_s = 0.0  # RLIMIT_CPU is per process: the most any member has used
        self._merge_error: OSError | None = None
        # The child cannot have been reaped yet, so its pid is still ours to read.
        info = _read_stat(self.pid)
        self._leader_start = info.start if info else -1
        self._output = _OutputTail(out_fd, f"sandbox-out-{self.pid}")
        self._result: SandboxExit | None = None
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"sandbox-watch-{self.pid}", daemon=True)
        self._watchdog.start()

    def output_tail(self, limit: int = 8192) -> str:
        """The last `limit` bytes (at most TAIL_KEEP_BYTES) of stdout+stderr, decoded leniently."""
        return self._output.tail(limit)

    # ---- process tracking ---------------------------------------------------------------
    def _members(self, zombies: bool = False) -> dict[int, _ProcInfo]:
        """Live (non-zombie unless `zombies`) processes of this sandbox, found by session/group, by parent
        chain from known members, or remembered from an earlier scan."""
        table: dict[int, _ProcInfo] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                info = _read_stat(int(name))
                if info is not None:
                    table[int(name)] = info
        with self._lock:
            known = dict(self._known)
        known[self.pid] = self._leader_start
        members = {pid for pid, info in table.items()
                   if known.get(pid) == info.start or info.sid == self.pid or info.pgrp == self.pid}
        grew = True
        while grew:
            grew = False
            for pid, info in table.items():
                if pid not in members and info.ppid in members:
                    members.add(pid)
                    grew = True
        if self.uid is not None:
            # After the uid drop (and with no_new_privs) every sandbox process but the leader's
            # first instants runs as the sandbox uid: never touch anything else, e.g. a process
            # that reused a pid after the sandbox's own ones are gone.
            members = {pid for pid in members if (pid == self.pid and table[pid].start == self._leader_start)
                       or _owner(pid) == self.uid}
        with self._lock:
            for pid in members:
                self._known[pid] = table[pid].start
        return {pid: table[pid] for pid in members if zombies or table[pid].state not in ("Z", "X")}

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by every thread of the sandbox's known processes, from the
        scheduler's statistics (nanosecond resolution; /proc/PID/stat counts 10 ms ticks);
        None where the kernel keeps none."""
        with self._lock:
            pids = list(self._known) or [self.pid]
        total_ns = 0
        for pid in pids:
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # gone: its time leaves the sum, which callers clamp at 0
            for tid in tasks:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                        total_ns += int(f.read().split()[0])
                except FileNotFoundError:
                    continue
                except (OSError, ValueError, IndexError):
                    return None
        return total_ns / 1e9

    def _kill_all(self) -> None:
        """SIGKILL the group and every tracked process until none is left alive."""
        for _ in range(50):
            if self._popen.returncode is None:
                # Not reaped yet, so the group id cannot have been reused by anyone else.
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            alive = self._members()
            if not alive:
                return
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def _trip(self, kind: str, detail: str) -> None:
        with self._lock:
            if self._violation is None:
                self._violation, self._violation_detail = kind, detail
        self._kill_all()

    def _watch(self) -> None:
        lim = self.limits
        while not self._stop.is_set():
            if self._popen.poll() is not None:
                break
            if time.monotonic() - self.started > lim.wall_s:
                self._trip("wall", f"killed after {lim.wall_s:.1f} s wall time")
                break
            members = self._members()
            self._max_cpu_s = max([self._max_cpu_s, *(info.cpu_s for info in members.values())])
            rss = sum(info.rss for info in members.values())
            if len(members) > lim.max_processes:
                self._trip("processes", f"{len(members)} processes, over the cap of {lim.max_processes}")
                break
            if rss > lim.memory_bytes:
                self._trip("memory", f"resident memory {rss >> 20} MiB, over the cap of {lim.memory_bytes >> 20} MiB")
                break
            self._stop.wait(SCAN_INTERVAL_S)
        self._collect_scratch()

    def _collect_scratch(self) -> None:
        """Once the job has ended (and with it its PID namespace), carry what it wrote into the
        real job folder and let its capped tmpfs go. Here, in the watchdog thread, so that it
        happens even when the caller kills the child and never waits."""
        if self._scratch is None:
            return
        self._popen.wait()
        upper, cwd = self._scratch
        try:
            _merge_back(upper, cwd, self._ids)
        except OSError as exc:
            self._merge_error = exc

    # ---- public -------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._result is None and self._popen.poll() is None

    def poll_violation(self) -> str | None:
        """"memory", "processes" or "wall" once the watchdog (or wait) has tripped, else None."""
        with self._lock:
            return self._violation

    def kill(self) -> None:
        """Kill every process of the sandbox (group, session and traced descendants)."""
        self._kill_all()

    def pause(self) -> None:
        """Stop every process of the sandbox (SIGSTOP; again for any that appeared meanwhile),
        so a parked child cannot load the GPU or CPU while another child is timed."""
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_all(signal.SIGCONT)

    def pin(self, cpus: set[int]) -> None:
        """Every thread of every process of the sandbox onto `cpus` (see worker.affinity)."""
        for pid in self._members():
            pin_process(pid, cpus)

    def _signal_all(self, sig: int) -> None:
        sent: set[int] = set()
        for _ in range(5):
            fresh = set(self._members()) - sent
            if not fresh:
                return
            for pid in fresh:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            sent |= fresh

    def wait(self, timeout: float | None = None) -> SandboxExit:
        """Wait for the child; never longer than its wall_s from spawn (then the group is
        killed and the reason is "timeout"). With `timeout` shorter than what is left of the
        wall time, raises subprocess.TimeoutExpired like Popen.wait when it runs out first."""
        if self._result is not None:
            return self._result
        _wait_within_wall_time(self._popen, self.limits.wall_s, self.started, self._trip, timeout)
        returncode = self._popen.returncode
        self._stop.set()
        leftovers = len(self._members())
        self._kill_all()
        # Orphans are reaped by init; until then their zombies still count against the
        # sandbox uid's RLIMIT_NPROC, so give them a moment before the next spawn.
        settle_until = time.monotonic() + 3
        while self._members(zombies=True) and time.monotonic() < settle_until:
            time.sleep(0.02)
        self._watchdog.join()  # it ends right after the child, merging back what it wrote (bounded by the cap)
        self._output.join(timeout=5)
        if self._merge_error is not None:
            raise SandboxError(f"could not carry the job's files back into {self._scratch[1]}: {self._merge_error}")
        with self._lock:
            violation, vdetail = self._violation, self._violation_detail
        cpu_spent = self._max_cpu_s >= self.limits.cpu_s - 0.5
        self._result = replace(_classify(returncode, self.limits, violation, vdetail, leftovers, cpu_spent),
                               isolation=self.isolation)
        return self._result


def _classify(rc: int, limits: SandboxLimits, violation: str | None, vdetail: str, leftovers: int,
              cpu_spent: bool) -> SandboxExit:
    """How a child ended: `rc` as Popen reports it (negative: killed by that signal),
    `violation` what a watchdog tripped on, `cpu_spent` whether its CPU time reached the limit."""
    if violation is not None:
        return SandboxExit(rc, "timeout" if violation == "wall" else violation, vdetail)
    extra = f"; killed {leftovers} leftover process(es)" if leftovers else ""
    if rc >= 0:
        return SandboxExit(rc, "exited", f"exit status {rc}{extra}")
    sig = -rc
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_spent):
        return SandboxExit(rc, "cpu", f"{name}: CPU time limit of {limits.cpu_s} s{extra}")
    if sig == signal.SIGXFSZ:
        return SandboxExit(rc, "file_size", f"{name}: file size limit of {limits.file_size_bytes} bytes{extra}")
    return SandboxExit(rc, "signal", f"{name}{extra}")


# ---- the "docker" backend ------------------------------------------------------------------

def docker_command(options: DockerOptions, limits: SandboxLimits, name: str, argv: list[str], cwd: Path,
                   env: dict[str, str], user: tuple[int, int], fd_socket: Path | None = None,
                   pass_fds: tuple[int, ...] = ()) -> list[str]:
    """The `docker run` command line for one sandboxed child: a fresh container `name` of
    `options.image` running `argv` in `cwd`, which is bind-mounted at the same path (the
    worker's jobs folder must have that path on the docker host too). With `fd_socket`, a shim
    first takes `pass_fds` over that socket (see _FdHandover)."""
    if not cwd.is_absolute() or "," in str(cwd):
        raise SandboxError(f"cannot bind-mount {cwd}: needs an absolute path without commas")
    memory = str(limits.memory_bytes)
    command = [
        options.docker, "run", "--name", name, "--label", SANDBOX_LABEL, "--pull", "never",
        "--init", "--network", "none", "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--ipc", "private", "--user", f"{user[0]}:{user[1]}",
        "--mount", f"type=bind,source={cwd},target={cwd}", "--workdir", str(cwd),
        "--tmpfs", f"/tmp:rw,nosuid,nodev,size={options.tmp_bytes}",
        "--memory", memory, "--memory-swap", memory,  # equal: no swap
        # The pids cgroup counts threads, like RLIMIT_NPROC: the same headroom as the process backend.
        "--pids-limit", str(_nproc_limit(limits.max_processes)),
        "--cpus", f"{options.cpus:g}",
        "--ulimit", f"cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        "--ulimit", f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
        "--ulimit", f"nofile={limits.open_files}:{limits.open_files}",
        "--ulimit", "core=0:0",
    ]
    if options.gpu is not None:
        command += ["--gpus", f"device={options.gpu}"]
    for key, value in sorted(env.items()):
        command += ["--env", f"{key}={value}"]
    command.append(options.image)
    if fd_socket is not None:
        command += [options.python, "-I", "-c", _FD_SHIM, str(fd_socket), ",".join(map(str, pass_fds))]
    return command + list(argv)


# Runs first in the container when the child needs inherited descriptors (standard library
# only): takes them from the parent over the bind-mounted socket, puts each at the number the
# child expects, then becomes the child.  argv: SOCKET FD[,FD...] PROGRAM [ARGS...]
_FD_SHIM = """
import fcntl, os, socket, sys
path, wanted, argv = sys.argv[1], [int(n) for n in sys.argv[2].split(",")], sys.argv[3:]
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
    conn.connect(path)
    _, fds, _, _ = socket.recv_fds(conn, 1, len(wanted))
if len(fds) != len(wanted):
    sys.exit("sandbox: file descriptor hand-over failed")
base = max(wanted + fds) + 1
moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, base) for fd in fds]
for fd in fds:
    os.close(fd)
for src, dst in zip(moved, wanted):
    os.dup2(src, dst)
    os.close(src)
os.execvp(argv[0], argv)
"""


class _FdHandover:
    """Descriptors cannot cross `docker run`, but the bind-mounted job folder can hold a Unix
    socket: the container's shim connects to it and receives them (SCM_RIGHTS), so the child
    holds the very same socket the parent passed, with nothing relaying in between."""

    def __init__(self, cwd: Path, owner: tuple[int, int] | None) -> None:
        self.path = cwd / FD_SOCKET_NAME
        self.path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(1)
        self._listener.settimeout(0.2)
        if owner is not None:
            os.chown(self.path, *owner)
        os.chmod(self.path, 0o600)

    def give(self, fds: tuple[int, ...], popen: subprocess.Popen) -> bool:
        """Hand `fds` to the first connection; False when the container never connected."""
        deadline = time.monotonic() + HANDOVER_TIMEOUT_S
        try:
            while time.monotonic() < deadline and popen.poll() is None:
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    socket.send_fds(conn, [b"k"], list(fds))
                return True
            return False
        finally:
            self.close()

    def close(self) -> None:
        self._listener.close()
        self.path.unlink(missing_ok=True)


class DockerProcess:
    """A sandboxed child in its own container (the "docker" backend), with the interface of
    SandboxedProcess. The limits are the kernel's, through the container: memory (cgroup, no
    swap; an OOM kill reads "memory"), tasks (pids cgroup: a fork bomb's forks fail), CPU time
    and file size (rlimits), CPU share (--cpus); no network, no capabilities, no new privileges,
    a read-only root with only the job folder and a tmpfs /tmp writable, nothing of the host
    visible but the job folder. The parent enforces the wall time (`docker kill`), counted from
    spawn, container start included. wait() removes the container."""

    def __init__(self, popen: subprocess.Popen, name: str, options: DockerOptions, limits: SandboxLimits,
                 out_fd: int, uid: int) -> None:
        self._popen = popen
        self.pid: int = popen.pid  # the docker client's
        self.name = name
        self.limits = limits
        self.network_isolated = True
        self.uid: int | None = uid
        self.started = time.monotonic()
        self._options = options
        self._lock = threading.Lock()
        self._violation: str | None = None
        self._violation_detail = ""
        self._result: SandboxExit | None = None
        self._output = _OutputTail(out_fd, f"sandbox-out-{name}")
        self._watchdog = threading.Thread(target=self._watch, name=f"sandbox-watch-{name}", daemon=True)
        self._watchdog.start()

    def _docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self._options.docker, *args], capture_output=True, text=True, timeout=60, check=False)

    def _watch(self) -> None:
        try:
            self._popen.wait(timeout=self.limits.wall_s)
        except subprocess.TimeoutExpired:
            self._trip("wall", f"killed after {self.limits.wall_s:.1f} s wall time")

    def _trip(self, kind: str, detail: str) -> None:
        with self._lock:
            if self._violation is None:
                self._violation, self._violation_detail = kind, detail
        self.kill()

    @property
    def alive(self) -> bool:
        return self._result is None and self._popen.poll() is None

    def poll_violation(self) -> str | None:
        """"wall" once the wall time tripped, "memory" once wait() saw an OOM kill, else None."""
        with self._lock:
            return self._violation

    def output_tail(self, limit: int = 8192) -> str:
        return self._output.tail(limit)

    def pause(self) -> None:
        """As SandboxedProcess.pause: the container's processes are frozen (cgroup freezer)."""
        self._docker("pause", self.name)

    def resume(self) -> None:
        self._docker("unpause", self.name)

    def cpu_seconds(self) -> float | None:
        """Not measured for a container (its processes are another PID namespace's)."""
        return None

    def pin(self, cpus: set[int]) -> None:
        self._docker("update", "--cpuset-cpus", ",".join(map(str, sorted(cpus))), self.name)

    def kill(self) -> None:
        """SIGKILL everything in the container; the docker client then exits."""
        if self._popen.poll() is not None:
            return
        self._docker("kill", self.name)
        try:
            self._popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # the container was not created yet: stop the client
            os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait()

    def wait(self, timeout: float | None = None) -> SandboxExit:
        """As SandboxedProcess.wait; raises SandboxError when docker could not run the
        container at all (an infrastructure fault, never the submission's)."""
        if self._result is not None:
            return self._result
        _wait_within_wall_time(self._popen, self.limits.wall_s, self.started, self._trip, timeout)
        state = self._docker("inspect", "--format", "{{.State.OOMKilled}} {{.State.ExitCode}} {{.State.StartedAt}}",
                             self.name)
        self._docker("rm", "--force", "--volumes", self.name)
        self._watchdog.join(timeout=5)
        self._output.join(timeout=5)
        fields = state.stdout.split()
        if state.returncode != 0 or len(fields) != 3 or fields[2].startswith("0001-"):
            raise SandboxError(f"docker could not run the sandbox container {self.name}: "
                               f"{(state.stderr.strip() or self.output_tail(2000)).strip()}")
        oom, code = fields[0] == "true", int(fields[1])
        with self._lock:
            if self._violation is None and oom:
                self._violation = "memory"
                self._violation_detail = f"killed by the kernel: memory over the cap of {self.limits.memory_bytes >> 20} MiB"
            violation, vdetail = self._violation, self._violation_detail
        # With --init, a child killed by signal N makes the container exit with 128 + N.
        rc = -(code - 128) if 128 < code <= 128 + 64 else code
        self._result = _classify(rc, self.limits, violation, vdetail, 0, False)
        return self._result
