"""The namespaced sandbox's launcher (standard library only; run by namespaces.py as the script
`python -I -S launcher.py SOCKET_FD`, as root, in the job folder). Over that socket (a
SOCK_SEQPACKET socketpair) the parent first sends the job (one JSON message: program, its
environment, the job folder, uid, ...) and gets back one report (JSON, with the fd of the
job's capped scratch folder when all went well).

Three processes, so that everything the job starts dies with it:
- the launcher (the sandbox's leader, seen by the parent) enters a new PID namespace for its
  children and waits for the first one, then exits the way the job's program did;
- init (pid 1 of that namespace, still root) leaves the host's mount and network namespaces,
  builds the job's view of the file system (below), starts the job's program, reports to the
  parent, and reaps every orphan until the program ends. Its exit makes the kernel
  kill whatever is left in the namespace (daemons included);
- the job's program: signals back to their defaults, the sandbox uid, no_new_privs,
  PR_SET_PDEATHSIG, the job folder as cwd, then exec.

The file system view: everything read-only (mount_setattr, recursively); one tmpfs capped at
`disk_bytes` (and a number of inodes) holds every writable place: fresh empty /tmp, /var/tmp,
/dev/shm and /var/run, /run itself, and the upper layer of an overlay mounted on the job
folder (so the job can write there, within the cap; the parent merges what it wrote back into
the real folder when it ends). Host folders the job needs that lie under those fresh ones (the
`keep` list: a checkout or virtualenv under /tmp) are bound back, read-only. Files the parent
has mapped (the GPU stage's arena) are
bind-mounted through the overlay, so both sides keep sharing one inode. Every file-system Unix
socket bound in the host's network namespace is covered by /dev/null, and a fresh /proc shows
only the job's processes.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, NoReturn

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SCRATCH = "/run/.kg"  # root-only: the overlay's upper and work dirs, and the fresh tmp folders
FRESH = {"/tmp": ("tmp", 0o1777), "/var/tmp": ("var-tmp", 0o1777), "/dev/shm": ("shm", 0o1777),
         "/var/run": ("var-run", 0o755)}
HIDDEN = ("/run", *FRESH)  # every host folder a job sees fresh (/run: the capped tmpfs itself)
INODES_PER_MIB = 16

libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)),
           f"mount {target}")


def read_only_everywhere() -> None:
    attr = _MountAttr(attr_set=MOUNT_ATTR_RDONLY)
    _check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
           "mount_setattr / read-only")


def host_unix_sockets() -> list[str]:
    """Paths of the file-system Unix sockets bound in this (the host's) network namespace."""
    with open("/proc/net/unix") as f:
        next(f)
        fields = [line.rstrip("\n").split(None, 7) for line in f]
    return sorted({row[7] for row in fields if len(row) == 8 and row[7].startswith("/")})


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def fresh_folders(disk_bytes: int) -> None:
    """The capped tmpfs on /run, and fresh empty folders of it over /tmp, /var/tmp, ..."""
    inodes = max(1024, disk_bytes // (1 << 20) * INODES_PER_MIB)
    mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_bytes},nr_inodes={inodes},mode=0755")
    os.mkdir(SCRATCH, 0o700)
    for sub in ("upper", "work"):
        os.mkdir(f"{SCRATCH}/{sub}", 0o700)
    for target, (name, mode) in FRESH.items():
        if os.path.isdir(target) and not os.path.islink(target):
            os.mkdir(f"{SCRATCH}/{name}")
            os.chmod(f"{SCRATCH}/{name}", mode)
            mount(f"{SCRATCH}/{name}", target, None, MS_BIND)


def open_kept(paths: list[str]) -> dict[str, int]:
    """O_PATH fds of the host folders to show again inside the fresh ones (opened while visible)."""
    return {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in paths}


def show_kept(kept: dict[str, int]) -> None:
    """Bind each kept host folder (read-only, as the whole view) back at its place inside the
    fresh /tmp & co.: a checkout or virtualenv under /tmp must stay importable."""
    for path, fd in kept.items():
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)


def mask_sockets(paths: list[str], cwd: str, kept: dict[str, int]) -> None:
    for path in paths:
        hidden = any(_under(path, folder) for folder in HIDDEN)
        if _under(path, cwd) or (hidden and not any(_under(path, k) for k in kept)):
            continue
        try:
            mount("/dev/null", path, None, MS_BIND)
        except FileNotFoundError:
            pass  # gone since it was listed


