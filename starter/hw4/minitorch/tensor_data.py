"""Strided tensor storage: a flat float32 numpy buffer plus shape and strides (in elements)."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

Shape = tuple[int, ...]
Strides = tuple[int, ...]


class IndexingError(RuntimeError):
    pass


def strides_from_shape(shape: Sequence[int]) -> Strides:
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= int(s)
    return tuple(reversed(strides))


def prod(shape: Iterable[int]) -> int:
    out = 1
    for s in shape:
        out *= int(s)
    return out


def shape_broadcast(a: Sequence[int], b: Sequence[int]) -> Shape:
    """Numpy-style broadcast of two shapes."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise IndexingError(f"cannot broadcast {tuple(a)} and {tuple(b)}")
    return tuple(out)


def broadcast_strides(shape: Sequence[int], strides: Sequence[int], out_shape: Sequence[int]) -> Strides:
    """Strides that read a tensor of `shape` as if it had `out_shape` (0 on broadcast dims)."""
    n = len(out_shape)
    pad = n - len(shape)
    if pad < 0:
        raise IndexingError(f"cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
    out = [0] * n
    for i, (s, st) in enumerate(zip(shape, strides)):
        o = out_shape[i + pad]
        if s == o:
            out[i + pad] = st if s != 1 else 0
        elif s == 1:
            out[i + pad] = 0
        else:
            raise IndexingError(f"cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
    return tuple(out)


class TensorData:
    """`_storage` is a 1-D float32 numpy array; element (i0, i1, ...) lives at sum(i_k * strides[k])."""

    def __init__(self, storage, shape: Sequence[int], strides: Sequence[int] | None = None):
        if not isinstance(storage, np.ndarray) or storage.dtype != np.float32 or storage.ndim != 1:
            storage = np.ascontiguousarray(np.asarray(storage, dtype=np.float32).reshape(-1))
        self._storage = storage
        self.shape: Shape = tuple(int(s) for s in shape)
        self.strides: Strides = (
            tuple(int(s) for s in strides) if strides is not None else strides_from_shape(self.shape)
        )
        if len(self.strides) != len(self.shape):
            raise IndexingError("shape and strides differ in length")
        self.size = prod(self.shape)
        self.dims = len(self.shape)

    def is_contiguous(self) -> bool:
        return self.strides == strides_from_shape(self.shape)

    def np_view(self) -> np.ndarray:
        """A read-only numpy view with this tensor's shape and strides (no copy)."""
        item = self._storage.itemsize
        v = np.lib.stride_tricks.as_strided(
            self._storage, shape=self.shape, strides=tuple(s * item for s in self.strides), writeable=False
        )
        return v

    def to_numpy(self) -> np.ndarray:
        return np.array(self.np_view(), dtype=np.float32, copy=True)

    def index(self, idx: Sequence[int]) -> int:
        if len(idx) != self.dims:
            raise IndexingError(f"index {tuple(idx)} for shape {self.shape}")
        pos = 0
        for i, s, st in zip(idx, self.shape, self.strides):
            if i < 0 or i >= s:
                raise IndexingError(f"index {tuple(idx)} out of range for shape {self.shape}")
            pos += i * st
        return pos

    def get(self, idx: Sequence[int]) -> float:
        return float(self._storage[self.index(idx)])

    def set(self, idx: Sequence[int], value: float) -> None:
        self._storage[self.index(idx)] = value

    def permute(self, *order: int) -> "TensorData":
        if sorted(order) != list(range(self.dims)):
            raise IndexingError(f"bad permutation {order} for {self.dims} dims")
        return TensorData(self._storage, [self.shape[o] for o in order], [self.strides[o] for o in order])

    def expand(self, shape: Sequence[int]) -> "TensorData":
        """Broadcast view to `shape` (stride 0 on broadcast dims); no copy."""
        return TensorData(self._storage, shape, broadcast_strides(self.shape, self.strides, shape))

    def __repr__(self) -> str:
        return f"TensorData(shape={self.shape}, strides={self.strides})"
