"""One grading worker per GPU of a host (`grader worker --gpus all|0,1,...`).

Each GPU gets its own worker process group: its own `grader worker` (Celery) pinned to that GPU,
with its own timing cores, scratch folder and GPU lock (`gpu-<index>` in the data dir's lock
folder, worker.gpu.gpu_lock), and its own Celery node name. The build cache stays shared: it is
written by temp file and rename (worker.build._store_atomically), so workers of one host, or of
several hosts on shared storage, never read half a library.

Pinning: `KG_GPU_INDEX` is the host's index, as nvidia-smi and NVML count (NVML ignores
CUDA_VISIBLE_DEVICES): the worker's GPU checks, its GPU lock, its timing cores and the sandbox's
child (whose CUDA_VISIBLE_DEVICES is set from it, worker.sandbox.spawn) use it. The worker's own
environment also gets `CUDA_VISIBLE_DEVICES=<uuid>`, so anything in the worker that starts CUDA
sees only its GPU, whatever CUDA's device order.

The supervisor restarts a worker that exits, at most `max_restarts` times in a row (a worker that
was up for `stable_s` starts the count afresh); then that GPU is left out (a log line says so)
and the others keep grading. Each start, restart and leaving out is told to the supervisor's
`on_event` (a WorkerEvent): `grader worker --gpus` records it in the database (grader.gpu_events)
for the site administrators' /ops/workers page; the supervisor itself knows no database. A run its worker held when it died is sent
again by the reconciler once its heartbeat is stale (grader.runs.reconcile), to whichever worker
is free. SIGTERM or SIGINT to the supervisor is passed to each worker's main process, the way
docker stops a container: Celery's warm shutdown, which finishes the run under way; the
supervisor exits when every worker has.

The device list comes from nvidia-smi; `KG_FAKE_GPUS` (nvidia-smi's lines, `;` between them)
stands in for it where there is no GPU (tests, a dry run).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal

from grader.datadir import private_dir
from grader.runs.reconcile_log import log_lines
from worker.affinity import choose_timing_cpus

log = logging.getLogger(__name__)

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
FAKE_GPUS_VARIABLE = "KG_FAKE_GPUS"
DEFAULT_MAX_RESTARTS = 3
STABLE_S = 600.0  # a worker up this long before it exits has its restarts counted afresh


def log_supervisor() -> None:
    """The supervisor's lines (info and above) on stderr, with their time, beside the workers'."""
    log_lines((__name__,))


class GpuListError(ValueError):
    """The device list could not be read, or `--gpus` names a GPU the host lacks."""


@dataclass(frozen=True)
class Gpu:
    index: int  # the host's index (nvidia-smi's, NVML's)
    uuid: str


def parse_gpu_list(text: str) -> list[Gpu]:
    """nvidia-smi's `index, uuid` lines (`--format=csv,noheader`), blank lines skipped."""
    gpus = []
    for line in text.replace(";", "\n").splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1]:
            raise GpuListError(f"cannot read the GPU list line {line.strip()!r} (want 'index, uuid')")
        gpus.append(Gpu(int(parts[0]), parts[1]))
    if len({g.index for g in gpus}) != len(gpus):
        raise GpuListError(f"the GPU list names an index twice: {text.strip()!r}")
    return gpus


