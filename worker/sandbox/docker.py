"""The "docker" backend (`SandboxPolicy.docker`): every child is a fresh container, started
with the docker CLI; its limits are the kernel's, through the container (see DockerProcess and
ARCHITECTURE.md "Deployment")."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from worker.sandbox.child import WatchedChild, classify
from worker.sandbox.limits import DockerOptions, SandboxError, SandboxExit, SandboxLimits, nproc_limit

SANDBOX_LABEL = "kernelgrade.sandbox=1"  # on every sandbox container (for `docker ps --filter label=...`)
FD_SOCKET_NAME = ".kg-fds.sock"
HANDOVER_TIMEOUT_S = 120.0  # for a container to start and take its file descriptors


def docker_command(options: DockerOptions, limits: SandboxLimits, name: str, argv: list[str], cwd: Path,
                   env: dict[str, str], user: tuple[int, int], fd_socket: Path | None = None,
                   pass_fds: tuple[int, ...] = ()) -> list[str]:
    """The `docker run` command line for one sandboxed child: a fresh container `name` of
    `options.image` running `argv` in `cwd`, which is bind-mounted at the same path (the
    worker's jobs folder must have that path on the docker host too). With `fd_socket`, a shim
    first takes `pass_fds` over that socket (see _FdHandover)."""
    if not cwd.is_absolute() or "," in str(cwd):
        raise SandboxError(f"cannot bind-mount {cwd}: needs an absolute path without commas")
    memory = str(limits.memory_bytes)
    command = [
        options.docker, "run", "--name", name, "--label", SANDBOX_LABEL, "--pull", "never",
        "--init", "--network", "none", "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--ipc", "private", "--cgroupns", "private",
        "--user", f"{user[0]}:{user[1]}",
        "--mount", f"type=bind,source={cwd},target={cwd}", "--workdir", str(cwd),
        "--tmpfs", f"/tmp:rw,nosuid,nodev,size={options.tmp_bytes}",
        "--memory", memory, "--memory-swap", memory,  # equal: no swap
        # The pids cgroup counts threads, like RLIMIT_NPROC: the same headroom as the process backend.
        "--pids-limit", str(nproc_limit(limits.max_processes)),
        "--cpus", f"{options.cpus:g}",
        "--ulimit", f"cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        "--ulimit", f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
        "--ulimit", f"nofile={limits.open_files}:{limits.open_files}",
        "--ulimit", "core=0:0",
    ]
    if options.gpu is not None:
        command += ["--gpus", f"device={options.gpu}"]
    for key, value in sorted(env.items()):
        command += ["--env", f"{key}={value}"]
    command.append(options.image)
    if fd_socket is not None:
        command += [options.python, "-I", "-c", _FD_SHIM, str(fd_socket), ",".join(map(str, pass_fds))]
    return command + list(argv)


# Runs first in the container when the child needs inherited descriptors (standard library
# only): takes them from the parent over the bind-mounted socket, puts each at the number the
# child expects, then becomes the child.  argv: SOCKET FD[,FD...] PROGRAM [ARGS...]
_FD_SHIM = """
import fcntl, os, socket, sys
path, wanted, argv = sys.argv[1], [int(n) for n in sys.argv[2].split(",")], sys.argv[3:]
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
    conn.connect(path)
    _, fds, _, _ = socket.recv_fds(conn, 1, len(wanted))
if len(fds) != len(wanted):
    sys.exit("sandbox: file descriptor hand-over failed")
base = max(wanted + fds) + 1
moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, base) for fd in fds]
for fd in fds:
    os.close(fd)
for src, dst in zip(moved, wanted):
    os.dup2(src, dst)
    os.close(src)
