"""Reading what a job wrote (standard library only). A job's folder is the submission's to fill:
whatever the grading parent reads back from it (an output, a tool's log, a built library) is
read here and nowhere else, so a name the job planted cannot make the parent, which runs as
root, read a file of the host for it.

`read_job_file(folder, rel, max_bytes)` opens `rel` strictly beneath `folder` without following
any link: with openat2(2) (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) where
the kernel has it, else one component at a time with O_NOFOLLOW, each folder opened from the
one before. Every component is opened with O_PATH, so nothing is opened for reading until the
file is known to be a plain one (that very inode is then reopened through /proc/self/fd): a
link, a folder, a FIFO, a socket or a device is refused, and so is a plain file with more than
one name (a hard link can name a file outside the folder).
Refusals raise `JobFileError` naming the path and why, in a sentence a student can act on.

Read after the job has ended where the stage allows: the checks are made on the file opened,
so a job still running can only make a read fail, but a hard link it removes between the open
and the check passes for a file of one name (protected_hardlinks, on by default, already keeps
a job from linking a file it could not write).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from pathlib import Path, PurePosixPath

# openat2's number, the same on both architectures the worker runs on (since Linux 5.6).
OPENAT2_SYSCALLS = {"x86_64": 437, "aarch64": 437}
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x02, 0x04, 0x08
PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class JobFileError(Exception):
    """A file of a job's folder that was not read: `rel` (the path asked for, or the part of it
    that was refused) and `reason` (why, in words)."""

    def __init__(self, rel: str, reason: str) -> None:
        super().__init__(f"{rel} was not read: {reason}")
        self.rel, self.reason = rel, reason


class JobFileMissing(JobFileError):
    """There is no file at the path asked for."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def read_job_file(folder: Path, rel: str, max_bytes: int, cut: bool = False) -> bytes:
    """The content of the plain file `rel` beneath the job's `folder`. A file over `max_bytes` is
    refused, or with `cut` its first `max_bytes` come back (a log whose head is enough). Raises
    JobFileMissing where there is none, JobFileError for anything else that is not read."""
    fd = _open_checked(folder, rel)
    try:
        data_fd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)  # the very inode checked
    finally:
        os.close(fd)
    try:
        data = _read_at_most(data_fd, max_bytes + 1)
    finally:
        os.close(data_fd)
    if len(data) > max_bytes:
        if not cut:
            raise JobFileError(rel, f"it holds more than {max_bytes} bytes, the most read back; write less")
        data = data[:max_bytes]
    return data


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes of `fd`, in chunks: memory follows the file's size, not the cap."""
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = os.read(fd, min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def is_job_file(folder: Path, rel: str) -> bool:
    """Whether `read_job_file` would open `rel` (a plain file of one name beneath `folder`)."""
    try:
        os.close(_open_checked(folder, rel))
    except JobFileError:
        return False
    return True


def _open_checked(folder: Path, rel: str) -> int:
    """An O_PATH fd of the plain file `rel` beneath `folder`, or JobFileError saying why not."""
    parts = PurePosixPath(rel).parts
    if not parts or parts[0] == "/" or ".." in parts:
        raise JobFileError(rel, "the path leads outside the job's folder")
    if "\0" in rel:
        raise JobFileError(rel.replace("\0", "\\0"), "the path holds a NUL character")
    root = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _openat2(root, rel)
        if fd is None:
            fd = _walk(root, parts)
    finally:
        os.close(root)
    try:
        _check_plain(os.fstat(fd), rel)
    except JobFileError:
        os.close(fd)
        raise
    return fd


def _openat2(root: int, rel: str) -> int | None:
    """`rel` opened by openat2 without crossing a link or leaving `root`; None where the kernel
    has no openat2 or the path crosses something to name precisely (the walk then does)."""
    number = OPENAT2_SYSCALLS.get(platform.machine())
    if number is None:
        return None
    how = _OpenHow(PATH_FLAGS, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(ctypes.c_long(number), ctypes.c_int(root), ctypes.c_char_p(os.fsencode(rel)),
                       ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        return int(fd)
    error = ctypes.get_errno()
    if error == errno.ENOENT:
        raise JobFileMissing(rel, "there is no such file")
    # ENOSYS: a kernel before 5.6; EPERM: a container's seccomp profile that predates openat2.
    # ELOOP, EXDEV, ENOTDIR: a link or a non-folder on the way, which the walk names.
    if error in (errno.ENOSYS, errno.EPERM, errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
        return None
    raise JobFileError(rel, os.strerror(error))


def _walk(root: int, parts: tuple[str, ...]) -> int:
    """`parts` opened one by one from `root` with O_NOFOLLOW (O_PATH: a link opens as itself);
    returns the last one's fd. Refuses a link anywhere and a non-folder on the way."""
    fd = os.dup(root)
    for depth, name in enumerate(parts):
        here = "/".join(parts[:depth + 1])
        try:
            next_fd = os.open(name, PATH_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            raise JobFileMissing("/".join(parts), "there is no such file") from None
        finally:
            os.close(fd)
        fd = next_fd
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            os.close(fd)
            raise JobFileError(here, f"{_kind(mode)}; write outputs as plain files in the job's folder")
        if depth < len(parts) - 1 and not stat.S_ISDIR(mode):
            os.close(fd)
            raise JobFileError(here, f"{_kind(mode)}, where a folder was expected")
    return fd


def _check_plain(info: os.stat_result, rel: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise JobFileError(rel, f"{_kind(info.st_mode)}; write outputs as plain files in the job's folder")
    if info.st_nlink != 1:
        raise JobFileError(rel, f"the file has {info.st_nlink} hard links (it may be a file from outside the "
                                "job's folder); write outputs as new plain files")


def _kind(mode: int) -> str:
    """What an entry is, in words."""
    kinds = ((stat.S_ISREG, "it is a plain file"), (stat.S_ISLNK, "it is a symbolic link"), (stat.S_ISDIR, "it is a folder"),
             (stat.S_ISFIFO, "it is a FIFO"), (stat.S_ISSOCK, "it is a socket"),
             (stat.S_ISCHR, "it is a character device"), (stat.S_ISBLK, "it is a block device"))
    return next((words for test, words in kinds if test(mode)), "it is not a plain file")
