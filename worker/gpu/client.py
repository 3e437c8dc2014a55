"""Parent side of a sandboxed child: spawn it, call it with deadlines, time its answers.

The clock is the parent's (time.perf_counter_ns around a request and its answer), so a
submission cannot patch the timer, and results are read from the arena by the parent.
"""
from __future__ import annotations

import importlib.util
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from worker.gpu.budget import Deadline
from worker.gpu.channel import Arena, Channel, ChannelClosed
from worker.sandbox import Sandbox, SandboxChild, SandboxExit

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ARENA_NAME = ".kg-arena"
# Variables the child may see: nothing else of the parent's environment is passed on.
_PASSED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG")
# Host memory that behaves the same in every child, so a timing does not depend on which
# process ran it. By default glibc serves large blocks with fresh mmaps (page faults on every
# array) until a free raises its threshold, and numpy asks for transparent huge pages for
# arrays of 4 MiB and more, which the kernel grants or not depending on its free memory: the
# same MiniTorch composition ran 1.7x slower in one child than in another (docs/benchmarks/stability.md). A
# fixed threshold of 32 MiB (glibc's maximum) and no trimming keep freed blocks in the heap
# for reuse; no huge page advice.
STEADY_MEMORY_ENV = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296",
    "NUMPY_MADVISE_HUGEPAGE": "0",
}


EXIT_WAIT_S = 10.0  # how long a child whose channel closed may take to exit before it is killed


class ChildFailure(Exception):
    """The child timed out or died; `kind` is "timeout" or "crashed" (then `ended` says how it
    ended), or "budget" (OutOfBudget). `request`: the message it got no answer to, so a caller
    can tell what the child was running (rubrics.hw4.hangs names a launcher that never returned)."""

    def __init__(self, kind: str, detail: str, tail: str, ended: SandboxExit | None = None,
                 request: dict[str, Any] | None = None) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail, self.tail, self.ended = kind, detail, tail, ended
        self.request = request or {}


class OutOfBudget(ChildFailure):
    """The run's GPU time budget (worker.gpu.budget) was spent before the child answered: the
    request was never sent, or the child was stopped while it waited. Not a failure of the
    submission's code: what it cut short is settled as not run, with the budget's words."""

    def __init__(self, deadline: Deadline, tail: str = "") -> None:
        super().__init__("budget", deadline.words(), tail)


class StageInfraError(RuntimeError):
    """Our side of a sandboxed child did not come up (no GPU in the sandbox, a broken
    interpreter): an infrastructure fault, which the run's lifecycle retries, never the
    submission's grade. Every stage asks `ready` of its children before the submission's code
    runs there (worker.gpu.child)."""


@dataclass
class StudentError(Exception):
    """The submission's code raised while serving a request (the child lives on)."""

    error: str
    trace: str

    def __str__(self) -> str:
        return self.error


