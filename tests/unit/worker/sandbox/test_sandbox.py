"""worker.sandbox with real child processes: the promises, for both backends.

The "process" backend runs everywhere; what only a root parent can enforce there (uid drop,
network namespace, RLIMIT_NPROC) is tested as root only. The "docker" backend runs the
same promise tests when a docker engine answers and the sandbox image exists
(KG_TEST_SANDBOX_IMAGE, default kernelgrade-sandbox:latest: `docker compose --profile sandbox
build sandbox`); otherwise they skip, saying which is missing. Its command line is checked
without an engine. Children are plain `python -I -c` programs using the standard library only.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from worker.sandbox import (
    SANDBOX_LABEL,
    DockerOptions,
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxPolicy,
    docker_command,
    usable_by,
)
from worker.sandbox.docker import _FD_SHIM, _FdHandover

IS_ROOT = os.geteuid() == 0
MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=20, cpu_s=20, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=64 * MiB)
SANDBOX_IMAGE = os.environ.get("KG_TEST_SANDBOX_IMAGE", "kernelgrade-sandbox:latest")


@functools.cache
def _docker_missing() -> str | None:
    """Why the docker backend cannot be tested here, or None."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if info.returncode != 0:
        return f"no docker engine answers: {(info.stderr or info.stdout).strip()[:200]}"
    image = subprocess.run(["docker", "image", "inspect", SANDBOX_IMAGE], capture_output=True, text=True)
    if image.returncode != 0:
        return f"sandbox image {SANDBOX_IMAGE} not built (docker compose --profile sandbox build sandbox)"
    return None


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    python: str  # the interpreter path where the child runs
    docker: DockerOptions | None = None

    def sandbox(self, limits: SandboxLimits, policy: SandboxPolicy = SandboxPolicy()) -> Sandbox:
        return Sandbox(limits, dataclasses.replace(policy, docker=self.docker))


