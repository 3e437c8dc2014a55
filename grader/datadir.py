"""The data dir (KG_DATA_DIR) is the service's alone: every folder in it is 0700 and every file
0600, owned by the service user, so neither the sandbox user nor any other account of the host
reads a database, an upload, a build log or a key (issue 36: a deployment's 0644 database and
0755 blob folders lay open to every submission's build).

Two layers, on purpose:
- an explicit mode wherever our code creates something (`private_dir`, `private_file`; blobs,
  reports and cache entries are `mkstemp` files, 0600 by themselves), and what a library made
  for us is closed after it (`tighten`: git's clone of a similarity base): it holds whoever
  calls, a test, a process started by another command line, a library user, the worker;
- the process umask 077, set by the `grader` command for every command (`restrict_umask`):
  serve, reconcile, migrate, dev's web app and reconciler, the CLI. It covers what libraries
  create for us and whose modes we do not choose (SQLite's journal, kombu's SQLite broker).
  Not the Celery worker (grader/runs/worker_start.py sets its umask to 022): the sandbox
  launcher builds each child's view (a fresh /etc, its mount points) with the process umask,
  and that view must be readable by the sandbox user; the worker's files in the data dir rely
  on the first layer.
`tighten` also removes group and other access from what an older version left (`grader migrate`).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


def restrict_umask() -> None:
    """Files and folders this process creates are its user's alone (0600 / 0700) unless a
    caller asks for more. Called by the service's entry points only: never on import."""
    os.umask(PRIVATE_UMASK)


def _tighten_one(path: Path) -> bool:
    """Remove group/other bits from `path` (not followed if a link) when this process's user owns
    it; True when it changed. Someone else's file (a job folder handed to the sandbox user) is
    left alone."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or not st.st_mode & 0o077:
        return False
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
    return True


def _make_missing(folder: Path) -> None:
    """`folder` and its missing parents made 0700 (whatever the umask); existing ones untouched."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            os.mkdir(made, 0o700)
        except FileExistsError:  # made meanwhile by another thread or process
            pass


def private_dir(path: Path) -> Path:
    """`path` as a folder of the data dir, made with any missing parents 0700; an existing
    `path` of ours loses group/other access (never a parent: the data dir may sit in /var/lib)."""
    _make_missing(Path(path))
    _tighten_one(Path(path))
    return Path(path)


def private_file(path: Path) -> Path:
    """`path` created empty 0600 if missing (e.g. a SQLite database before its first connection:
    SQLite gives its -wal, -shm and journal files the database's own mode), or, if it exists and
    is ours, without group/other access."""
    _make_missing(Path(path).parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        _tighten_one(Path(path))
    return Path(path)


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` readable by its owner only, from the first byte (a secret such as
    first passwords): created 0600, or truncated after losing group/other access."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode) & ~0o077)
        fh.write(text)
    return Path(path)


def tighten(root: Path, within_only: tuple[Path, ...] = ()) -> list[Path]:
    """Every folder and file under `root` (and `root`) that this user owns, without group/other
    access; the paths that had it. Links are not followed. Of the folders `within_only` (the job
    folders' parent: jobs in progress are the sandbox's, and removed when they end) only the
    folder itself is changed, not what it holds."""
    if not Path(root).is_dir():
        return []
    changed = [Path(root)] if _tighten_one(Path(root)) else []
    kept = {Path(p).absolute() for p in within_only}
    for folder, dirs, files in os.walk(root, followlinks=False):
        if Path(folder).absolute() in kept:
            dirs[:] = []
            continue
        for name in (*dirs, *files):
            path = Path(folder) / name
            try:
                if _tighten_one(path):
                    changed.append(path)
            except FileNotFoundError:  # removed meanwhile (a job folder, a temp file)
                continue
    return changed