# CPU thread pools of one thread: a timed child is pinned to one core, where a pool of one
# thread per core only adds threads that spin beside the timing, and nine children of one
# grade (checks and kernel profiles at once) would otherwise start ~20 threads each against
# the sandbox user's RLIMIT_NPROC. A submission may still size its own pools.
ONE_THREAD_POOLS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def child_env(gpu_index: int | None, home: Path, steady_memory: bool = True) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env.update(ONE_THREAD_POOLS)
    if steady_memory:
        env.update(STEADY_MEMORY_ENV)
    python_path = [str(PROJECT_ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env.update(
        PYTHONPATH=os.pathsep.join(python_path),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        HOME=str(home),
        MPLCONFIGDIR=str(home),
    )
    if gpu_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu_index)
    return env


def cpu_used(before: float | None, after: float | None) -> float | None:
    """CPU seconds used between two readings of a child's CPU time, or None when that cannot
    be told: the backend keeps none, or the reading did not grow. The reading sums the threads
    alive at that moment, so one that ends during a call takes its time out of the sum; a CPU
    time of 0 would then count the whole call as waiting (worker.timing.waiting_removed) and
    give a zero time (seen on a loaded CI machine)."""
    if before is None or after is None or after <= before:
        return None
    return after - before


def widened(sandbox: Sandbox, paths: Sequence[str]) -> Sandbox:
    """The same limits and policy, the view widened by `paths`, read-only (the namespaced process
    backend binds nothing else: worker.sandbox.view)."""
    if not paths:
        return sandbox
    shown = tuple(dict.fromkeys((*sandbox.policy.read_only, *paths)))
    return Sandbox(sandbox.limits, replace(sandbox.policy, read_only=shown))


def wrapped(sandbox: Sandbox, wrapper: Sequence[str]) -> Sandbox:
    """The sandbox a child runs in under `wrapper` (a program that runs the child, such as
    CUDA's compute-sanitizer): widened by the folder of the wrapper's real executable and the
    one above it."""
    real = Path(os.path.realpath(wrapper[0]))
    return widened(sandbox, (str(real.parent), str(real.parent.parent)))


def operation_files(handlers: Sequence[str]) -> tuple[str, ...]:
    """The Python files of the packages that hold the child's operations outside the engine (an
    assignment's plug-in package, rubrics/<slug>/), to be bound read-only one by one: the child
    imports them, while the folder's other files (the rubric's hidden cases, the mutants) stay
    out of its view. A handler given as a .py file is copied into the child's tree instead."""
    engine = PROJECT_ROOT / "worker"
    files: list[str] = []
    for module in handlers:
        spec = None if module.endswith(".py") else importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        folder = Path(spec.origin).resolve().parent
        if not folder.is_relative_to(engine):
            files += [str(f) for f in sorted(folder.glob("*.py"))]
    return tuple(dict.fromkeys(files))


def with_operations(sandbox: Sandbox, handlers: Sequence[str]) -> Sandbox:
    """The sandbox a child runs in, widened by its operations' files (operation_files)."""
    return widened(sandbox, operation_files(handlers))


class ChildClient:
    def __init__(
        self,
        sandbox: Sandbox,
        cwd: Path,
        handlers: tuple[str, ...],
        arena_bytes: int,
        gpu_index: int | None = None,
        steady_memory: bool = True,
        deadline: Deadline | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        """`wrapper`: an argv prefix the child runs under (its program reads the child's argv
        after its own, and passes the channel's descriptor on), in a sandbox that can read it."""
        self.deadline = deadline  # every call waits at most what is left of it
        # Called with a request that got no answer in time, before the child is killed (which
        # takes seconds): a caller settles at once what that hang decides (rubrics.hw4.hangs).
        self.on_timeout: Callable[[dict[str, Any]], None] | None = None
        self.cwd = cwd
        self.arena = Arena(cwd / ARENA_NAME, arena_bytes, create=True)
        parent_sock, child_sock = socket.socketpair()
        # -P: the submission's folder (the cwd) is not on sys.path while the child imports its
        # own modules; the child adds it once it serves (worker.gpu.child), so an answer to
        # `ready` proves that none of the submission's code has run.
        argv = [sys.executable, "-P", "-m", "worker.gpu.child", "--fd", str(child_sock.fileno()),
                "--arena", str(cwd / ARENA_NAME), "--arena-size", str(arena_bytes)]
        for module in handlers:
            argv += ["--handlers", module]
        sandbox = with_operations(sandbox, handlers)
        if wrapper:
            sandbox, argv = wrapped(sandbox, wrapper), [*wrapper, *argv]
        self.process: SandboxChild = sandbox.spawn(
            argv, cwd=cwd, env=child_env(gpu_index, cwd, steady_memory), pass_fds=(child_sock.fileno(),)
        )
        child_sock.close()
        self.channel = Channel(parent_sock)

    def call(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        reply, _ = self.timed_call(message, timeout)
        return reply

    def timed_call(self, message: dict[str, Any], timeout: float) -> tuple[dict[str, Any], float]:
        """Send, wait for the answer; returns (reply, seconds on the parent's clock)."""
        reply, seconds, _ = self.measured_call(message, timeout)
        return reply, seconds

    def measured_call(self, message: dict[str, Any], timeout: float) -> tuple[dict[str, Any], float, float | None]:
        """As timed_call, plus the CPU seconds the child's processes used meanwhile (None
        where it cannot be told: cpu_used): a child that waits without computing (a sleep)
        shows far less CPU than wall time. Waits at most what is left of the run's budget:
        OutOfBudget when it is spent."""
        left = math.inf if self.deadline is None else self.deadline.left()
        if self.deadline is not None and left <= 0:
            raise OutOfBudget(self.deadline)
        wait = min(timeout, left)
        try:
            cpu_before = self.process.cpu_seconds()
            started = time.perf_counter_ns()
            self.channel.send(message)
            reply = self.channel.recv(wait)
            elapsed = (time.perf_counter_ns() - started) / 1e9
            cpu_after = self.process.cpu_seconds()
        except TimeoutError:
            cut_by_budget = self.deadline is not None and wait < timeout
            if self.on_timeout is not None and not cut_by_budget:
                self.on_timeout(message)
            self.process.kill()
            try:
                self.process.wait(timeout=5)  # let the output thread drain the last lines
            except Exception:
                pass
            if cut_by_budget and self.deadline is not None:
                raise OutOfBudget(self.deadline, self.process.output_tail()) from None
            raise ChildFailure("timeout", f"no answer to {message.get('op')!r} within {timeout:.0f} s",
                               self.process.output_tail(), request=message) from None
        except (ChannelClosed, OSError):
            exit_ = self._reaped(EXIT_WAIT_S)
            said = "its end could not be read" if exit_ is None else f"{exit_.reason}: {exit_.detail}"
            raise ChildFailure("crashed", said, self.process.output_tail(), exit_, message) from None
        if not reply.get("ok"):
            raise StudentError(str(reply.get("error")), str(reply.get("trace", "")))
        return reply, elapsed, cpu_used(cpu_before, cpu_after)

    def pause(self) -> None:
        """Freeze the child (all its processes) while another child is timed."""
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()

    def pin(self, cpus: set[int]) -> None:
        """Keep the child (all its threads) on these cores, for stable timings."""
        self.process.pin(cpus)

    def close(self, wait_s: float = EXIT_WAIT_S) -> SandboxExit | None:
        """End the child: its channel closed, `wait_s` for it to exit by itself, then killed.
        How it ended (with what its sandbox refused), or None where that could not be read."""
        try:
            self.channel.close()
            return self._reaped(wait_s)
        finally:
            self.arena.close()

    def _reaped(self, wait_s: float) -> SandboxExit | None:
        """The child's end: `wait_s` for it to exit by itself, then killed and `wait_s` more.
        A child slow to exit (a CUDA context torn down on a host busy with other runs: over
        10 s with 8 runs checking on one H100, 2026-12-07) is killed, never a failed grade."""
        for attempt in range(2):
            try:
                return self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                if attempt == 0:
                    self.process.kill()
        return None

    def __enter__(self) -> ChildClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
