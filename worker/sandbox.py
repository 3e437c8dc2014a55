"""The "process" sandbox backend: how kernelgrade runs submitted code (standard library only).

Every piece of submitted code runs in ONE fresh child per problem, started with fork+exec by
`subprocess.Popen` (never fork-without-exec; this module never touches CUDA). Between fork and
exec the child (in `_ChildSetup`, a pre-exec hook kept free of imports and locks):

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

Limits of this backend (the "docker" and "namespace" backends come later, see
ARCHITECTURE.md "Sandbox backends"): the memory and process caps are polled, so a fast
allocator can overshoot the cap for up to one scan interval, and RSS of forked processes
double-counts shared pages (conservative); GPU memory is not counted; a process that calls
setsid() and double-forks within one scan interval can escape tracking (RLIMIT_NPROC still
bounds it as root); reads are restricted only by ordinary file permissions, not a mount
namespace.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import pwd
import resource
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SandboxLimits", "SandboxPolicy", "SandboxExit", "Sandbox", "SandboxedProcess", "SandboxError", "usable_by"]

CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
SCAN_INTERVAL_S = 0.2
TAIL_KEEP_BYTES = 64 * 1024
SPAWN_RETRY_S = 5.0
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


@dataclass(frozen=True)
class SandboxPolicy:
    user: str | None = "nobody"   # drop to this uid/gid when running as root (None = stay)
    isolate_network: bool = True  # unshare(CLONE_NEWNET) when permitted; recorded on the process
    gpu_index: int | None = None  # sets CUDA_VISIBLE_DEVICES


@dataclass(frozen=True)
class SandboxExit:
    returncode: int | None
    reason: str   # "exited" | "signal" | "timeout" | "memory" | "processes" | "cpu" | "file_size"
    detail: str


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
    """Runs in the child between fork and exec: no imports, no allocation-heavy work."""

    def __init__(self, limits: SandboxLimits, isolate_network: bool, ids: tuple[int, int] | None, report_fd: int):
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
        self.prctl = _LIBC.prctl

    def __call__(self) -> None:
        for which, value in self.rlimits:
            resource.setrlimit(which, value)
        isolated = self.isolate_network and _unshare_net()
        os.write(self.report_fd, b"1" if isolated else b"0")
        self.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if self.ids is not None:
            uid, gid = self.ids
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)


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

    def _spawn_once(self, argv: list[str], cwd: Path, child_env: dict[str, str], pass_fds: tuple[int, ...]) -> SandboxedProcess:
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
        return SandboxedProcess(popen, self.limits, out_r, isolated, self.ids)


class SandboxedProcess:
    def __init__(self, popen: subprocess.Popen, limits: SandboxLimits, out_fd: int, network_isolated: bool,
                 ids: tuple[int, int] | None) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.limits = limits
        self.network_isolated = network_isolated
        self.uid: int | None = ids[0] if ids else None
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._violation: str | None = None
        self._violation_detail = ""
        self._known: dict[int, int] = {}  # pid -> start time of every process seen in the sandbox
        self._leader_cpu_s = 0.0
        # The child cannot have been reaped yet, so its pid is still ours to read.
        info = _read_stat(self.pid)
        self._leader_start = info.start if info else -1
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self._tail_lock = threading.Lock()
        self._result: SandboxExit | None = None
        self._stop = threading.Event()
        self._drainer = threading.Thread(target=self._drain, args=(out_fd,), name=f"sandbox-out-{self.pid}", daemon=True)
        self._drainer.start()
        self._watchdog = threading.Thread(target=self._watch, name=f"sandbox-watch-{self.pid}", daemon=True)
        self._watchdog.start()

    # ---- output -------------------------------------------------------------------------
    def _drain(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                with self._tail_lock:
                    self._tail.append(chunk)
                    self._tail_len += len(chunk)
                    while self._tail_len - len(self._tail[0]) >= TAIL_KEEP_BYTES:
                        self._tail_len -= len(self._tail.popleft())
        finally:
            os.close(fd)

    def output_tail(self, limit: int = 8192) -> str:
        """The last `limit` bytes (at most TAIL_KEEP_BYTES) of stdout+stderr, decoded leniently."""
        limit = min(limit, TAIL_KEEP_BYTES)
        with self._tail_lock:
            data = b"".join(self._tail)
        return data[-limit:].decode("utf-8", errors="replace") if limit > 0 else ""

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
            if self.pid in members:
                self._leader_cpu_s = members[self.pid].cpu_s
            rss = sum(info.rss for info in members.values())
            if len(members) > lim.max_processes:
                self._trip("processes", f"{len(members)} processes, over the cap of {lim.max_processes}")
                break
            if rss > lim.memory_bytes:
                self._trip("memory", f"resident memory {rss >> 20} MiB, over the cap of {lim.memory_bytes >> 20} MiB")
                break
            self._stop.wait(SCAN_INTERVAL_S)

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

    def wait(self, timeout: float | None = None) -> SandboxExit:
        """Wait for the child; never longer than its wall_s from spawn (then the group is
        killed and the reason is "timeout"). With `timeout` shorter than what is left of the
        wall time, raises subprocess.TimeoutExpired like Popen.wait when it runs out first."""
        if self._result is not None:
            return self._result
        remaining = self.limits.wall_s - (time.monotonic() - self.started)
        if timeout is not None and timeout < remaining:
            self._popen.wait(timeout=max(timeout, 0))
        else:
            try:
                self._popen.wait(timeout=max(remaining, 0) + 0.5)
            except subprocess.TimeoutExpired:
                self._trip("wall", f"killed after {self.limits.wall_s:.1f} s wall time")
                self._popen.wait()
        returncode = self._popen.returncode
        self._stop.set()
        leftovers = len(self._members())
        self._kill_all()
        # Orphans are reaped by init; until then their zombies still count against the
        # sandbox uid's RLIMIT_NPROC, so give them a moment before the next spawn.
        settle_until = time.monotonic() + 3
        while self._members(zombies=True) and time.monotonic() < settle_until:
            time.sleep(0.02)
        self._watchdog.join(timeout=5)
        self._drainer.join(timeout=5)
        self._result = self._classify(returncode, leftovers)
        return self._result

    def _classify(self, rc: int, leftovers: int) -> SandboxExit:
        with self._lock:
            violation, vdetail = self._violation, self._violation_detail
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
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and self._leader_cpu_s >= self.limits.cpu_s - 0.5):
            return SandboxExit(rc, "cpu", f"{name}: CPU time limit of {self.limits.cpu_s} s{extra}")
        if sig == signal.SIGXFSZ:
            return SandboxExit(rc, "file_size", f"{name}: file size limit of {self.limits.file_size_bytes} bytes{extra}")
        return SandboxExit(rc, "signal", f"{name}{extra}")