os.execvp(argv[0], argv)
"""


class _FdHandover:
    """Descriptors cannot cross `docker run`, but the bind-mounted job folder can hold a Unix
    socket: the container's shim connects to it and receives them (SCM_RIGHTS), so the child
    holds the very same socket the parent passed, with nothing relaying in between."""

    def __init__(self, cwd: Path, owner: tuple[int, int] | None) -> None:
        self.path = cwd / FD_SOCKET_NAME
        self.path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(1)
        self._listener.settimeout(0.2)
        if owner is not None:
            os.chown(self.path, *owner)
        os.chmod(self.path, 0o600)

    def give(self, fds: tuple[int, ...], popen: subprocess.Popen[bytes]) -> bool:
        """Hand `fds` to the first connection; False when the container never connected."""
        deadline = time.monotonic() + HANDOVER_TIMEOUT_S
        try:
            while time.monotonic() < deadline and popen.poll() is None:
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    socket.send_fds(conn, [b"k"], list(fds))
                return True
            return False
        finally:
            self.close()

    def close(self) -> None:
        self._listener.close()
        self.path.unlink(missing_ok=True)


def start_container(options: DockerOptions, limits: SandboxLimits, ids: tuple[int, int] | None,
                    gpu_index: int | None, argv: list[str], cwd: Path, env: dict[str, str],
                    pass_fds: tuple[int, ...]) -> DockerProcess:
    """Start `argv` in a fresh container as the sandbox user `ids` (None: this process's
    uid), with `pass_fds` handed over once it runs."""
    if gpu_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = "0"  # the container's one GPU
    user = ids or (os.geteuid(), os.getegid())
    name = f"kg-sandbox-{uuid.uuid4().hex[:16]}"
    handover = _FdHandover(cwd, user if ids else None) if pass_fds else None
    command = docker_command(options, limits, name, argv, cwd, env, user,
                             handover.path if handover else None, pass_fds)
    out_r, out_w = os.pipe()
    try:
        popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                 close_fds=True, start_new_session=True)
    except BaseException:
        os.close(out_r)
        if handover:
            handover.close()
        raise
    finally:
        os.close(out_w)
    process = DockerProcess(popen, name, options, limits, out_r, user[0])
    if handover is not None and not handover.give(pass_fds, popen):
        process.kill()
        try:
            process.wait()
        except SandboxError:
            pass
        raise SandboxError(f"sandbox container {name} did not take its file descriptors: {process.output_tail(2000)}")
    return process


class DockerProcess(WatchedChild):
    """A sandboxed child in its own container (the "docker" backend). The limits are the
    kernel's, through the container: memory (cgroup, no swap; an OOM kill reads "memory"), tasks
    (pids cgroup: a fork bomb's forks fail), CPU time and file size (rlimits), CPU share
    (--cpus); no network, no capabilities, no new privileges, a read-only root with only the job
    folder and a tmpfs /tmp writable, nothing of the host visible but the job folder. The parent
    enforces the wall time (`docker kill`), counted from spawn, container start included.
    wait() removes the container."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str, options: DockerOptions, limits: SandboxLimits,
                 out_fd: int, uid: int) -> None:
        super().__init__(popen, limits, out_fd, name)  # pid: the docker client's
        self.name = name
        self.network_isolated = True
        self.uid: int | None = uid
        self._options = options
        self._start_watchdog()

    def _docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self._options.docker, *args], capture_output=True, text=True, timeout=60, check=False)

    def _watch(self) -> None:
        try:
            self._popen.wait(timeout=self.limits.wall_s)
        except subprocess.TimeoutExpired:
            self._trip("wall", f"killed after {self.limits.wall_s:.1f} s wall time")

    def pause(self) -> None:
        """As SandboxedProcess.pause: the container's processes are frozen (cgroup freezer)."""
        self._docker("pause", self.name)

    def resume(self) -> None:
        self._docker("unpause", self.name)

    def cpu_seconds(self) -> float | None:
        """Not measured for a container (its processes are another PID namespace's)."""
        return None

    def pin(self, cpus: set[int]) -> None:
        self._docker("update", "--cpuset-cpus", ",".join(map(str, sorted(cpus))), self.name)

    def kill(self) -> None:
        """SIGKILL everything in the container; the docker client then exits."""
        if self._popen.poll() is not None:
            return
        self._docker("kill", self.name)
        try:
            self._popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # the container was not created yet: stop the client
            os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait()

    def wait(self, timeout: float | None = None) -> SandboxExit:
        """As SandboxedProcess.wait; raises SandboxError when docker could not run the
        container at all (an infrastructure fault, never the submission's)."""
        if self._result is not None:
            return self._result
        self._wait_for_exit(timeout)
        state = self._docker("inspect", "--format", "{{.State.OOMKilled}} {{.State.ExitCode}} {{.State.StartedAt}}",
                             self.name)
        self._docker("rm", "--force", "--volumes", self.name)
        self._watchdog.join(timeout=5)
        self._output.join(timeout=5)
        fields = state.stdout.split()
        if state.returncode != 0 or len(fields) != 3 or fields[2].startswith("0001-"):
            raise SandboxError(f"docker could not run the sandbox container {self.name}: "
                               f"{(state.stderr.strip() or self.output_tail(2000)).strip()}")
        oom, code = fields[0] == "true", int(fields[1])
        if oom:
            self._note("memory", f"killed by the kernel: memory over the cap of {self.limits.memory_bytes >> 20} MiB")
        violation, vdetail = self._tripped()
        # With --init, a child killed by signal N makes the container exit with 128 + N.
        rc = -(code - 128) if 128 < code <= 128 + 64 else code
        self._result = classify(rc, self.limits, violation, vdetail, 0, False)
        return self._result
