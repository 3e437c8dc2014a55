"""The "process" backend: the child is a process of this host, started with fork+exec by
`subprocess.Popen` (never fork-without-exec; this package never touches CUDA), through the
launcher's namespaces (namespaces.py) or, where the policy allows it, with only the pre-exec
hook (preexec.py).

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
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from worker.affinity import pin_process
from worker.sandbox.cgroups import JobGroup, job_group
from worker.sandbox.child import WatchedChild, classify
from worker.sandbox.limits import (
    SandboxError,
    SandboxExit,
    SandboxLimits,
    SandboxPolicy,
    counted,
    nproc_limit,
    size_words,
)
from worker.sandbox.namespaces import NAMESPACED, Launched, launch_namespaced
from worker.sandbox.overlay import merge_back
from worker.sandbox.preexec import FILTER_FAILED, ChildSetup
from worker.sandbox.procfs import (
    ProcInfo,
    mapped_files,
    owner,
    process_table,
    proportional_memory,
    read_stat,
    threads_cpu_seconds,
)
from worker.sandbox.view import view_for

SCAN_INTERVAL_S = 0.2
SCRATCH_FULL_BYTES = 1 << 20  # a job's scratch space with less room than this left is full


def start_process(limits: SandboxLimits, policy: SandboxPolicy, ids: tuple[int, int] | None, namespaced: bool,
                  argv: list[str], cwd: Path, child_env: dict[str, str],
                  pass_fds: tuple[int, ...]) -> SandboxedProcess:
    """One attempt to start `argv` in the process backend (Popen's errors pass through)."""
    if namespaced:
        return _start_namespaced(limits, policy, ids, argv, cwd, child_env, pass_fds)
    report_r, report_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        setup = ChildSetup(limits, policy.isolate_network, ids, report_w)
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
        report = os.read(report_r, 1)
    finally:
        os.close(report_r)
    if report == FILTER_FAILED:
        popen.wait()
        os.close(out_r)
        raise SandboxError("could not install the syscall filter on the child")
    return SandboxedProcess(popen, limits, out_r, ("network", "syscalls") if report == b"1" else ("syscalls",), ids)


def _start_namespaced(limits: SandboxLimits, policy: SandboxPolicy, ids: tuple[int, int] | None, argv: list[str],
                      cwd: Path, child_env: dict[str, str], pass_fds: tuple[int, ...]) -> SandboxedProcess:
    uid, gid = ids or (None, None)
    user = (policy.user or "root", *ids) if ids else ("root", 0, 0)
    view = view_for(argv, child_env, cwd, user, gpu=policy.gpu_index is not None, extra=policy.read_only)
    group = job_group(limits)
    config = {"cwd": str(cwd), "uid": uid, "gid": gid, "network": policy.isolate_network,
              "disk_bytes": limits.disk_bytes, "shared": mapped_files(cwd), "view": view.config(),
              "cgroups": group.procs_files() if group else []}
    setup = ChildSetup(limits, False, ids, -1, namespaced=True)
    out_r, out_w = os.pipe()
    try:
        launched = launch_namespaced(argv, cwd, child_env, pass_fds, config, setup, out_w)
    except BaseException:
        os.close(out_r)
        if group is not None:
            group.remove()
        raise
    finally:
        os.close(out_w)
    isolation = (("network",) if policy.isolate_network else ()) + NAMESPACED + (("cgroup",) if group else ())
    return SandboxedProcess(launched.popen, limits, out_r, isolation, ids, (launched, cwd), group)


class SandboxedProcess(WatchedChild):
    def __init__(self, popen: subprocess.Popen[bytes], limits: SandboxLimits, out_fd: int, isolation: tuple[str, ...],
                 ids: tuple[int, int] | None, namespaced: tuple[Launched, Path] | None = None,
                 group: JobGroup | None = None) -> None:
        super().__init__(popen, limits, out_fd, str(popen.pid))
        # What was applied: "network" (own network namespace), "pid" (own PID namespace: the
        # job's processes die with it), "mount" (the default-deny view of view.py, fresh /tmp
        # & co.), "disk" (writes capped at limits.disk_bytes), "cgroup" (memory and process caps
        # enforced by the kernel: cgroups.py).
        self.isolation = isolation
        self.network_isolated = "network" in isolation
        self._ids = ids
        self._namespaced = namespaced  # (what the launcher started, the real job folder)
        self._refused: tuple[str, ...] = ()  # what the syscall filter refused (namespaced)
        self._dropped = ""  # what the job wrote that was not carried back (links, devices, ...), in words
        self._group = group
        self._scratch_full = False
        self.uid: int | None = ids[0] if ids else None
        self._known: dict[int, int] = {}  # pid -> start time of every process seen in the sandbox
        self._max_cpu_s = 0.0  # RLIMIT_CPU is per process: the most any member has used
        self._merge_error: SandboxError | None = None
        # The child cannot have been reaped yet, so its pid is still ours to read.
        info = read_stat(self.pid)
        self._leader_start = info.start if info else -1
        self._stop = threading.Event()
        self._start_watchdog()

    # ---- process tracking ---------------------------------------------------------------
    def _members(self, zombies: bool = False) -> dict[int, ProcInfo]:
        """Live (non-zombie unless `zombies`) processes of this sandbox, found by session/group, by parent
        chain from known members, or remembered from an earlier scan."""
        table = process_table()
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
                       or owner(pid) == self.uid}
        with self._lock:
            for pid in members:
                self._known[pid] = table[pid].start
        return {pid: table[pid] for pid in members if zombies or table[pid].state not in ("Z", "X")}

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by every thread of the sandbox's known processes (see
        procfs.threads_cpu_seconds); None where the kernel keeps none."""
        with self._lock:
            pids = list(self._known) or [self.pid]
        return threads_cpu_seconds(pids)

    def kill(self) -> None:
        """Kill every process of the sandbox (group, session and traced descendants): SIGKILL
        the group and every tracked process until none is left alive."""
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
            if len(members) > lim.max_processes:
                self._trip("processes", f"too many processes: {len(members)}, over the cap of {lim.max_processes}")
                break
            # With a control group the kernel holds the memory cap. Without, the summed resident
            # sizes count a fork's shared pages once per fork: confirmed by proportional sizes.
            if (self._group is None and sum(info.rss for info in members.values()) > lim.memory_bytes
                    and proportional_memory(list(members)) > lim.memory_bytes):
                self._trip("memory", f"memory over the cap of {size_words(lim.memory_bytes)}")
                break
            self._stop.wait(SCAN_INTERVAL_S)
        self._collect_scratch()

    def _collect_scratch(self) -> None:
        """Once the job has ended (and with it its PID namespace), read what its syscall filter
        refused, carry what it wrote into the real job folder and let its capped tmpfs go. Here,
        in the watchdog thread, so that it happens even when the caller kills the child and
        never waits."""
        if self._namespaced is None:
            return
        self._popen.wait()
        launched, cwd = self._namespaced
        self._refused = launched.refused_calls()
        upper = launched.scratch
        room = os.fstatvfs(upper)
        self._scratch_full = room.f_bavail * room.f_frsize < SCRATCH_FULL_BYTES or room.f_favail == 0
        try:
            dropped = merge_back(upper, cwd, self._ids)
            self._dropped = ", ".join(counted(kind, n) for kind, n in sorted(dropped.items()))
        except OSError as exc:
            self._merge_error = SandboxError(f"could not carry the job's files back into {cwd}: {exc}")

    def _note_group_limits(self) -> None:
        """What the kernel did at the control group's caps (a job that ended badly)."""
        assert self._group is not None
        if self._group.out_of_memory():
            self._note("memory", f"memory over the cap of {size_words(self.limits.memory_bytes)} "
                                 "(the kernel stopped it)")
        elif self._group.processes_refused():
            self._note("processes", f"too many processes: the cap of {nproc_limit(self.limits.max_processes)} "
                                    "processes and threads refused a new one")

    # ---- public -------------------------------------------------------------------------
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
        self._wait_for_exit(timeout)
        returncode = self._popen.returncode
        self._stop.set()
        leftovers = len(self._members())
        self.kill()
        # Orphans are reaped by init; until then their zombies still count against the
        # sandbox uid's RLIMIT_NPROC, so give them a moment before the next spawn.
        settle_until = time.monotonic() + 3
        while self._members(zombies=True) and time.monotonic() < settle_until:
            time.sleep(0.02)
        self._watchdog.join()  # it ends right after the child, merging back what it wrote (bounded by the cap)
        self._output.join(timeout=5)
        if self._merge_error is not None:
            raise self._merge_error
        if self._group is not None:
            if returncode != 0:
                self._note_group_limits()
            self._group.remove()
        if returncode != 0 and self._scratch_full:
            self._note("disk", f"scratch space full: the job wrote its cap of {size_words(self.limits.disk_bytes)} "
                               "(its folder, /tmp and the like together)")
        violation, vdetail = self._tripped()
        cpu_spent = self._max_cpu_s >= self.limits.cpu_s - 0.5
        ended = classify(returncode, self.limits, violation, vdetail, leftovers, cpu_spent)
        refused = f"; the sandbox refused {', '.join(self._refused)}" if self._refused else ""
        dropped = f"; not carried back from its folder: {self._dropped}" if self._dropped else ""
        self._result = replace(ended, detail=ended.detail + refused + dropped, isolation=self.isolation,
                               refused=self._refused)
        return self._result
