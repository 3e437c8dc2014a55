"""Content-addressed blob store: files named by their sha256, written atomically, streamed.

Layout: <root>/ab/cd/abcdef... . A write goes to a temp file in <root>/tmp, is fsynced,
then renamed into place (and the folder fsynced), so a blob either exists whole or not at all.
A write that fails leaves no temp file behind. Every folder is 0700 and every blob 0600
(grader.datadir): uploads are the service's alone.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from grader.datadir import private_dir

_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")  # \Z: `$` would accept a trailing newline


def is_digest(name: str) -> bool:
    """Whether `name` is a blob's name (a lower-case sha256 hex digest)."""
    return _SHA256.match(name) is not None


class BlobTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"upload exceeds the size limit of {limit} bytes")
        self.limit = limit


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp_dir = root / "tmp"

    def path(self, sha256: str) -> Path:
        if not _SHA256.match(sha256):
            raise ValueError(f"not a sha256 digest: {sha256!r}")
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def remove(self, sha256: str) -> None:
        """Delete a blob. Only for one no submission refers to, under `lock(sha256, exclusive=True)`."""
        self.path(sha256).unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self, sha256: str, exclusive: bool = False) -> Iterator[None]:
        """An advisory lock on one digest between the threads and processes of this host: flock
        on the blob's shard folder (created if missing), so it needs no file of its own.
        Uploads hold it shared from moving a blob into place until the rows that refer to it
        are committed; removing an unreferenced blob holds it exclusively."""
        folder = private_dir(self.path(sha256).parent)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # releases the lock

    def writer(self, max_bytes: int | None = None) -> BlobWriter:
        """A streaming writer; use as a context manager so an unfinished blob is discarded."""
        return BlobWriter(self, max_bytes)

    def put_chunks(self, chunks: Iterable[bytes], max_bytes: int | None = None) -> StoredBlob:
        with self.writer(max_bytes) as writer:
            for chunk in chunks:
                writer.write(chunk)
            return writer.commit()

    def put_bytes(self, data: bytes) -> StoredBlob:
        return self.put_chunks([data])


class BlobWriter:
    """Streams into a temp file while hashing; `commit` moves it to its content address."""

    def __init__(self, store: BlobStore, max_bytes: int | None) -> None:
        private_dir(store.tmp_dir)
        self._store = store
        self._max = max_bytes
        fd, name = tempfile.mkstemp(dir=store.tmp_dir, prefix="upload-")
        self._file = os.fdopen(fd, "wb")
        self._tmp_path: Path | None = Path(name)  # None once committed
        self._hash = hashlib.sha256()
        self._size = 0

    @property
    def sha256(self) -> str:
        """The digest of the bytes written so far."""
        return self._hash.hexdigest()

    @property
    def size(self) -> int:
        return self._size

    def write(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._max is not None and self._size > self._max:
            raise BlobTooLarge(self._max)
        self._hash.update(chunk)
        self._file.write(chunk)

    def commit(self) -> StoredBlob:
        assert self._tmp_path is not None, "committed twice"
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        dest = self._store.path(self.sha256)
        private_dir(dest.parent)
        os.replace(self._tmp_path, dest)  # mkstemp's file: 0600  # same content -> same name: replacing is harmless
        self._tmp_path = None
        _fsync_dir(dest.parent)
        return StoredBlob(dest.name, self._size)

    def discard(self) -> None:
        """Drop an uncommitted temp file (a no-op after `commit`), even when closing it fails:
        on a full disk, closing flushes the buffered bytes and fails again."""
        with contextlib.suppress(OSError):
            self._file.close()
        if self._tmp_path is not None:
            self._tmp_path.unlink(missing_ok=True)
            self._tmp_path = None

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
