"""A sandboxed child as callers see it, whichever backend runs it: the `SandboxChild` protocol,
and what both backends share (`WatchedChild`: the output tail, the first limit tripped, the
wait bounded by the wall time, how an exit status reads)."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Protocol

from worker.sandbox.limits import SandboxExit, SandboxLimits

TAIL_KEEP_BYTES = 64 * 1024


class SandboxChild(Protocol):
    """One sandboxed child: SandboxedProcess (process backend) or DockerProcess (docker)."""
    pid: int                  # the child's own (process backend), the docker client's (docker)
    limits: SandboxLimits
    network_isolated: bool
    uid: int | None           # the uid its processes run as (None: the parent's, not dropped)
    started: float            # time.monotonic() at spawn: the wall time counts from here

    @property
    def alive(self) -> bool: ...

    def poll_violation(self) -> str | None: ...

    def output_tail(self, limit: int = 8192) -> str: ...

    def cpu_seconds(self) -> float | None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def pin(self, cpus: set[int]) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> SandboxExit: ...


class OutputTail:
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


def wait_within_wall_time(popen: subprocess.Popen[bytes], wall_s: float, started: float,
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


def classify(rc: int, limits: SandboxLimits, violation: str | None, vdetail: str, leftovers: int,
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


class WatchedChild(ABC):
    """What both backends' children share: the Popen they watch, the tail of its output, the
    first limit that tripped (then everything is killed), the result once waited for. A
    subclass sets its own fields, then calls `_start_watchdog` (its `_watch` runs in a thread)."""

    def __init__(self, popen: subprocess.Popen[bytes], limits: SandboxLimits, out_fd: int, name: str) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.limits = limits
        self.started = time.monotonic()
        self._name = name
        self._lock = threading.Lock()
        self._violation: str | None = None
        self._violation_detail = ""
        self._result: SandboxExit | None = None
        self._output = OutputTail(out_fd, f"sandbox-out-{name}")

    def _start_watchdog(self) -> None:
        self._watchdog = threading.Thread(target=self._watch, name=f"sandbox-watch-{self._name}", daemon=True)
        self._watchdog.start()

    @abstractmethod
    def _watch(self) -> None: ...

    @abstractmethod
    def kill(self) -> None: ...

    @property
    def alive(self) -> bool:
        return self._result is None and self._popen.poll() is None

    def poll_violation(self) -> str | None:
        """The limit the child went over, once it has been stopped for it, else None: "wall",
        "memory" (the watchdog's cap; under docker, once wait() saw the kernel's OOM kill) or
        "processes"."""
        with self._lock:
            return self._violation

    def output_tail(self, limit: int = 8192) -> str:
        """The last `limit` bytes (at most TAIL_KEEP_BYTES) of stdout+stderr, decoded leniently."""
        return self._output.tail(limit)

    def _note(self, kind: str, detail: str) -> None:
        """Record that the child went over `kind`, unless a limit tripped before."""
        with self._lock:
            if self._violation is None:
                self._violation, self._violation_detail = kind, detail

    def _tripped(self) -> tuple[str | None, str]:
        """The limit that stands (None: none) and its detail."""
        with self._lock:
            return self._violation, self._violation_detail

    def _trip(self, kind: str, detail: str) -> None:
        self._note(kind, detail)
        self.kill()

    def _wait_for_exit(self, timeout: float | None) -> None:
        """Wait for the Popen, within the wall time (see wait_within_wall_time)."""
        wait_within_wall_time(self._popen, self.limits.wall_s, self.started, self._trip, timeout)