def job_folder(cwd: str, lower: int, shared: dict[str, int]) -> None:
    """The overlay on the job folder (`lower`: an fd of the real one), then the shared files."""
    os.makedirs(cwd, exist_ok=True)  # inside a fresh tmpfs when the job folder is under /tmp
    st = os.fstat(lower)
    os.chown(f"{SCRATCH}/upper", st.st_uid, st.st_gid)
    os.chmod(f"{SCRATCH}/upper", st.st_mode & 0o7777)
    mount("overlay", cwd, "overlay", MS_NOSUID | MS_NODEV,
          f"lowerdir=/proc/self/fd/{lower},upperdir={SCRATCH}/upper,workdir={SCRATCH}/work,"
          "redirect_dir=off,metacopy=off,index=off")
    for rel, fd in shared.items():
        target = os.path.join(cwd, rel)
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
        mount(None, target, None, MS_REMOUNT | MS_BIND)  # the bind copies the host mount's read-only flag


def build_view(config: dict[str, Any]) -> int:
    """Everything init does before starting the job: returns the fd of the capped scratch folder."""
    sockets = host_unix_sockets()  # before leaving the host's network namespace
    flags = CLONE_NEWNS | (CLONE_NEWNET if config["network"] else 0)
    _check(libc.unshare(flags), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    cwd = config["cwd"]
    lower = os.open(".", os.O_PATH | os.O_DIRECTORY)  # the launcher was started in the job folder
    shared = {rel: os.open(rel, os.O_PATH | os.O_NOFOLLOW, dir_fd=lower) for rel in config["shared"]}
    kept = open_kept(config.get("keep", []))
    read_only_everywhere()
    fresh_folders(config["disk_bytes"])
    show_kept(kept)
    mask_sockets(sockets, cwd, kept)
    job_folder(cwd, lower, shared)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return os.open(f"{SCRATCH}/upper", os.O_RDONLY | os.O_DIRECTORY)


def become_job(config: dict[str, Any], exec_error_fd: int) -> NoReturn:
    """In the job's process: drop everything, then exec; on failure write errno to exec_error_fd."""
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores or handles these; exec keeps ignores
        # As root: the job folder may sit below folders only the worker can traverse.
        os.chdir(config["cwd"])  # the overlay, not the real folder the launcher started in
        if config["uid"] is not None:
            os.setgroups([])
            os.setgid(config["gid"])
            os.setuid(config["uid"])
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after the uid change, which clears it
        if os.getppid() != 1:
            os._exit(1)
        execvpe(config["argv"], config["env"])
    except OSError as exc:
        os.write(exec_error_fd, str(exc.errno or 1).encode())
    os._exit(127)


def execvpe(argv: list[str], env: dict[str, str]) -> NoReturn:
    """os.execvpe without its imports (after the uid change, this interpreter's own library may
    be out of reach). `env` is the job's own: this interpreter's environment may hold more
    (e.g. the LC_CTYPE of its C locale coercion)."""
    if "/" in argv[0]:
        os.execve(argv[0], argv, env)
    error = OSError(2, "not found", argv[0])
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            os.execve(os.path.join(folder or ".", argv[0]), argv, env)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            error = exc
    raise error


def report(sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def fork_with_pipe(child: Callable[[int], NoReturn]) -> tuple[int, int]:
    """Fork: the child runs `child` with the write end of a fresh pipe; the parent gets the
    child's pid and the read end."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(write_fd)
    os.close(write_fd)
    return pid, read_fd


def init(config: dict[str, Any], sock: socket.socket, status_fd: int) -> NoReturn:
    """pid 1 of the job's namespace (its parent, the launcher, is outside: getppid() reads 0, so
    a launcher gone before the prctl goes unnoticed here; the parent's watchdog kills the session)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        scratch = build_view(config)
    except OSError as exc:
        report(sock, {"error": f"could not build the sandbox's file system view: {exc}"})
        os._exit(1)
    job, err_r = fork_with_pipe(lambda err_w: become_job(config, err_w))
    failed = os.read(err_r, 16)
    os.close(err_r)
    if failed:
        report(sock, {"exec_errno": int(failed)})
    else:
        report(sock, {"ok": True}, [scratch])
    sock.close()
    while True:
        pid, status = os.wait()
        if pid == job:
            break
    os.write(status_fd, str(status).encode())
    os._exit(0)


def exit_like(status: int) -> NoReturn:
    """End the launcher as the job's program ended (a signal is raised again on itself)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.set_inheritable(False)
    config = json.loads(sock.recv(1 << 22))
    try:
        _check(libc.unshare(CLONE_NEWPID), "unshare")
    except OSError as exc:
        report(sock, {"error": f"no PID namespace: {exc}"})
        os._exit(1)
    child, status_r = fork_with_pipe(lambda status_w: init(config, sock, status_w))
    sock.close()
    _, init_status = os.waitpid(child, 0)
    job_status = os.read(status_r, 32)
    exit_like(int(job_status) if job_status else init_status)


if __name__ == "__main__":
    main()