@pytest.fixture(params=["process", "docker"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "docker":
        if (why := _docker_missing()) is not None:
            pytest.skip(f"docker backend: {why}")
        return Backend("docker", "python3", DockerOptions(image=SANDBOX_IMAGE, cpus=1))
    return Backend("process", _python())


def _image_env() -> set[str]:
    out = subprocess.run(["docker", "image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}",
                          SANDBOX_IMAGE], capture_output=True, text=True, check=True)
    return {line.split("=", 1)[0] for line in out.stdout.split()}


def _root_for_process(backend: Backend) -> None:
    if backend.name == "process" and not IS_ROOT:
        pytest.skip("uid drop, netns and RLIMIT_NPROC need a root parent")


def _nobody() -> tuple[int, int]:
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def _python() -> str:
    """An interpreter the sandbox user can run (the venv's may live under a 0700 home)."""
    if not IS_ROOT:
        return sys.executable
    uid, gid = _nobody()
    candidates = [sys.executable] + [os.path.join(d, "python3") for d in os.get_exec_path()]
    for c in candidates:
        if os.path.exists(c) and usable_by(Path(c), uid, gid):
            return c
    pytest.skip("no python3 executable by the sandbox user")


@pytest.fixture
def base():
    """A world-searchable scratch dir (pytest's tmp_path sits under a 0700 root dir, which
    would make 'cannot read/write there' tests pass for the wrong reason)."""
    d = Path(tempfile.mkdtemp(prefix="kg-sandbox-"))
    d.chmod(0o755)
    (d / "job").mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run(base: Path, code: str, limits: SandboxLimits = LIMITS, env: dict | None = None,
        policy: SandboxPolicy = SandboxPolicy(), backend: Backend | None = None):
    backend = backend or Backend("process", _python())
    proc = backend.sandbox(limits, policy).spawn([backend.python, "-I", "-c", textwrap.dedent(code)], base / "job", env or {})
    return proc, proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_normal_exit_and_output_tail(base, backend):
    proc, res = run(base, """
        import sys
        print("hello from stdout", flush=True)
        print("and stderr", file=sys.stderr, flush=True)
        sys.exit(3)
    """, backend=backend)
    assert (res.returncode, res.reason) == (3, "exited")
    tail = proc.output_tail()
    assert "hello from stdout" in tail and "and stderr" in tail
    assert proc.output_tail(5) == tail[-5:]
    assert not proc.alive and proc.poll_violation() is None


def test_no_network_inside_but_loopback_works_outside(base, backend):
    _root_for_process(backend)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # control: works outside
        proc, res = run(base, f"""
            import socket
            for port in ({port}, 6379):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    print("CONNECTED", port)
                except OSError as exc:
                    print("refused", port, type(exc).__name__)
        """, backend=backend)
    finally:
        listener.close()
    assert res.reason == "exited", proc.output_tail()
    assert proc.network_isolated is True
    assert "CONNECTED" not in proc.output_tail() and proc.output_tail().count("refused") == 2


def test_writes_only_in_cwd(base, backend):
    _root_for_process(backend)
    forbidden = base / "forbidden"
    forbidden.mkdir(mode=0o755)
    proc, res = run(base, f"""
        import os
        open("mine.txt", "w").write("ok")
        try:
            print("listing", os.listdir({str(forbidden)!r}))
        except OSError as exc:
            print("not visible", type(exc).__name__)
        for target in ({str(forbidden / "x.txt")!r}, "/usr/x.txt"):
            try:
                open(target, "w")
                print("WROTE OUTSIDE", target)
            except OSError:
                print("denied")
    """, backend=backend)
    assert res.reason == "exited", proc.output_tail()
    assert (base / "job" / "mine.txt").read_text() == "ok"
    # Neither backend shows the job folder's siblings (the process backend: the job folder is
    # under /tmp, which the child sees as a fresh tmpfs holding only that folder).
    assert "not visible FileNotFoundError" in proc.output_tail() and proc.output_tail().count("denied") == 2, proc.output_tail()
    assert not (forbidden / "x.txt").exists()
    if IS_ROOT:
        assert (base / "job").stat().st_uid == _nobody()[0]
        assert forbidden.stat().st_uid == 0  # spawn chowns only the cwd


def test_cannot_read_root_only_file(base, backend):
    _root_for_process(backend)
    secret = base / "hidden.txt"
    secret.write_text("hidden answers")
    secret.chmod(0o600)
    proc, res = run(base, f"""
        try:
            print("READ", open({str(secret)!r}).read())
        except OSError:
            print("denied")
    """, backend=backend)
    assert res.reason == "exited"
    assert "denied" in proc.output_tail() and "hidden answers" not in proc.output_tail()


def test_environment_is_only_what_is_passed(base, monkeypatch, backend):
    monkeypatch.setenv("KERNELGRADE_FAKE_SECRET", "hunter2")
    proc, res = run(base, """
        raw = open("/proc/self/environ", "rb").read()
        print(dict(kv.decode().split("=", 1) for kv in raw.split(b"\\0") if kv))
    """, env={"ONLY_THIS": "1"}, policy=SandboxPolicy(gpu_index=2), backend=backend)
    assert res.reason == "exited", proc.output_tail()
    seen = eval(proc.output_tail().strip())  # noqa: S307 - our own child's repr of a dict of str
    if backend.name == "docker":  # plus the image's own ENV and docker's HOSTNAME, PATH, HOME;
        # the one GPU in a container is 0
        assert set(seen) - {"ONLY_THIS", "CUDA_VISIBLE_DEVICES"} <= _image_env() | {"HOSTNAME", "PATH", "HOME"}, seen
        seen = {k: v for k, v in seen.items() if k in ("ONLY_THIS", "CUDA_VISIBLE_DEVICES")}
        assert seen == {"ONLY_THIS": "1", "CUDA_VISIBLE_DEVICES": "0"}
    else:
        assert seen == {"ONLY_THIS": "1", "CUDA_VISIBLE_DEVICES": "2"}


def _session(sid: int) -> list[int]:
    """Live processes whose session or process group is `sid`."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _alive(int(name)):
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if sid in (int(fields[2]), int(fields[3])):
                out.append(int(name))
    return out


def test_fork_bomb_contained(base, backend):
    _root_for_process(backend)
    wall = 15 if backend.name == "process" else 5
    limits = SandboxLimits(wall_s=wall, cpu_s=15, memory_bytes=2048 * MiB, max_processes=20, file_size_bytes=MiB)
    t0 = time.monotonic()
    proc, res = run(base, """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """, limits=limits, backend=backend)
    assert time.monotonic() - t0 < 10
    if backend.name == "process":  # the watchdog kills past max_processes
        assert res.reason == "processes", (res, proc.output_tail())
        assert _session(proc.pid) == []
    else:  # the pids cgroup makes the forks fail; the wall time ends it; the container is gone
        assert res.reason == "timeout", (res, proc.output_tail())
        assert _containers(proc.name) == []


def test_memory_hog_killed(base, backend):
    proc, res = run(base, """
        data = b"x" * (2 << 30)   # 2 GiB, every page written
        print("SURVIVED", len(data))
    """, backend=backend)
    assert res.reason == "memory", (res, proc.output_tail())
    assert proc.poll_violation() == "memory"
    assert "SURVIVED" not in proc.output_tail()


def test_infinite_loop_hits_wall_time(base, backend):
    limits = SandboxLimits(wall_s=1, cpu_s=30, memory_bytes=512 * MiB, max_processes=8, file_size_bytes=MiB)
    t0 = time.monotonic()
    proc, res = run(base, "while True: pass", limits=limits, backend=backend)
    assert res.reason == "timeout" and proc.poll_violation() == "wall"
    assert "1.0 s wall time" in res.detail
    assert 1 <= time.monotonic() - t0 < 6


def test_cpu_limit(base, backend):
    limits = SandboxLimits(wall_s=15, cpu_s=1, memory_bytes=512 * MiB, max_processes=8, file_size_bytes=MiB)
    t0 = time.monotonic()
    proc, res = run(base, "while True: pass", limits=limits, backend=backend)
    assert res.reason == "cpu", res
    assert time.monotonic() - t0 < 10 and proc.poll_violation() is None


def test_file_size_limit(base, backend):
    limits = SandboxLimits(wall_s=15, cpu_s=15, memory_bytes=512 * MiB, max_processes=8, file_size_bytes=MiB)
    proc, res = run(base, """
        with open("big.bin", "wb", buffering=0) as f:
            f.write(b"a" * (1 << 20))
            try:
                f.write(b"b" * 4096)
                print("WROTE PAST LIMIT")
            except OSError as exc:
                print("blocked", exc.errno)
    """, limits=limits, backend=backend)
    assert res.reason == "exited", proc.output_tail()
    assert "blocked 27" in proc.output_tail()  # EFBIG
    assert (base / "job" / "big.bin").stat().st_size == MiB


def _with_marker(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (the child's own pids are those of its
    PID namespace, so the host finds them this way)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read() and _alive(int(name)):
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return found


def test_kill_leaves_no_survivor_even_sigterm_ignoring_escapees(base):
    py = _python()
    marker = f"kg-stubborn-{os.getpid()}-{time.monotonic_ns()}"
    proc = Sandbox(LIMITS).spawn([py, "-I", "-c", textwrap.dedent(f"""
        import subprocess, time
        stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
        a = subprocess.Popen([{py!r}, "-c", stubborn, {marker!r}])
        b = subprocess.Popen([{py!r}, "-c", stubborn, {marker!r}], start_new_session=True)  # leaves the group
        time.sleep(0.5)
        print("STARTED", flush=True)
        time.sleep(300)
    """)], base / "job", {})
    deadline = time.monotonic() + 10
    while "STARTED" not in proc.output_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = _with_marker(marker)
    assert len(pids) == 3 and all(_alive(p) for p in pids)  # the job (its program holds the marker) and both
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    proc.kill()
    res = proc.wait()
    assert res.reason == "signal" and res.detail.startswith("SIGKILL")
    time.sleep(0.1)
    assert not any(_alive(p) for p in pids) and not proc.alive


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_output_flood_keeps_parent_memory_and_tail_bounded(base):
    before = _rss()
    proc, res = run(base, """
        import os
        block = b"y" * (1 << 20)
        for _ in range(400):
            os.write(1, block)
        os.write(1, b"\\nTHE END\\n")
    """)
    assert res.reason == "exited", res
    assert _rss() - before < 32 * MiB
    tail = proc.output_tail(4096)
    assert len(tail) == 4096 and tail.endswith("THE END\n")
    assert len(proc.output_tail(10**9)) <= 64 * 1024


def test_bad_user_and_cwd_rejected(base):
    if IS_ROOT:
        with pytest.raises(SandboxError):
            Sandbox(LIMITS, SandboxPolicy(user="no-such-user-kg"))
    with pytest.raises(SandboxError):
        Sandbox(LIMITS).spawn([_python(), "-c", "pass"], base / "missing", {})


# ---- the docker backend: its command line (no engine needed) --------------------------------

def _flag_values(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == flag]


def test_docker_command_has_every_limit_and_isolation_flag():
    limits = SandboxLimits(wall_s=60, cpu_s=90, memory_bytes=3 * 1024 * MiB, max_processes=100,
                           file_size_bytes=8 * MiB, open_files=128)
    options = DockerOptions(image="kernelgrade-sandbox:7", gpu="GPU-1234", cpus=2.5, tmp_bytes=256 * MiB)
    cwd = Path("/var/lib/kernelgrade/jobs/run-1/problem-1.1")
    cmd = docker_command(options, limits, "kg-sandbox-x", ["python3", "-m", "worker.gpu.child", "--fd", "7"], cwd,
                         {"PYTHONPATH": "/opt/kernelgrade", "CUDA_VISIBLE_DEVICES": "0"}, (10001, 10001))
    assert cmd[:2] == ["docker", "run"] and "--privileged" not in cmd
    for flag in ("--init", "--read-only"):
        assert flag in cmd
    assert _flag_values(cmd, "--network") == ["none"]
    assert _flag_values(cmd, "--ipc") == _flag_values(cmd, "--cgroupns") == ["private"]  # the canary asks for both
    assert _flag_values(cmd, "--cap-drop") == ["ALL"]
    assert _flag_values(cmd, "--security-opt") == ["no-new-privileges"]
    assert _flag_values(cmd, "--user") == ["10001:10001"]
    assert _flag_values(cmd, "--name") == ["kg-sandbox-x"] and _flag_values(cmd, "--label") == [SANDBOX_LABEL]
    assert _flag_values(cmd, "--pull") == ["never"]
    assert _flag_values(cmd, "--mount") == [f"type=bind,source={cwd},target={cwd}"]
    assert _flag_values(cmd, "--workdir") == [str(cwd)]
    assert _flag_values(cmd, "--tmpfs") == [f"/tmp:rw,nosuid,nodev,size={256 * MiB}"]
    assert _flag_values(cmd, "--memory") == _flag_values(cmd, "--memory-swap") == [str(3 * 1024 * MiB)]
    assert _flag_values(cmd, "--pids-limit") == ["264"]  # 2 x 100 + 64, as RLIMIT_NPROC
    assert _flag_values(cmd, "--cpus") == ["2.5"]
    assert sorted(_flag_values(cmd, "--ulimit")) == ["core=0:0", "cpu=90:91", f"fsize={8 * MiB}:{8 * MiB}",
                                                      "nofile=128:128"]
    assert _flag_values(cmd, "--gpus") == ["device=GPU-1234"]
    assert _flag_values(cmd, "--env") == ["CUDA_VISIBLE_DEVICES=0", "PYTHONPATH=/opt/kernelgrade"]
    image_at = cmd.index("kernelgrade-sandbox:7")
    assert cmd[image_at + 1:] == ["python3", "-m", "worker.gpu.child", "--fd", "7"]


def test_docker_command_without_gpu_and_with_fd_handover():
    cwd = Path("/jobs/a")
    cmd = docker_command(DockerOptions(image="img"), LIMITS, "n", ["prog", "--fd", "9"], cwd, {}, (65534, 65534),
                         cwd / ".kg-fds.sock", (9,))
    assert "--gpus" not in cmd and "--env" not in cmd
    assert cmd[cmd.index("img") + 1:] == ["python3", "-I", "-c", _FD_SHIM, "/jobs/a/.kg-fds.sock", "9",
                                         "prog", "--fd", "9"]


@pytest.mark.parametrize("cwd", ["relative/job", "/jobs/a,b"])
def test_docker_command_refuses_a_cwd_it_cannot_mount(cwd):
    with pytest.raises(SandboxError):
        docker_command(DockerOptions(image="img"), LIMITS, "n", ["prog"], Path(cwd), {}, (1, 1))


def test_fd_handover_shim_gives_the_child_the_parents_socket(tmp_path):
    """The hand-over the docker backend uses, run here without a container: the shim takes the
    socket through the folder and the program it becomes talks on the parent's socketpair."""
    parent_end, child_end = socket.socketpair()
    handover = _FdHandover(tmp_path, None)
    wanted = 7 if child_end.fileno() != 7 else 8
    child = subprocess.Popen([sys.executable, "-I", "-c", _FD_SHIM, str(handover.path), str(wanted),
                              sys.executable, "-I", "-c",
                              f"import os; os.write({wanted}, b'hello through ' + str({wanted}).encode())"])
    assert handover.give((child_end.fileno(),), child)
    child_end.close()
    parent_end.settimeout(10)
    assert parent_end.recv(100) == f"hello through {wanted}".encode()
    assert child.wait(timeout=10) == 0
    assert not handover.path.exists()


# ---- the docker backend with an engine ----------------------------------------------------------

def _containers(name: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "--all", "--quiet", "--filter", f"name=^{name}$"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.fixture
def docker_backend(backend: Backend) -> Backend:
    if backend.name != "docker":
        pytest.skip("docker backend only")
    return backend


def test_docker_child_gets_passed_fds_and_its_container_is_removed(base, docker_backend):
    parent_end, child_end = socket.socketpair()
    fd = child_end.fileno()
    sandbox = docker_backend.sandbox(LIMITS)
    proc = sandbox.spawn(["python3", "-I", "-c", f"import os; os.write({fd}, b'from the container')"],
                         base / "job", {}, pass_fds=(fd,))
    child_end.close()
    parent_end.settimeout(60)
    assert parent_end.recv(100) == b"from the container"
    res = proc.wait()
    assert (res.reason, res.returncode) == ("exited", 0), proc.output_tail()
    assert _containers(proc.name) == [] and not (base / "job" / ".kg-fds.sock").exists()


def test_docker_kill_stops_the_container(base, docker_backend):
    proc = docker_backend.sandbox(LIMITS).spawn(["python3", "-I", "-c", "import time; print('up', flush=True); time.sleep(300)"],
                                                base / "job", {})
    deadline = time.monotonic() + 30
    while "up" not in proc.output_tail() and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    proc.kill()
    res = proc.wait()
    assert res.reason == "signal" and res.detail.startswith("SIGKILL"), res
    assert _containers(proc.name) == [] and not proc.alive


def test_docker_options_follow_the_settings():
    from grader.runs.engine_config import docker_options
    from grader.settings import Settings

    assert docker_options(Settings(_env_file=None)) is None  # the process backend by default
    options = docker_options(Settings(_env_file=None, gpu_index=3,
                                      sandbox={"backend": "docker", "docker_image": "sbx:1", "docker_cpus": 2}))
    assert options == DockerOptions(image="sbx:1", gpu="3", cpus=2)
    assert docker_options(Settings(_env_file=None, sandbox={"backend": "docker", "docker_gpu": "GPU-9"})).gpu == "GPU-9"
