"""The process backend's namespaces, parent side: start a job through the launcher
(launcher.py, whose docstring has the details), and probe once per process whether this host
can give jobs namespaces at all.

The launcher, started by Popen after the pre-exec hook (preexec.py), gives the job its own PID
namespace (its init reaps, and its end kills every process the job started, daemons included),
mount namespace (a fresh root holding only view.py's allow-list, read-only; fresh empty /tmp,
/var/tmp, /dev/shm, /run; a fresh /proc) and network namespace, then drops to the
sandbox user with no_new_privs and execs the program. All the job writes lands in one tmpfs of
`limits.disk_bytes` (an overlay on the job folder); when the job ends, the watchdog thread
merges what it wrote into the real job folder (overlay.py), so callers find it there as
before, but only then: during the job the parent sees its writes only in files it has mapped
(bound through, e.g. the GPU stage's arena). What was applied is `SandboxedProcess.isolation`
and `SandboxExit.isolation`.
"""
from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.sandbox.limits import SandboxError, counted
from worker.sandbox.syscall_filter import ARCHES, family_of, filter_program
from worker.sandbox.view import view_for

LAUNCHER = Path(__file__).with_name("launcher.py")
# Isolation a namespaced job gets, with "network" unless disabled (SandboxedProcess.isolation)
NAMESPACED = ("pid", "mount", "ipc", "uts", "cgroupns", "disk", "syscalls")


@dataclass
class Launched:
    """A job the launcher started: its leader, the fd of its capped scratch folder (the
    overlay's upper layer), and the socket its init sends its last word on (`refused_calls`)."""

    popen: subprocess.Popen[bytes]
    scratch: int
    control: socket.socket

    def refused_calls(self) -> tuple[str, ...]:
        """Once the job has ended: what its syscall filter refused, by family, e.g.
        ("tracing: ptrace x2",), from init's last message (empty when it sent none)."""
        with self.control:
            self.control.settimeout(5)
            try:
                message = self.control.recv(65536)
            except OSError:
                return ()
        counts = json.loads(message).get("refused", {}) if message else {}
        calls = {number: name for name, number in ARCHES[platform.machine()].numbers.items()}
        return tuple(counted(f"{family_of(int(n))}: {calls.get(int(n), f'syscall {n}')}", c)
                     for n, c in sorted(counts.items(), key=lambda item: int(item[0])))


def launch_namespaced(argv: list[str], cwd: Path, env: dict[str, str], pass_fds: tuple[int, ...],
                      config: Mapping[str, object], setup: Callable[[], None] | None,
                      out_w: int | None) -> Launched:
    """Start `argv` through the launcher. Raises SandboxError when the namespaces or the syscall
    filter could not be set up, and OSError (as Popen) when `argv` could not be executed."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER), str(theirs.fileno())],
            cwd=cwd, env={}, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, close_fds=True,
            pass_fds=(*pass_fds, theirs.fileno()), start_new_session=True, preexec_fn=setup,
            restore_signals=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    try:
        ours.sendall(json.dumps({**config, "argv": argv, "env": env,
                                 "syscall_filter": filter_program(notify=True).hex()}).encode())
        return Launched(popen, _launch_report(ours, argv[0]), ours)
    except BaseException:
        ours.close()
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


@functools.cache
def namespaces_unavailable() -> str | None:
    """Why this host cannot give a sandboxed job its own PID, mount and network namespaces, or
    None when it can. Probed once per process by launching a job that does nothing."""
    if os.geteuid() != 0:
        return "the grading parent is not root"
    folder = Path(tempfile.mkdtemp(prefix="kg-sandbox-probe-"))
    argv = [sys.executable, "-I", "-S", "-c", ""]
    config: dict[str, object] = {"cwd": str(folder), "uid": None, "gid": None, "network": True,
                                 "disk_bytes": 1 << 20, "shared": [], "cgroups": [],
                                 "view": view_for(argv, {}, folder, ("root", 0, 0), gpu=False).config()}
    try:
        launched = launch_namespaced(argv, folder, {}, (), config, None, subprocess.DEVNULL)
        os.close(launched.scratch)
        launched.control.close()
        return None if launched.popen.wait(timeout=30) == 0 else "the probe job failed"
    except (OSError, SandboxError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
