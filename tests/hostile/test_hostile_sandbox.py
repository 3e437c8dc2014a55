"""The sandbox's host-side promises against hostile children, on the CPU (worker/sandbox/,
process backend, as root so the uid drop, the PID, mount and network namespaces and
RLIMIT_NPROC apply).

Each child is a small stdlib-only Python program standing in for host code a student could
put in their MiniTorch: it tries one attack and prints `ESCAPED <what>` for every attempt that
worked. The parent also checks from outside (files left where the child must not write,
processes that outlived the sandbox). After every case a harmless child must run normally:
the worker stays healthy for the next job. The GPU-side versions (the same attacks from a
real submission's MiniTorch, kernels that hang or trap) are in tests/gpu/test_hostile_gpu.py.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hostile_report import Row, record

from tests.unit.worker.sandbox.test_sandbox import _python
from worker.gpu.client import with_operations
from worker.sandbox import Sandbox, SandboxExit, SandboxLimits, SandboxPolicy
from worker.sandbox.view import PROJECT_ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop, netns and RLIMIT_NPROC need a root parent")

MiB = 1 << 20
DISK_BUDGET = 64 * MiB  # what one job may put on the disk; the child below tries 4x that
LIMITS = SandboxLimits(wall_s=20, cpu_s=20, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=8 * MiB,
                       disk_bytes=DISK_BUDGET)
SHARED_TMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


@dataclass(frozen=True)
class World:
    """The fake server around one child: its job folder and what it must not reach."""

    base: Path
    marker: str  # in every path the child may create outside, and in its argv
    canary: str  # inside every secret
    tcp_port: int
    unix_socket: Path
    abstract_socket: str
    parent_pid: int = field(default_factory=os.getpid)

    @property
    def job(self) -> Path:
        return self.base / "job"

    @property
    def data(self) -> Path:
        return self.base / "data"

    def outside_paths(self) -> list[Path]:
        """Places a child might write to outside its job folder."""
        return [self.base / f"outside-{self.marker}", self.data / f"planted-{self.marker}",
                *(d / self.marker for d in SHARED_TMP_DIRS)]

    def host_tmp_files(self) -> list[Path]:
        """World-readable files the host (or an earlier job) left in the shared temporary folders."""
        return [d / f"{self.marker}-host" for d in SHARED_TMP_DIRS]

    def host_files(self) -> list[Path]:
        """World-readable (0644, in searchable folders) canaries outside the allow-list: a host
        folder, the service's `.env` in the project folder, another job's folder left readable."""
        return [Path("/var/lib") / self.marker / "notes.txt", PROJECT_ROOT / f".env-{self.marker}",
                self.data_open / "jobs" / "run-8" / "src" / "combine.cu"]

    @property
    def data_open(self) -> Path:
        """A data dir left world-readable (as the H200 deployment's blobs/ was), beside the job."""
        return self.base / "data-open"


@dataclass(frozen=True)
class ChildCase:
    id: str
    threat: str
    program: Callable[[World], str]
    reasons: tuple[str, ...]  # SandboxExit.reason values that are a right outcome
    limits: SandboxLimits = LIMITS


def _reads(paths: list[str]) -> str:
    return f"""
        for path in {paths!r}:
            try:
                data = open(path, "rb").read()
                print("ESCAPED read", path, data[:40])
            except OSError as exc:
                print("blocked read", path, exc.errno)
    """


def _other_secrets(w: World) -> str:
    return _reads([str(w.data / "blobs" / "ab" / "blob"), str(w.data / "jobs" / "run-7" / "src" / "combine.cu"),
                   str(w.data / "secret_key"), str(w.data / "hidden_cases.yaml")])


def _host_files(w: World) -> str:
    """Reads each planted host file by its path, then looks through the whole visible tree for
    the marker in a name or the canary in any small file outside the system folders."""
    return _reads([str(p) for p in w.host_files()]) + f"""
        import os
        SYSTEM = ("/usr/", "/proc/", "/sys/", "/dev/")
        for top, folders, files in os.walk("/"):
            here = top.rstrip("/") + "/"
            folders[:] = [f for f in folders if not (here + f + "/").startswith(SYSTEM)]
            for name in folders + files:
                if {w.marker!r} in name:
                    print("ESCAPED sees", here + name)
            for name in files:
                try:
                    if os.path.getsize(here + name) < (1 << 20) and {w.canary!r}.encode() in open(here + name, "rb").read():
                        print("ESCAPED canary in", here + name)
                except OSError:
                    pass
    """


def _view_of_the_host(w: World) -> str:
    """What of the host the job can name: /etc, home folders, the service's folders, pid 1. A
    listed name is an escape unless it leads to the Python runtime or the engine package."""
    runtime = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(_python())), str(PROJECT_ROOT / "worker")]
    return f"""
        import os
        def needed(path):
            return any(r == path or r.startswith(path + "/") for r in {runtime!r})
        users = [line.split(":")[0] for line in open("/etc/passwd")]
        if users != ["nobody"]:
            print("ESCAPED /etc/passwd lists", users)
        etc = sorted(os.listdir("/etc"))
        extra = set(etc) - {{"passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
                            "alternatives"}}
        if extra:
            print("ESCAPED /etc holds", sorted(extra)[:10])
        for folder in ("/home", "/root", "/srv", "/var/lib", "/opt", "/mnt", {str(w.base)!r}, {str(PROJECT_ROOT)!r}):
            try:
                listed = [n for n in os.listdir(folder) if not needed(os.path.join(folder, n))]
            except OSError:
                continue
            if listed and not {str(w.job)!r}.startswith(folder + "/"):
                print("ESCAPED lists", folder, listed[:5])
        import socket
        if socket.gethostname() == {socket.gethostname()!r}:
            print("ESCAPED the host's name")
        init = open("/proc/1/cmdline", "rb").read()
        if b"launcher.py" not in init:
            print("ESCAPED pid 1 is the host's", init[:60])
        print("top level:", sorted(os.listdir("/")))
    """


