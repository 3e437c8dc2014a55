"""The process backend's pre-exec hook: what a child does to itself between fork and exec.

Namespaced (the default), only the rlimits below and PR_SET_PDEATHSIG: the launcher must stay
root to build the namespaces, and drops the job's privileges itself (worker/sandbox/launcher.py).

Without namespaces (allowed only by `SandboxPolicy.require_namespaces=False`), the child:
- gets rlimits: RLIMIT_CPU (soft cpu_s -> SIGXCPU, hard +1 s -> SIGKILL), RLIMIT_FSIZE,
  RLIMIT_NOFILE, RLIMIT_CORE=0, and RLIMIT_NPROC (only when dropping to the sandbox uid: the
  kernel counts it per uid and ignores it for root);
- leaves the network: unshare(CLONE_NEWNET) when permitted (root). A fresh network namespace
  has only a loopback that is down, so every connect fails. Whether it happened is reported
  back through a pipe and kept as `SandboxedProcess.network_isolated`; without permission
  (a non-root dev machine) the child runs with the host network and that flag is False;
- sets PR_SET_NO_NEW_PRIVS (setuid binaries cannot give root back), then setgroups([]),
  setgid, setuid to the sandbox user (`SandboxPolicy.user`, default "nobody") when running as
  root;
- installs the syscall filter (syscall_filter.py), after leaving the network (unshare is one
  of the refused calls), with a plain EPERM answer: there is no init here to count refusals.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal

from worker.sandbox.limits import SandboxLimits, nproc_limit
from worker.sandbox.syscall_filter import filter_program

CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
FILTER_FAILED = b"F"  # what the hook reports instead of the network byte when the filter failed


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _libc() -> ctypes.CDLL:
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
    return int(_LIBC.unshare(CLONE_NEWNET)) == 0


class ChildSetup:
    """Runs in the child between fork and exec: no imports, no allocation-heavy work. With
    `namespaced`, only the rlimits and PR_SET_PDEATHSIG (see the module's docstring)."""

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
            nproc = nproc_limit(limits.max_processes)
            self.rlimits.append((resource.RLIMIT_NPROC, (nproc, nproc)))
        self.isolate_network = isolate_network
        self.ids = ids
        self.report_fd = report_fd
        self.namespaced = namespaced
        self.prctl = _LIBC.prctl
        self.parent = os.getpid()
        program = filter_program(notify=False)
        self.syscall_filter = _SockFprog(len(program) // 8, program)

    def __call__(self) -> None:
        for which, value in self.rlimits:
            resource.setrlimit(which, value)
        self.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if not self.namespaced:  # namespaced, the launcher stays root and applies the rest itself
            isolated = self.isolate_network and _unshare_net()
            if self.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self.syscall_filter), 0, 0) != 0:
                os.write(self.report_fd, FILTER_FAILED)
                os._exit(1)
            os.write(self.report_fd, b"1" if isolated else b"0")
            if self.ids is not None:
                uid, gid = self.ids
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
        # Dies with the worker (SIGKILL reaches it even while paused); set after the uid drop,
        # which clears it. A worker already gone by now: end here.
        self.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self.parent:
            os._exit(1)
