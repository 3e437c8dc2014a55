"""The namespaced sandbox's launcher (standard library only; run by namespaces.py as the script
`python -I -S launcher.py SOCKET_FD`, as root, in the job folder). Over that socket (a
SOCK_SEQPACKET socketpair) the parent first sends the job (one JSON message: program, its
environment, the job folder, uid, the view of view.py, ...) and gets back one report (JSON, with
the fd of the job's capped scratch folder when all went well).

Three processes, so that everything the job starts dies with it:
- the launcher (the sandbox's leader, seen by the parent) enters a new PID namespace for its
  children and waits for the first one, then exits the way the job's program did;
- init (pid 1 of that namespace, still root) leaves the host's mount, network, UTS (host
  name), IPC (System V objects and POSIX message queues) and cgroup namespaces, takes a session
  keyring of its own (the worker's keys are not the job's to list), caps the job's
  System V shared memory and message queues, builds the job's root (below), starts the job's
  program, reports to the parent, and until the program ends reaps every orphan and answers
  the syscall filter's refusals (EPERM, each counted). Its exit makes the kernel kill whatever
  is left in the namespace (daemons included), and with the last process the IPC namespace
  and every object in it go; its last message to the parent is the count of refused calls;
- the job's program: signals back to their defaults, the sandbox uid, no_new_privs,
  PR_SET_PDEATHSIG, the job folder as cwd, the syscall filter (syscall_filter.py, built by the
  parent; its listener handed to init), then exec.

The job's root is a fresh tmpfs, read-only once built, holding only what the parent's allow-list
(view.py) names: those host paths bound read-only at their own places, a fresh /etc, the allowed
/dev entries, a fresh /proc that shows only the job's processes. One more tmpfs, capped at
`disk_bytes` (and a number of inodes), holds every writable place: /run itself, fresh empty /tmp,
/var/tmp and /dev/shm, and the upper layer of an overlay mounted on the job folder (so the job
can write there, within the cap; the parent merges what it wrote back into the real folder when
it ends). A third, small one at /kg-tmp is the grader's own (limits.GRADER_TMP), so a
submission that fills its scratch space cannot break the grader's temporary files. Files the parent has mapped (the GPU stage's arena) are bind-mounted through the
overlay, so both sides keep sharing one inode. Then the launcher pivots into that root and lets
go of the host's: nothing outside the allow-list can be named, by any path.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import platform
import select
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, NoReturn

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x04000000, 0x20000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWCGROUP = 0x08000000, 0x02000000
JOB_HOST_NAME = b"kernelgrade-job"  # what the job's uname says, not the host's name
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING = {"x86_64": 250, "aarch64": 219}, 1
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 8
NOTIF_RECV, NOTIF_SEND = 0xC0502100, 0xC0182101  # SECCOMP_IOCTL_NOTIF_*: struct seccomp_notif is 80 bytes
NOTIF_SIZE, EPERM = 80, 1
MSG_QUEUES = 16  # System V message queues a job may hold (the host's default is 32000)
ORPHAN_REAP_MS = 200  # init reaps orphans at least this often (the program's end wakes it at once)
NEW_ROOT = "/run"  # where the fresh root is assembled before the pivot (any host folder would do)
SCRATCH = "/run/.kg"  # in the job's root, root-only: the overlay's upper and work dirs
FRESH = {"/tmp": ("tmp", 0o1777), "/var/tmp": ("var-tmp", 0o1777), "/dev/shm": ("shm", 0o1777)}
INODES_PER_MIB = 16
ROOT_TMPFS = "size=16m,nr_inodes=4096,mode=0755"  # the skeleton: folders, mount points, /etc
GRADER_TMP, GRADER_TMP_BYTES = "/kg-tmp", 256 << 20  # as worker.sandbox.limits (this script imports nothing)

libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    """`result` of a C call that answers -1 (errno set) on failure: raised as OSError."""
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)),
           f"mount {target}")


def read_only(target: str, recursive: bool) -> None:
    attr = _MountAttr(attr_set=MOUNT_ATTR_RDONLY)
    _check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, target.encode(), AT_RECURSIVE if recursive else 0,
                        ctypes.byref(attr), ctypes.sizeof(attr)), f"mount_setattr {target} read-only")


def host_unix_sockets() -> list[str]:
    """Paths of the file-system Unix sockets bound in this (the host's) network namespace."""
    with open("/proc/net/unix") as f:
        next(f)
        fields = [line.rstrip("\n").split(None, 7) for line in f]
    return sorted({row[7] for row in fields if len(row) == 8 and row[7].startswith("/")})


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _place(root: str, path: str, folder: bool) -> str:
    """Make `path` exist inside `root` (a folder, or an empty file to bind a file onto)."""
    target = root + path
    if folder:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    return target


def bind_read_only(root: str, path: str, fd: int) -> None:
    target = _place(root, path, os.path.isdir(f"/proc/self/fd/{fd}"))
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    read_only(target, recursive=True)


def skeleton(root: str, view: dict[str, Any]) -> None:
    """The root's own files: the fresh /etc, the /dev entries, symlinks, mount points."""
    mount("tmpfs", root, "tmpfs", MS_NOSUID, ROOT_TMPFS)
    os.makedirs(f"{root}/etc")
    for name, content in view["etc"].items():
        with open(f"{root}/etc/{name}", "w") as f:
            f.write(content)
    for device in view["devices"]:
        bind_read_only(root, device, os.open(device, os.O_PATH))
    os.makedirs(f"{root}/dev", exist_ok=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for path, target in view["links"].items():
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.symlink(target, root + path)
    for folder in ("/proc", "/run", GRADER_TMP, *FRESH):
        os.makedirs(root + folder, exist_ok=True)
    os.symlink("/run", f"{root}/var/run")


def fresh_folders(root: str, disk_bytes: int) -> None:
    """The capped tmpfs on the root's /run, and fresh empty folders of it on /tmp, /var/tmp, ..."""
    inodes = max(1024, disk_bytes // (1 << 20) * INODES_PER_MIB)
    run = root + "/run"
    mount("tmpfs", run, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_bytes},nr_inodes={inodes},mode=0755")
    scratch = root + SCRATCH
    os.mkdir(scratch, 0o700)
    for sub in ("upper", "work"):
        os.mkdir(f"{scratch}/{sub}", 0o700)
    for target, (name, mode) in FRESH.items():
        os.mkdir(f"{scratch}/{name}")
        os.chmod(f"{scratch}/{name}", mode)
        mount(f"{scratch}/{name}", root + target, None, MS_BIND)


def mask_sockets(root: str, paths: list[str], binds: list[str]) -> None:
    """Cover every host Unix socket that lies in a bound folder (the rest are not in the root)."""
    for path in paths:
        if any(_under(path, b) for b in binds) and os.path.exists(root + path):
            mount("/dev/null", root + path, None, MS_BIND)


def job_folder(root: str, cwd: str, lower: int, shared: dict[str, int]) -> None:
    """The overlay on the job folder (`lower`: an fd of the real one), then the shared files."""
    target = root + cwd
    os.makedirs(target, exist_ok=True)
    st = os.fstat(lower)
    upper = root + SCRATCH + "/upper"
    os.chown(upper, st.st_uid, st.st_gid)
    os.chmod(upper, st.st_mode & 0o7777)
    mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV,
          f"lowerdir=/proc/self/fd/{lower},upperdir={upper},workdir={root}{SCRATCH}/work,"
          "redirect_dir=off,metacopy=off,index=off")
    for rel, fd in shared.items():
        inside = os.path.join(target, rel)
        mount(f"/proc/self/fd/{fd}", inside, None, MS_BIND)  # writable: both sides write the arena


def pivot(root: str) -> None:
    """Make `root` the job's / and let go of the host's (pivot_root with both at one place)."""
    os.chdir(root)
    _check(libc.syscall(SYS_PIVOT_ROOT[platform.machine()], b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount the host's root")
    os.chdir("/")


def cap_ipc(disk_bytes: int, proc: str) -> None:
    """Limits of the job's own IPC namespace (its sysctls are the namespace's, not the host's),
    through the job's fresh `proc`: System V shared memory is memory like /dev/shm, so within the
    same cap; few message queues."""
    limits = {"shmmax": disk_bytes, "shmall": disk_bytes // os.sysconf("SC_PAGE_SIZE"), "msgmni": MSG_QUEUES}
    for name, value in limits.items():
        with open(f"{proc}/sys/kernel/{name}", "w") as f:
            f.write(str(value))


def build_view(config: dict[str, Any]) -> int:
    """Everything init does before starting the job: returns the fd of the capped scratch folder."""
    sockets = host_unix_sockets()  # before leaving the host's network namespace
    flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP | (CLONE_NEWNET if config["network"] else 0)
    _check(libc.unshare(flags), "unshare")
    _check(libc.sethostname(JOB_HOST_NAME, len(JOB_HOST_NAME)), "sethostname")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    cwd, view = config["cwd"], config["view"]
    lower = os.open(".", os.O_PATH | os.O_DIRECTORY)  # the launcher was started in the job folder
    shared = {rel: os.open(rel, os.O_PATH | os.O_NOFOLLOW, dir_fd=lower) for rel in config["shared"]}
    sources = {path: os.open(path, os.O_PATH) for path in view["binds"]}  # before NEW_ROOT covers anything
    skeleton(NEW_ROOT, view)
    fresh_folders(NEW_ROOT, config["disk_bytes"])
    for path, fd in sorted(sources.items()):  # parents first; those under /tmp land in its fresh folder
        bind_read_only(NEW_ROOT, path, fd)
    mask_sockets(NEW_ROOT, sockets, view["binds"])
    job_folder(NEW_ROOT, cwd, lower, shared)
    read_only(NEW_ROOT, recursive=False)  # the skeleton; /run, /tmp & co. and the job folder stay writable
    mount("tmpfs", NEW_ROOT + GRADER_TMP, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={GRADER_TMP_BYTES},nr_inodes=1024,mode=1777")
    mount("proc", f"{NEW_ROOT}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    cap_ipc(config["disk_bytes"], f"{NEW_ROOT}/proc")  # its own proc: a container's /proc/sys is read-only
    scratch = os.open(f"{NEW_ROOT}{SCRATCH}/upper", os.O_RDONLY | os.O_DIRECTORY)
    pivot(NEW_ROOT)
    return scratch


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install_filter(program: bytes, to_init: socket.socket) -> None:
    """The syscall filter on this process (and all it execs and starts); its listener, where
    refused calls wait for an answer, goes to init."""
    prog = _SockFprog(len(program) // 8, program)
    listener = _check(libc.syscall(SYS_SECCOMP[platform.machine()], SECCOMP_SET_MODE_FILTER,
                                   SECCOMP_FILTER_FLAG_NEW_LISTENER, ctypes.byref(prog)), "install the syscall filter")
    socket.send_fds(to_init, [b"listener"], [listener])
    os.close(listener)


def become_job(config: dict[str, Any], exec_error_fd: int, to_init: socket.socket) -> NoReturn:
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
        try:
            install_filter(bytes.fromhex(config["syscall_filter"]), to_init)
        except OSError as exc:
            os.write(exec_error_fd, f"F{exc.errno or 1}".encode())
            os._exit(127)
        to_init.close()
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


def answer_refusal(listener: int, refused: dict[int, int]) -> None:
    """Answer one call the filter refused with EPERM, and count it by syscall number."""
    notif = bytearray(NOTIF_SIZE)
    try:
        fcntl.ioctl(listener, NOTIF_RECV, notif)
    except OSError:
        return  # the caller is gone, or was interrupted: nothing to answer
    call_id, _pid, _flags, number = struct.unpack_from("=QIIi", notif)  # struct seccomp_notif, then its data's nr
    refused[number] = refused.get(number, 0) + 1
    try:
        fcntl.ioctl(listener, NOTIF_SEND, struct.pack("=QqiI", call_id, 0, -EPERM, 0))
    except OSError:
        pass  # the caller died meanwhile


def supervise(job: int, listener: int | None) -> tuple[int, dict[int, int]]:
    """Until the job's program ends: answer the filter's refusals, reap every orphan. Returns
    the program's wait status and the refused calls' counts."""
    refused: dict[int, int] = {}
    poller = select.poll()
    poller.register(os.pidfd_open(job), select.POLLIN)  # readable once the program has ended
    if listener is not None:
        poller.register(listener, select.POLLIN)
    while True:
        for fd, events in poller.poll(ORPHAN_REAP_MS):
            if fd != listener:
                continue
            if events & select.POLLIN:
                answer_refusal(listener, refused)
            elif events & (select.POLLHUP | select.POLLERR):
                poller.unregister(listener)  # nothing under the filter is left
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == job:
                return status, refused
            if pid == 0:
                break


def init(config: dict[str, Any], sock: socket.socket, status_fd: int) -> NoReturn:
    """pid 1 of the job's namespace (its parent, the launcher, is outside: getppid() reads 0, so
    a launcher gone before the prctl goes unnoticed here; the parent's watchdog kills the session)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        # A fresh, empty session keyring: the worker's own would show in the job's /proc/keys
        _check(libc.syscall(SYS_KEYCTL[platform.machine()], KEYCTL_JOIN_SESSION_KEYRING, None),
               "join a session keyring of its own")
        scratch = build_view(config)
    except OSError as exc:
        report(sock, {"error": f"could not build the job's sandbox: {exc}"})
        os._exit(1)
    to_job, to_init = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job, err_r = fork_with_pipe(lambda err_w: become_job(config, err_w, to_init))
    to_init.close()
    _, listeners, _, _ = socket.recv_fds(to_job, 16, 1)  # none when the job failed before its filter
    to_job.close()
    failed = os.read(err_r, 16)
    os.close(err_r)
    if failed.startswith(b"F"):
        report(sock, {"error": f"could not install the syscall filter: {os.strerror(int(failed[1:]))}"})
    elif failed:
        report(sock, {"exec_errno": int(failed)})
    else:
        report(sock, {"ok": True}, [scratch])
    status, refused = supervise(job, listeners[0] if listeners else None)
    try:
        report(sock, {"refused": refused})
    except OSError:
        pass  # the parent stopped listening (the namespace probe does)
    sock.close()
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
    os.umask(0o022)  # the root's folders and /etc files are the job's to read, whatever the worker's umask
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.set_inheritable(False)
    config = json.loads(sock.recv(1 << 22))
    try:
        for procs in config["cgroups"]:  # before anything of the job starts: all of it is inside
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
    except OSError as exc:
        report(sock, {"error": f"could not join the job's control group: {exc}"})
        os._exit(1)
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
