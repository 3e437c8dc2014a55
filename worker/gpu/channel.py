"""Parent <-> sandboxed child transport: small JSON messages over a socket, bulk arrays in a
shared file-backed arena.

The parent owns the arena's layout: it writes inputs, names where outputs go, and reads them
back after the child answers. The child never reports a verdict or a time: it only runs what
it is asked to, so nothing it prints or sends can forge a result.
"""
from __future__ import annotations

import json
import mmap
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_HEADER = struct.Struct("!I")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
ALIGN = 256


class ChannelClosed(EOFError):
    """The other side went away (the child exited or crashed)."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        self.sock.sendall(_HEADER.pack(len(data)) + data)

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """Next message; TimeoutError after `timeout` seconds, ChannelClosed on EOF."""
        self.sock.settimeout(timeout)
        (length,) = _HEADER.unpack(self._read(_HEADER.size))
        if length > MAX_MESSAGE_BYTES:
            raise ChannelClosed(f"message of {length} bytes exceeds the protocol limit")
        message = json.loads(self._read(length))
        if not isinstance(message, dict):
            raise ChannelClosed("malformed message")
        return message

    def _read(self, n: int) -> bytes:
        chunks, remaining = [], n
        while remaining:
            try:
                chunk = self.sock.recv(remaining)
            except TimeoutError as exc:
                raise TimeoutError("no answer in time") from exc
            if not chunk:
                raise ChannelClosed("the other side closed the channel")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


@dataclass(frozen=True)
class ArrayRef:
    offset: int
    shape: tuple[int, ...]
    dtype: str = "float32"

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArrayRef:
        return cls(int(data["offset"]), tuple(int(s) for s in data["shape"]), str(data["dtype"]))


class Arena:
    """A fixed-size shared file mapped by both processes; the parent allocates inside it."""

    def __init__(self, path: Path, size: int, create: bool) -> None:
        self.path, self.size = path, size
        if create:
            with open(path, "wb") as fh:
                fh.truncate(size)  # sparse: pages exist only once written
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._next = 0

    def reset(self) -> None:
        self._next = 0

    def alloc(self, shape: tuple[int, ...], dtype: str = "float32") -> ArrayRef:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset = self._next
        if offset + nbytes > self.size:
            raise MemoryError(f"arena of {self.size} bytes cannot hold {nbytes} more")
        self._next = offset + -(-nbytes // ALIGN) * ALIGN
        return ArrayRef(offset, tuple(shape), dtype)

    def put(self, array: np.ndarray) -> ArrayRef:
        ref = self.alloc(array.shape, str(array.dtype))
        self.view(ref)[...] = array
        return ref

    def view(self, ref: ArrayRef) -> np.ndarray:
        count = int(np.prod(ref.shape, dtype=np.int64))
        return np.frombuffer(self._map, dtype=ref.dtype, count=count, offset=ref.offset).reshape(ref.shape)

    def put_all(self, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
        return {name: self.put(np.ascontiguousarray(a)).to_json() for name, a in arrays.items()}

    def put_stacked(self, sets: list[dict[str, np.ndarray]], names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """Each named array of every set, stacked along a new leading axis, written straight
        into the arena (np.stack first would copy tens of MB twice per timed request)."""
        refs = {}
        for name in names:
            first = sets[0][name]
            ref = self.alloc((len(sets), *first.shape), str(first.dtype))
            view = self.view(ref)
            for i, one in enumerate(sets):
                view[i] = one[name]
            refs[name] = ref.to_json()
        return refs

    def read_all(self, refs: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
        return {name: self.view(ArrayRef.from_json(r)).copy() for name, r in refs.items()}

    def close(self) -> None:
        self._map.close()