def _environment(w: World) -> str:
    return _reads([f"/proc/{w.parent_pid}/environ", f"/proc/{w.parent_pid}/mem", "/proc/1/environ"]) + f"""
        import os
        own = open("/proc/self/environ", "rb").read()
        if {w.canary!r}.encode() in own or any({w.canary!r} in v for v in os.environ.values()):
            print("ESCAPED environment secret")
        listing = os.listdir({str(w.data)!r}) if os.access({str(w.data)!r}, os.R_OK) else []
        if listing:
            print("ESCAPED listed", listing)
    """


def _writes(paths: list[Path]) -> str:
    return f"""
        for path in {[str(p) for p in paths]!r}:
            try:
                with open(path, "w") as f:
                    f.write("planted")
                print("ESCAPED wrote", path)
            except OSError as exc:
                print("blocked write", path, exc.errno)
    """


def _shared_tmp(w: World) -> str:
    """Reads what the host left in /tmp & co., and plants files there (escapes if they reach the host)."""
    return _reads([str(p) for p in w.host_tmp_files()]) + f"""
        for path in {[str(p) for p in w.outside_paths()[2:]]!r}:
            with open(path, "w") as f:
                f.write("planted")  # allowed: a private /tmp; the host must never see it
    """


def _network(w: World) -> str:
    return f"""
        import socket
        attempts = [
            ("tcp loopback", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", {w.tcp_port})),
            ("tcp redis", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 6379)),
            ("tcp postgres", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 5432)),
            ("tcp outside", socket.AF_INET, socket.SOCK_STREAM, ("192.0.2.1", 80)),
            ("abstract unix", socket.AF_UNIX, socket.SOCK_STREAM, "\\0" + {w.abstract_socket!r}),
        ]
        for what, family, kind, address in attempts:
            s = socket.socket(family, kind)
            s.settimeout(2)
            try:
                s.connect(address)
                print("ESCAPED connect", what)
            except OSError as exc:
                print("blocked connect", what, exc.errno)
            finally:
                s.close()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(b"x", ("192.0.2.1", 53))
            print("ESCAPED udp send")
        except OSError as exc:
            print("blocked udp", exc.errno)
    """


def _unix_socket_file(w: World) -> str:
    return f"""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect({str(w.unix_socket)!r})
            print("ESCAPED connect unix socket file")
        except OSError as exc:
            print("blocked unix", exc.errno)
    """


def _privileges(w: World) -> str:
    return f"""
        import os, resource, signal
        for what, attempt in [
            ("setuid root", lambda: os.setuid(0)),
            ("raise RLIMIT_NPROC", lambda: resource.setrlimit(resource.RLIMIT_NPROC, (10**6, 10**6))),
            ("raise RLIMIT_FSIZE", lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (-1, -1))),
            ("signal the worker", lambda: os.kill({w.parent_pid}, 0)),
            ("signal init", lambda: os.kill(1, 0)),
            ("chown into root", lambda: os.chown(".", 0, 0)),
        ]:
            try:
                attempt()
                print("ESCAPED", what)
            except OSError as exc:
                print("blocked", what, exc.errno)
    """