def list_gpus(env: Mapping[str, str] | None = None, query: Sequence[str] = tuple(NVIDIA_SMI_QUERY)) -> list[Gpu]:
    """This host's GPUs: `KG_FAKE_GPUS` when set, else nvidia-smi's answer."""
    env = os.environ if env is None else env
    if FAKE_GPUS_VARIABLE in env:
        return parse_gpu_list(env[FAKE_GPUS_VARIABLE])
    try:
        found = subprocess.run(list(query), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuListError(f"cannot list the GPUs ({' '.join(query)}): {exc}") from None
    if found.returncode != 0:
        raise GpuListError(f"cannot list the GPUs: {' '.join(query)} exited {found.returncode}: "
                           f"{(found.stderr or found.stdout).strip()[:300]}")
    return parse_gpu_list(found.stdout)


def choose_gpus(spec: str, listed: Callable[[], list[Gpu]]) -> list[Gpu]:
    """`all`: every GPU listed; `0,2`: those host indexes, each of which must be listed."""
    gpus = listed()
    if spec.strip().lower() == "all":
        if not gpus:
            raise GpuListError("no GPU found on this host (nvidia-smi lists none)")
        return gpus
    wanted = [p.strip() for p in spec.split(",") if p.strip()]
    if not wanted or not all(p.isdigit() for p in wanted) or len(set(wanted)) != len(wanted):
        raise GpuListError(f"--gpus: want 'all' or distinct host indexes such as '0,1', got {spec!r}")
    by_index = {g.index: g for g in gpus}
    missing = [i for i in map(int, wanted) if i not in by_index]
    if missing:
        raise GpuListError(f"--gpus {spec}: this host has no GPU {', '.join(map(str, missing))} "
                           f"(it has {', '.join(str(g.index) for g in gpus) or 'none'})")
    return [by_index[int(i)] for i in wanted]


def worker_env(base: Mapping[str, str], gpu: Gpu, timing_cpus: str, scratch: Path | None) -> dict[str, str]:
    """The environment of `gpu`'s worker: `base` pinned to that GPU, its timing cores chosen for
    its index (as `auto` would in it, written out so the log shows them) and, with several GPUs,
    its own scratch folder as TMPDIR."""
    env = dict(base)
    # the docker sandbox backend's `--gpus device=`: the UUID names the same GPU on the host
    env.update(KG_GPU_INDEX=str(gpu.index), CUDA_VISIBLE_DEVICES=gpu.uuid, KG_SANDBOX_DOCKER_GPU=gpu.uuid)
    cpus = choose_timing_cpus(timing_cpus, gpu.index)
    env["KG_TIMING_CPUS"] = "off" if cpus is None else f"{cpus.parent},{cpus.timed}"
    if scratch is not None:
        env["TMPDIR"] = str(private_dir(scratch))
    return env


def warn_shared_cores(envs: Sequence[Mapping[str, str]]) -> None:
    """A log line when two GPUs' workers got the same timing cores (fewer than two cores per GPU
    here): their timings may then run at once on one pair of cores, each GPU's lock being its own."""
    pairs = [env.get("KG_TIMING_CPUS", "off") for env in envs]
    if "off" not in pairs and len(set(pairs)) < len(pairs):
        log.warning("timing cores shared between GPUs (%s): this host has fewer than 2 cores per GPU, "
                    "so timings on two GPUs may disturb each other", ", ".join(pairs))


def node_name(gpu: Gpu) -> str:
    """The Celery node of `gpu`'s worker: distinct per GPU on one host (`%h` is the host name)."""
    return f"gpu{gpu.index}@%h"


EventKind = Literal["started", "restarted", "left_out"]


@dataclass(frozen=True)
class WorkerEvent:
    """What happened to a GPU's worker: its first start under this supervisor, an exit followed by
    a restart, or an exit after which the GPU is left out. `status` is the exit's Popen return code
    (negative: killed by that signal); `restarts` the restarts in a row so far."""
    gpu: Gpu
    kind: EventKind
    status: int | None = None
    restarts: int = 0

    @property
    def exit_code(self) -> int | None:
        return self.status if self.status is not None and self.status >= 0 else None

    @property
    def signal(self) -> int | None:
        return -self.status if self.status is not None and self.status < 0 else None


def _ignore(event: WorkerEvent) -> None:
    """No one listens: the log lines alone."""


@dataclass
class _Member:
    gpu: Gpu
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started: float = 0.0
    left_out: bool = False
    exits: list[int] = field(default_factory=list)


class Supervisor:
    """Starts one worker per GPU and keeps them running (see the module's text)."""

    def __init__(self, members: Sequence[tuple[Gpu, list[str], dict[str, str]]],
                 max_restarts: int = DEFAULT_MAX_RESTARTS, restart_delay_s: float = 2.0,
                 poll_s: float = 0.2, stable_s: float = STABLE_S, idle_exits: bool = False,
                 on_event: Callable[[WorkerEvent], None] = _ignore) -> None:
        self.on_event = on_event  # called in the supervisor's loop: it must not raise, nor wait long
        self.members = [_Member(gpu, list(argv), dict(env)) for gpu, argv, env in members]
        self.idle_exits = idle_exits  # workers with an idle exit: one that exits 0 is done, not restarted
        self.max_restarts = max_restarts
        self.restart_delay_s = restart_delay_s
        self.poll_s = poll_s
        self.stable_s = stable_s
        self.stopping = False

    def run(self) -> int:
        """Until every worker has exited: 0 after a stop asked by signal, 1 when every GPU was
        left out."""
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for member in self.members:
                self._start(member)
                self.on_event(WorkerEvent(member.gpu, "started"))
            while any(m.proc is not None for m in self.members):
                for member in self.members:
                    self._check(member)
                time.sleep(self.poll_s)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stopping or (self.idle_exits and not self.left_out()):
            log.info("every GPU worker has stopped")
            return 0
        log.error("every GPU of this host was left out: no worker is grading")
        return 1

    def left_out(self) -> list[Gpu]:
        return [m.gpu for m in self.members if m.left_out]

    def _start(self, member: _Member) -> None:
        member.proc = subprocess.Popen(member.argv, env=member.env, start_new_session=True)
        member.started = time.monotonic()
        log.info("GPU %d (%s): worker started, pid %d", member.gpu.index, member.gpu.uuid, member.proc.pid)

    def _check(self, member: _Member) -> None:
        if member.proc is None:
            return
        status = member.proc.poll()
        if status is None:
            return
        member.proc = None
        member.exits.append(status)
        if self.stopping or (self.idle_exits and status == 0):
            log.info("GPU %d: worker stopped (exit status %d)", member.gpu.index, status)
            return
        if time.monotonic() - member.started >= self.stable_s:
            member.restarts = 0  # it had been working: only a worker that keeps dying is left out
        if member.restarts >= self.max_restarts:
            member.left_out = True
            log.error("GPU %d (%s) is left out: its worker exited %d times (last exit status %d); the other GPUs "
                      "keep grading, and the run it held is sent again once its heartbeat is stale",
                      member.gpu.index, member.gpu.uuid, len(member.exits), status)
            self.on_event(WorkerEvent(member.gpu, "left_out", status, member.restarts))
            return
        member.restarts += 1
        log.warning("GPU %d: worker exited with status %d; restart %d of %d", member.gpu.index, status,
                    member.restarts, self.max_restarts)
        self._pause(self.restart_delay_s * member.restarts)
        if not self.stopping:
            self._start(member)
            self.on_event(WorkerEvent(member.gpu, "restarted", status, member.restarts))

    def _pause(self, seconds: float) -> None:
        """Wait before a restart, still checking the other workers and a stop."""
        until = time.monotonic() + seconds
        while time.monotonic() < until and not self.stopping:
            time.sleep(min(self.poll_s, max(0.0, until - time.monotonic())))

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            log.info("signal %d: asking every GPU worker to finish its run and stop", signum)
        self.stopping = True
        for member in self.members:
            if member.proc is not None and member.proc.poll() is None:
                member.proc.send_signal(signal.SIGTERM)  # the worker's main process only: warm shutdown
