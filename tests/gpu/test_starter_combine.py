"""rubrics/hw4/starter_combine.cu (the trusted combine.so) through the official starter's C ABI.

The library is built with nvcc and the rubric's flags, loaded with ctypes, and called with
exactly the argtypes that the starter's minitorch/cuda_kernel_ops.py sets, on numpy inputs
laid out as MiniTorch lays out tensors (a flat float32 storage, int32 shape and strides in
elements). Every result is compared with a float64 numpy reference of operators.py.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from worker.build import Toolchain, cuda_include_dirs
from worker.rubric import load_rubric

pytestmark = pytest.mark.gpu

SOURCE = Path(__file__).resolve().parents[2] / "rubrics" / "hw4" / "starter_combine.cu"
GPU_ARCH = os.environ.get("KG_CUDA_ARCH", "native")

F32 = np.ctypeslib.ndpointer(dtype=np.float32, ndim=1, flags="C_CONTIGUOUS")
I32 = np.ctypeslib.ndpointer(dtype=np.int32, ndim=1, flags="C_CONTIGUOUS")
INT = ctypes.c_int
ARGTYPES = {  # as the official cuda_kernel_ops.py sets them
    "tensorMap": [F32, I32, I32, INT, F32, I32, I32, INT, INT, INT],
    "tensorZip": [F32, I32, I32, INT, INT, F32, I32, I32, INT, INT, F32, I32, I32, INT, INT, INT],
    "tensorReduce": [F32, I32, I32, INT, F32, I32, I32, INT, ctypes.c_double, INT, INT],
    "MatrixMultiply": [F32, I32, I32, F32, I32, I32, F32, I32, I32, INT, INT, INT],
}

EPS = 1e-6
UNARY = {  # fn id -> numpy reference (operators.py)
    3: lambda x: x,
    4: lambda x: -x,
    7: lambda x: 1.0 / (1.0 + np.exp(-x)),
    8: lambda x: np.where(x > 0, x, 0.0),
    10: lambda x: np.log(x + EPS),
    12: np.exp,
    13: lambda x: 1.0 / x,
    18: np.tanh,
}
BINARY = {
    1: lambda x, y: x + y,
    2: lambda x, y: x * y,
    5: lambda x, y: (x < y).astype(np.float64),
    6: lambda x, y: (x == y).astype(np.float64),
    9: lambda x, d: np.where(x > 0, d, 0.0),           # relu_back(x, d)
    11: lambda x, d: d / (x + EPS),                     # log_back(x, d)
    14: lambda x, d: -(1.0 / x**2) * d,                 # inv_back(x, d)
    15: lambda x, y: ((x - y < 1e-2) & (y - x < 1e-2)).astype(np.float64),
    16: np.maximum,
    17: np.power,
}
POSITIVE_ONLY = {10, 11, 13, 14, 17}  # log, inv and pow want x away from 0 (and x > 0)
REDUCERS = [(1, 0.0, np.sum), (2, 1.0, np.prod), (16, -1e9, np.max)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    rubric = load_rubric("hw4")
    toolchain = Toolchain(
        nvcc=os.environ.get("KG_NVCC", "nvcc"),
        flags=(*rubric.nvcc_flags, f"-arch={GPU_ARCH}"),
        include_dirs=cuda_include_dirs(),
    )
    so = tmp_path_factory.mktemp("starter_combine") / "combine.so"
    proc = subprocess.run(toolchain.command(SOURCE, so), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cdll = ctypes.CDLL(str(so))
    for name, argtypes in ARGTYPES.items():
        getattr(cdll, name).argtypes = argtypes
        getattr(cdll, name).restype = None
    return cdll


# ------------------------------------------------------------------ MiniTorch-like tensors


class View:
    """A numpy view as MiniTorch holds a tensor: its base's flat storage, shape, strides."""

    def __init__(self, arr: np.ndarray) -> None:
        base = arr
        while base.base is not None:
            base = base.base
        assert base.dtype == np.float32 and base.flags.c_contiguous
        self.value = arr.astype(np.float64)
        self.storage = base.reshape(-1)
        self.shape = np.array(arr.shape, dtype=np.int32)
        self.strides = np.array([s // 4 for s in arr.strides], dtype=np.int32)
        self.size = int(arr.size)
        self.ndim = arr.ndim


def f32(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr, dtype=np.float32)


def transposed(arr: np.ndarray) -> np.ndarray:
    """A non-contiguous float32 view equal to `arr`: the transpose of a contiguous base."""
    return f32(np.swapaxes(arr, -1, -2)).swapaxes(-1, -2)


def out_for(shape: tuple[int, ...]) -> View:
    return View(np.zeros(shape, dtype=np.float32))


def result(out: View) -> np.ndarray:
    return out.storage.reshape(tuple(out.shape)).astype(np.float64)


def call_map(lib, fn: int, a: View, out_shape: tuple[int, ...] | None = None) -> np.ndarray:
    out = out_for(tuple(a.shape) if out_shape is None else out_shape)
    lib.tensorMap(out.storage, out.shape, out.strides, out.size,
                  a.storage, a.shape, a.strides, a.size, a.ndim, fn)
    return result(out)


def call_zip(lib, fn: int, a: View, b: View) -> np.ndarray:
    out = out_for(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    lib.tensorZip(out.storage, out.shape, out.strides, out.size, out.ndim,
                  a.storage, a.shape, a.strides, a.size, a.ndim,
                  b.storage, b.shape, b.strides, b.size, b.ndim, fn)
    return result(out)


def call_reduce(lib, fn: int, start: float, a: View, dim: int) -> np.ndarray:
    shape = list(a.shape)
    shape[dim] = 1
    out = out_for(tuple(shape))
    lib.tensorReduce(out.storage, out.shape, out.strides, out.size,
                     a.storage, a.shape, a.strides, dim, start, a.ndim, fn)
    return result(out)


def call_matmul(lib, a: View, b: View) -> np.ndarray:
    out = out_for((max(int(a.shape[0]), int(b.shape[0])), int(a.shape[1]), int(b.shape[2])))
    lib.MatrixMultiply(out.storage, out.shape, out.strides, a.storage, a.shape, a.strides,
                       b.storage, b.shape, b.strides, int(a.shape[0]), int(a.shape[1]), int(b.shape[2]))
    return result(out)


def sample(rng: np.random.Generator, shape: tuple[int, ...], fn: int) -> np.ndarray:
    if fn in POSITIVE_ONLY:
        return rng.uniform(0.5, 2.0, shape)
    if fn in (5, 6, 15):  # comparisons: a small grid, so that ties and near-ties occur
        return rng.integers(-1, 2, shape) + rng.choice([0.0, 0.003, 0.03], shape)
    return rng.uniform(-3.0, 3.0, shape)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


# ------------------------------------------------------------------------------- map


@pytest.mark.parametrize("fn", sorted(UNARY))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_map(lib, fn: int, layout: str) -> None:
    rng = np.random.default_rng(fn)
    x = sample(rng, (2, 3, 4), fn)
    a = View(f32(x) if layout == "contiguous" else transposed(x))
    if layout == "transposed":
        assert list(a.strides) == [12, 1, 3]
    assert_close(call_map(lib, fn, a), UNARY[fn](a.value))


def test_map_into_a_larger_output_broadcasts(lib) -> None:
    """Tensor.expand: id_map of a [3, 4] tensor into a [2, 3, 4] buffer (shape_len is 2)."""
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    a = View(transposed(x))
    assert_close(call_map(lib, 3, a, out_shape=(2, 3, 4)), np.broadcast_to(x, (2, 3, 4)))


def test_map_and_zip_write_at_the_outputs_strides(lib) -> None:
    """A transposed out is written through its strides, not in ordinal order."""
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    a = View(f32(x))
    out_arr = transposed(np.zeros((3, 4)))
    out = View(out_arr)
    assert list(out.strides) == [1, 3]
    lib.tensorMap(out.storage, out.shape, out.strides, out.size,
                  a.storage, a.shape, a.strides, a.size, a.ndim, 4)
    assert_close(out_arr.astype(np.float64), -x)
    lib.tensorZip(out.storage, out.shape, out.strides, out.size, out.ndim,
                  a.storage, a.shape, a.strides, a.size, a.ndim,
                  a.storage, a.shape, a.strides, a.size, a.ndim, 1)
    assert_close(out_arr.astype(np.float64), 2 * x)


# ------------------------------------------------------------------------------- zip


@pytest.mark.parametrize("fn", sorted(BINARY))
def test_zip_broadcast(lib, fn: int) -> None:
    rng = np.random.default_rng(100 + fn)
    a = View(f32(sample(rng, (2, 1, 4), fn)))
    b = View(f32(sample(rng, (3, 4), fn if fn not in (11, 14) else 1)))
    want = BINARY[fn](a.value, b.value)
    got = call_zip(lib, fn, a, b)
    assert got.shape == (2, 3, 4)
    assert_close(got, want)


@pytest.mark.parametrize("fn", sorted(BINARY))
def test_zip_non_contiguous(lib, fn: int) -> None:
    rng = np.random.default_rng(200 + fn)
    a = View(transposed(sample(rng, (3, 4), fn)))          # [3, 4] with strides (1, 3)
    b = View(transposed(sample(rng, (2, 3, 4), fn if fn not in (11, 14) else 1)))
    assert list(a.strides) == [1, 3]
    assert_close(call_zip(lib, fn, a, b), BINARY[fn](a.value, b.value))


def test_zip_comparisons_see_ties() -> None:
    """The comparison inputs really contain equal and near-equal pairs (the tests can fail)."""
    rng = np.random.default_rng(106)
    x, y = sample(rng, (2, 1, 4), 6), sample(rng, (3, 4), 6)
    eq = BINARY[6](x, y)
    assert 0 < eq.sum() < eq.size


# ---------------------------------------------------------------------------- reduce


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
@pytest.mark.parametrize("fn,start,ref", REDUCERS, ids=["add", "mul", "max"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_reduce(lib, dim: int, fn: int, start: float, ref, layout: str) -> None:
    rng = np.random.default_rng(10 * fn + dim)
    x = rng.uniform(0.5, 1.5, (2, 3, 4, 5)) * rng.choice([-1.0, 1.0], (2, 3, 4, 5))
    a = View(f32(x) if layout == "contiguous" else transposed(x))
    want = ref(np.concatenate([np.full((2, 3, 4, 5)[:dim] + (1,) + (2, 3, 4, 5)[dim + 1:], start),
                               a.value], axis=dim), axis=dim, keepdims=True)
    assert_close(call_reduce(lib, fn, start, a, dim), want)


def test_reduce_starts_from_reduce_value(lib) -> None:
    """reduce_value is a C double and the fold starts from it (not from 0 or the first item)."""
    a = View(f32(np.ones((2, 3))))
    assert_close(call_reduce(lib, 1, 2.5, a, 1), np.full((2, 1), 5.5))
    assert_close(call_reduce(lib, 16, 7.0, a, 0), np.full((1, 3), 7.0))


# ---------------------------------------------------------------------------- matmul


@pytest.mark.parametrize("a_batch,b_batch", [(3, 3), (3, 1), (1, 3)])
@pytest.mark.parametrize("layout", ["contiguous", "b_transposed"])
def test_matmul(lib, a_batch: int, b_batch: int, layout: str) -> None:
    rng = np.random.default_rng(a_batch * 10 + b_batch)
    m, n, p = 37, 70, 33  # crosses 32-wide tiles in every dim
    a = View(f32(rng.standard_normal((a_batch, m, n))))
    y = rng.standard_normal((b_batch, n, p))
    b = View(f32(y) if layout == "contiguous" else transposed(y))
    assert_close(call_matmul(lib, a, b), np.matmul(a.value, b.value))


# ---------------------------------------------------------------------------- errors


def test_wrong_operator_exits_1_with_message(lib) -> None:
    so = lib._name
    code = textwrap.dedent(f"""
        import ctypes, numpy as np
        lib = ctypes.CDLL({so!r})
        f = np.zeros(4, dtype=np.float32); s = np.array([4], dtype=np.int32)
        st = np.array([1], dtype=np.int32)
        lib.tensorMap(f.ctypes.data_as(ctypes.c_void_p), s.ctypes.data_as(ctypes.c_void_p),
                      st.ctypes.data_as(ctypes.c_void_p), 4, f.ctypes.data_as(ctypes.c_void_p),
                      s.ctypes.data_as(ctypes.c_void_p), st.ctypes.data_as(ctypes.c_void_p),
                      4, 1, 1)
        print("returned")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "tensorMap" in proc.stderr and "unary" in proc.stderr
    assert "returned" not in proc.stdout