FORK_BOMB = """
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
"""
DAEMON = """
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)   # a daemon that means to outlive the job
            os._exit(0)
        os._exit(0)
    time.sleep(0.5)
"""
MEMORY_THREADS = """
    import threading
    hoard = []
    def grab():
        while True:
            hoard.append(bytearray(16 << 20))
    for _ in range(4):
        threading.Thread(target=grab, daemon=True).start()
    threading.Event().wait(60)
"""
CPU_THREADS = """
    import threading
    def spin():
        while True:
            pass
    for _ in range(8):
        threading.Thread(target=spin, daemon=True).start()
    threading.Event().wait(60)
"""
FILE_DESCRIPTORS = """
    import os
    held = []
    try:
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        print("blocked at", len(held), "descriptors", exc.errno)
    if len(held) > 1024:
        print("ESCAPED opened", len(held), "descriptors")
"""
ONE_BIG_FILE = """
    with open("big.bin", "wb", buffering=0) as f:
        try:
            for _ in range(64):
                f.write(b"x" * (1 << 20))
            print("ESCAPED wrote 64 MiB into one file")
        except OSError as exc:
            print("blocked at", f.tell(), exc.errno)
"""


def _many_files(w: World) -> str:
    return f"""
        written = 0
        try:
            for i in range({4 * DISK_BUDGET // (4 * MiB)}):
                with open(f"fill-{{i}}.bin", "wb") as f:
                    f.write(b"x" * (4 << 20))
                written += 4 << 20
        except OSError as exc:
            print("blocked at", written, exc.errno)
        if written > {DISK_BUDGET}:
            print("ESCAPED filled", written >> 20, "MiB of disk")
    """


LOOP = "while True: pass"
CASES: list[ChildCase] = [
    ChildCase("fork-bomb", "host code fork-bombs", lambda w: FORK_BOMB, ("processes",)),
    ChildCase("daemon-outlives-job", "host code leaves a process behind", lambda w: DAEMON, ("exited",)),
    ChildCase("allocate-unbounded", "host code allocates without bound", lambda w: MEMORY_THREADS, ("memory",)),
    ChildCase("spin-all-cores", "host code burns CPU", lambda w: CPU_THREADS, ("cpu", "timeout"),
              SandboxLimits(wall_s=20, cpu_s=2, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=MiB)),
    ChildCase("spin-forever", "host code never returns", lambda w: LOOP, ("timeout",),
              SandboxLimits(wall_s=2, cpu_s=60, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=MiB)),
    ChildCase("exhaust-descriptors", "host code exhausts file descriptors", lambda w: FILE_DESCRIPTORS, ("exited",)),
    ChildCase("fill-disk-one-file", "host code fills the disk", lambda w: ONE_BIG_FILE, ("exited",)),
    ChildCase("fill-disk-many-files", "host code fills the disk", _many_files, ("exited",)),
    ChildCase("network", "host code opens sockets", _network, ("exited",)),
    ChildCase("unix-socket-file", "host code opens sockets", _unix_socket_file, ("exited",)),
    ChildCase("read-other-submissions", "reads other submissions, blobs, hidden cases", _other_secrets, ("exited",)),
    ChildCase("read-environment", "reads environment secrets", _environment, ("exited",)),
    ChildCase("read-host-files", "reads world-readable host files, the service's .env, another job's folder",
              _host_files, ("exited",),
              SandboxLimits(wall_s=90, cpu_s=90, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=MiB)),
    ChildCase("view-of-the-host", "lists /etc, home folders, the service's folders; reads pid 1", _view_of_the_host,
              ("exited",)),
    ChildCase("write-outside-private", "writes outside its dir",
              lambda w: _writes(w.outside_paths()[:2]), ("exited",)),
    ChildCase("shared-tmp", "reads or plants files in the host's /tmp, /var/tmp, /dev/shm", _shared_tmp,
              ("exited",)),
    ChildCase("escalate", "host code regains privileges or signals the worker", _privileges, ("exited",)),
]


def _private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    path.write_text(text)
    path.chmod(0o600)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="kg-hostile-sandbox-"))
    base.chmod(0o755)  # searchable: a denial must come from the secrets' own modes
    (base / "job").mkdir()
    marker = f"kg-hostile-{uuid.uuid4().hex[:12]}"
    canary = f"KGCANARY-{uuid.uuid4().hex}"
    data = base / "data"
    _private(data / "blobs" / "ab" / "blob", canary)
    _private(data / "jobs" / "run-7" / "src" / "combine.cu", canary)
    _private(data / "secret_key", canary)
    _private(data / "hidden_cases.yaml", canary)
    data.chmod(0o700)
    monkeypatch.setenv("KG_SECRET_KEY", canary)
    listener = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_path = base / f"{marker}.sock"
    unix.bind(str(unix_path))
    unix.listen()
    unix_path.chmod(0o777)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + marker)
    abstract.listen()
    world = World(base, marker, canary, listener.getsockname()[1], unix_path, marker)
    for path in world.host_tmp_files() + world.host_files():
        if not path.parent.exists():
            path.parent.mkdir(parents=True)
            for folder in (path.parent, *path.parent.parents):
                if folder in (base, Path("/var/lib")):
                    break
                folder.chmod(0o755)
        path.write_text(canary)
        path.chmod(0o644)
    try:
        yield world
    finally:
        _kill_survivors(marker)
        for s in (listener, unix, abstract):
            s.close()
        shutil.rmtree(base, ignore_errors=True)
        for path in world.outside_paths() + world.host_tmp_files() + world.host_files():
            path.unlink(missing_ok=True)
        shutil.rmtree(Path("/var/lib") / marker, ignore_errors=True)


