"""Carrying a namespaced job's writes back: the job wrote into the upper layer of an overlay on
its folder (in its capped tmpfs, see launcher.py); once it has ended, `merge_back` applies that
layer to the real job folder, so callers find its folders and plain files there as if written
in place. Only those: a symbolic link, FIFO, socket or device the job made is dropped, so
nothing in the folder points outside it once merged (the parent still reads it only through
worker/job_files.py)."""
from __future__ import annotations

import os
import shutil
import stat
from collections import Counter
from pathlib import Path

OPAQUE_XATTR = "trusted.overlay.opaque"


def _remove(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except IsADirectoryError:
        shutil.rmtree(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _open_dir(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def _is_opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, OPAQUE_XATTR) == b"y"
    except OSError:
        return False


def merge_back(upper: int, cwd: Path, ids: tuple[int, int] | None) -> Counter[str]:
    """Apply what the job wrote (the overlay's upper layer, fd `upper`) to the real job folder,
    so the parent finds it there as if the job had written in place: folders made, plain files
    copied (as new files of one name), whiteouts (char device 0:0) and opaque folders' old
    content deleted. A link, FIFO, socket or device the job made is dropped, and so is what its
    name held in the real folder; returns how many of each kind were dropped. Runs after every
    process of the job is gone; all through directory fds without following links (the content
    is the job's). Iterative: the job may nest folders deeper than Python's recursion limit."""
    dropped: Counter[str] = Counter()
    todo = [(upper, os.open(cwd, os.O_RDONLY | os.O_DIRECTORY))]
    while todo:
        src, dst = todo.pop()
        try:
            for entry in os.scandir(src):
                pair = _merge_entry(src, dst, entry, ids, dropped)
                if pair is not None:
                    todo.append(pair)
        finally:
            os.close(src)
            os.close(dst)
    return dropped


def _merge_entry(src: int, dst: int, entry: os.DirEntry[str], ids: tuple[int, int] | None,
                 dropped: Counter[str]) -> tuple[int, int] | None:
    """One entry of `merge_back`; returns the (source, destination) folder fds to descend into."""
    name, st = entry.name, entry.stat(follow_symlinks=False)
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        _remove(dst, name)
        return None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        _remove(dst, name)  # the job replaced it: its link or device is not carried over
        dropped[_kind(st.st_mode)] += 1
        return None
    descend = None
    if stat.S_ISDIR(st.st_mode):
        try:
            os.mkdir(name, 0o700, dir_fd=dst)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=dst, follow_symlinks=False).st_mode):
                _remove(dst, name)
                os.mkdir(name, 0o700, dir_fd=dst)
        descend = (_open_dir(name, src), _open_dir(name, dst))
        os.fchmod(descend[1], st.st_mode & 0o777)
        if _is_opaque(descend[0]):  # the job replaced a folder of the real one
            for old in os.listdir(descend[1]):
                _remove(descend[1], old)
    else:
        _remove(dst, name)
        fd_in = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=src)
        fd_out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst)
        with os.fdopen(fd_in, "rb") as fin, os.fdopen(fd_out, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            os.fchmod(fout.fileno(), st.st_mode & 0o777)
    if ids is not None:
        os.chown(name, *ids, dir_fd=dst, follow_symlinks=False)
    return descend


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"))
    return next((words for test, words in kinds if test(mode)), "device")
