"""Kernel-enforced memory and process caps for a namespaced job: a control group of its own.

Where the host lets the (root) worker make control groups, every job gets one, joined by its
launcher before anything of the job starts, so the job and all it starts are in it:
- memory: `memory.max` (cgroup v2) or `memory.limit_in_bytes` (v1) at the job's memory cap, with
  no swap; past it the kernel reclaims, then kills a process of the job (the OOM killer), and
  `memory.events` / `memory.oom_control` count the kill;
- processes: `pids.max` at the backstop of limits.nproc_limit (it counts threads, as
  RLIMIT_NPROC does); a fork past it fails, and `pids.events` counts the refusal.
The parent's /proc watchdog stays (wall time, the process count it reports), but no longer
guesses memory from summed resident sizes, which count a forked process's shared pages once
per fork. Where no control group can be made, the job runs without one and the watchdog's
reading stands (process.py); `SandboxExit.isolation` says which ("cgroup").

v2 is used when its root offers both controllers (the groups live under /kernelgrade there: the
root cgroup is the one that may hand controllers down while holding processes); else v1, nested
under this process's own memory and pids groups.
"""
from __future__ import annotations

import functools
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from worker.sandbox.limits import SandboxLimits, nproc_limit

GROUP = "kernelgrade"
REMOVE_WAIT_S = 2.0


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, _, options = right.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, set(options.split(","))))
    return found


def _own_v1_path(controller: str) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    return "/"


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@functools.cache
def _bases() -> tuple[int, dict[str, Path]] | None:
    """(version, controller -> folder under which job groups are made), or None."""
    if os.geteuid() != 0:
        return None
    mounts = _mounts()
    for point, fstype, _ in mounts:
        if fstype != "cgroup2":
            continue
        root = Path(point)
        try:
            if not {"memory", "pids"} <= set((root / "cgroup.controllers").read_text().split()):
                continue
            base = root / GROUP
            base.mkdir(exist_ok=True)
            _write(root / "cgroup.subtree_control", "+memory +pids")
            _write(base / "cgroup.subtree_control", "+memory +pids")
            return 2, {"memory": base, "pids": base}
        except OSError:
            continue
    v1: dict[str, Path] = {}
    for controller in ("memory", "pids"):
        for point, fstype, options in mounts:
            if fstype == "cgroup" and controller in options:
                base = Path(point + _own_v1_path(controller)) / GROUP
                try:
                    base.mkdir(exist_ok=True)
                except OSError:
                    continue
                v1[controller] = base
                break
    return (1, v1) if len(v1) == 2 else None


def available() -> bool:
    return _bases() is not None


@dataclass(frozen=True)
class JobGroup:
    """One job's control group(s): one folder under v2, one per controller under v1."""

    version: int
    folders: dict[str, Path]

    def procs_files(self) -> list[str]:
        """What the launcher writes its pid to, to join (each folder's cgroup.procs)."""
        return sorted({str(folder / "cgroup.procs") for folder in self.folders.values()})

    def _counter(self, controller: str, file: str, key: str) -> int:
        try:
            for line in (self.folders[controller] / file).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def out_of_memory(self) -> bool:
        """The kernel killed a process of the job at its memory cap."""
        if self.version == 2:
            return self._counter("memory", "memory.events", "oom_kill") > 0
        return self._counter("memory", "memory.oom_control", "oom_kill") > 0

    def processes_refused(self) -> bool:
        """A fork or thread of the job was refused at the process cap."""
        return self._counter("pids", "pids.events", "max") > 0

    def remove(self) -> None:
        """Remove the group once its processes are gone (they are: the job's PID namespace ended)."""
        deadline = time.monotonic() + REMOVE_WAIT_S
        for folder in set(self.folders.values()):
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # a zombie not reaped yet: left for the host; empty groups cost nothing
                    time.sleep(0.02)


def job_group(limits: SandboxLimits) -> JobGroup | None:
    """A fresh control group with the job's memory and process caps, or None where the host
    offers none (or making one failed: the watchdog's reading then stands)."""
    bases = _bases()
    if bases is None:
        return None
    version, base = bases
    name = f"job-{uuid.uuid4().hex[:16]}"
    folders = {controller: folder / name for controller, folder in base.items()}
    try:
        for folder in set(folders.values()):
            folder.mkdir()
        if version == 2:
            _write(folders["memory"] / "memory.max", str(limits.memory_bytes))
            swap, no_swap = folders["memory"] / "memory.swap.max", "0"
        else:
            _write(folders["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
            swap, no_swap = folders["memory"] / "memory.memsw.limit_in_bytes", str(limits.memory_bytes)
        if swap.exists():  # absent where the kernel keeps no swap accounting
            _write(swap, no_swap)
        _write(folders["pids"] / "pids.max", str(nproc_limit(limits.max_processes)))
    except OSError:
        JobGroup(version, folders).remove()
        return None
    return JobGroup(version, folders)