def _survivors(marker: str) -> list[int]:
    """Live processes whose command line carries `marker` (every child's does)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(name))
    return found


def _kill_survivors(marker: str) -> None:
    """Kill what an escape left running, by process group (one pid at a time loses to a fork bomb)."""
    for _ in range(100):
        survivors = _survivors(marker)
        if not survivors:
            return
        for pid in survivors:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def run_child(world: World, code: str, limits: SandboxLimits) -> tuple[SandboxExit, str]:
    program = f"# {world.marker}\n" + textwrap.dedent(code)
    proc = Sandbox(limits, SandboxPolicy()).spawn([_python(), "-I", "-c", program], world.job, {})
    result = proc.wait()
    return result, proc.output_tail(16384)


def escapes_of(world: World, output: str) -> list[str]:
    found = [line.strip() for line in output.splitlines() if line.startswith("ESCAPED")]
    found += [f"left {p}" for p in world.outside_paths() if p.exists()]
    survivors = _survivors(world.marker)
    if survivors:
        found.append(f"{len(survivors)} process(es) outlived the sandbox")
    if world.canary in output and not found:
        found.append("a secret reached the child's output")
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_hostile_child(case: ChildCase, world: World) -> None:
    started = time.monotonic()
    result, output = run_child(world, case.program(world), case.limits)
    time.sleep(0.3)  # a daemon that slipped out would be running now
    escapes = escapes_of(world, output)
    expected = result.reason if result.reason in case.reasons else "|".join(case.reasons)
    record(Row("sandbox", case.id, case.threat, expected, result.reason, tuple(escapes)))
    elapsed = time.monotonic() - started
    # The worker is healthy for the next job: a harmless child runs normally, right away.
    after, after_output = run_child(world, "print('next job ok')", LIMITS)
    assert not escapes, (case.id, escapes, output[-3000:])
    assert result.reason in case.reasons, (case.id, result, output[-3000:])
    assert elapsed < case.limits.wall_s + 15
    assert (after.reason, after_output.strip()) == ("exited", "next job ok"), (after, after_output)


@pytest.mark.timeout(120)
def test_an_assignments_child_imports_its_code_but_reads_nothing_else_of_its_folder(world: World) -> None:
    """A child serving hw4's operations (worker.gpu.client.with_operations) imports the plug-in's
    modules from rubrics/hw4/, while the rubric beside them (its hidden cases), the mutant set
    and every other file of the folder stay out of its view."""
    folder = PROJECT_ROOT / "rubrics" / "hw4"
    secrets = [folder / "rubric.yaml", folder / "mutants.yaml", folder / "CONTRACT.md", folder / "starter_combine.cu",
               PROJECT_ROOT / "starter" / "hw4" / "setup.py"]
    assert all(p.is_file() for p in secrets)
    program = f"# {world.marker}\n" + textwrap.dedent(f"""
        import os
        import rubrics.hw4.parameter_roles  # stdlib only: the test runs a bare Python
        print("imported", rubrics.hw4.parameter_roles.__file__)
        for path in {[str(p) for p in secrets]!r}:
            if os.path.exists(path):
                print("ESCAPED sees", path)
        shown = sorted(os.listdir({str(folder)!r}))
        if [n for n in shown if not n.endswith(".py")]:
            print("ESCAPED lists", shown)
        if sorted(os.listdir({str(PROJECT_ROOT / "rubrics")!r})) != ["hw4"]:
            print("ESCAPED lists the other assignments")
    """)
    sandbox = with_operations(Sandbox(LIMITS, SandboxPolicy()), ("rubrics.hw4.child_kernels",))
    proc = sandbox.spawn([_python(), "-c", program], world.job, {"PYTHONPATH": str(PROJECT_ROOT)})
    result, output = proc.wait(), proc.output_tail(16384)
    assert not escapes_of(world, output), output
    assert result.reason == "exited" and f"imported {folder / 'parameter_roles.py'}" in output, (result, output)
