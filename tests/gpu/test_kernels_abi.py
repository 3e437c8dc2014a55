"""The reference kit's softmax and LayerNorm kernels through their C ABI (host pointers,
ctypes), against float64 references on course-like and hidden shapes (kit_checks.py).

The .so files come from the `kit_root` fixture (starter/hw4 built with nvcc). Setting
KG_KIT_SO_DIR to a folder holding softmax_kernel.so and layernorm_kernel.so uses those
instead (for checking single kernels without building the whole kit).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import kit_checks as kc  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def so_dir(request: pytest.FixtureRequest) -> Path:
    override = os.environ.get("KG_KIT_SO_DIR")
    if override:
        return Path(override)
    kit_root: Path = request.getfixturevalue("kit_root")
    return kit_root / "minitorch" / "cuda_kernels"


@pytest.fixture(scope="module")
def softmax_lib(so_dir: Path):
    return kc.load_softmax_lib(so_dir / "softmax_kernel.so")


@pytest.fixture(scope="module")
def layernorm_lib(so_dir: Path):
    return kc.load_layernorm_lib(so_dir / "layernorm_kernel.so")


def _rng(case_id: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(case_id.encode()))


def _ids(cases):
    return [c.id for c in cases]


@pytest.mark.parametrize("case", kc.SOFTMAX_FW_CASES, ids=_ids(kc.SOFTMAX_FW_CASES))
def test_softmax_fw(softmax_lib, case: kc.Case) -> None:
    result = case.run(softmax_lib, _rng(case.id))
    assert result.ok, result.describe()


@pytest.mark.parametrize("case", kc.SOFTMAX_BW_CASES, ids=_ids(kc.SOFTMAX_BW_CASES))
def test_softmax_bw(softmax_lib, case: kc.Case) -> None:
    result = case.run(softmax_lib, _rng(case.id))
    assert result.ok, result.describe()


@pytest.mark.parametrize("case", kc.LAYERNORM_FW_CASES, ids=_ids(kc.LAYERNORM_FW_CASES))
def test_layernorm_fw(layernorm_lib, case: kc.Case) -> None:
    result = case.run(layernorm_lib, _rng(case.id))
    assert result.ok, result.describe()


@pytest.mark.parametrize("case", kc.LAYERNORM_BW_CASES, ids=_ids(kc.LAYERNORM_BW_CASES))
def test_layernorm_bw(layernorm_lib, case: kc.Case) -> None:
    result = case.run(layernorm_lib, _rng(case.id))
    assert result.ok, result.describe()


def test_repeatable_bitwise(softmax_lib, layernorm_lib) -> None:
    """Same inputs twice give identical bits (a race would show up as a moving result)."""
    rng = np.random.default_rng(7)
    inp = rng.standard_normal((2, 8, 300, 300)).astype(np.float32)
    mask = kc.make_mask(rng, 2, 300, "pad")
    outs = []
    for _ in range(2):
        x = inp.copy()
        softmax_lib.launch_attn_softmax(x.ctypes.data, mask.ctypes.data, 2, 8, 300, 300, True, None)
        outs.append(x)
    assert np.array_equal(outs[0], outs[1])

    rows, hidden = 777, 1024
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    dy = rng.standard_normal((rows, hidden)).astype(np.float32)
    gamma = rng.standard_normal(hidden).astype(np.float32)
    beta = rng.standard_normal(hidden).astype(np.float32)
    mean = x.mean(-1).astype(np.float32)
    var = x.var(-1).astype(np.float32)
    results = []
    for _ in range(2):
        dg, db, dx = (np.full(s, np.nan, np.float32) for s in ((hidden,), (hidden,), (rows, hidden)))
        layernorm_lib.launch_layernorm_bw(dg.ctypes.data, db.ctypes.data, dx.ctypes.data, dy.ctypes.data,
                                          x.ctypes.data, gamma.ctypes.data, beta.ctypes.data,
                                          var.ctypes.data, mean.ctypes.data, rows, hidden, None, None)
        results.append((dg, db, dx))
    for a, b in zip(*results):
        assert np.array_equal(a, b)


def test_forward_vars_feed_backward(layernorm_lib) -> None:
    """The backward accepts the forward's own means/vars (the eps convention is consistent)."""
    rng = np.random.default_rng(11)
    rows, hidden = 300, 512
    x = rng.standard_normal((rows, hidden)).astype(np.float32) * 3
    gamma = rng.uniform(0.5, 1.5, hidden).astype(np.float32)
    beta = rng.standard_normal(hidden).astype(np.float32)
    dy = rng.standard_normal((rows, hidden)).astype(np.float32)
    out, var, mean = (np.full(s, np.nan, np.float32) for s in ((rows, hidden), (rows,), (rows,)))
    layernorm_lib.launch_layernorm(out.ctypes.data, var.ctypes.data, mean.ctypes.data, x.ctypes.data,
                                   gamma.ctypes.data, beta.ctypes.data, rows, hidden, None)
    dg, db, dx = (np.full(s, np.nan, np.float32) for s in ((hidden,), (hidden,), (rows, hidden)))
    layernorm_lib.launch_layernorm_bw(dg.ctypes.data, db.ctypes.data, dx.ctypes.data, dy.ctypes.data,
                                      x.ctypes.data, gamma.ctypes.data, beta.ctypes.data,
                                      var.ctypes.data, mean.ctypes.data, rows, hidden, None, None)
    x64 = x.astype(np.float64)
    dg_ref, db_ref, dx_ref = kc.layernorm_bw_reference(dy, x, gamma, x64.var(-1), x64.mean(-1))
    result = kc.compare({"gamma_grad": (dg, dg_ref), "betta_grad": (db, db_ref), "inp_grad": (dx, dx_ref)},
                        *kc.TOL_LAYERNORM_BW, (rows, hidden))
    assert result.ok, result.describe()


def test_non_default_streams(softmax_lib, layernorm_lib) -> None:
    """Streams as the course passes them (torch's current stream; two distinct streams)."""
    torch = pytest.importorskip("torch")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    r = kc.check_softmax_fw(softmax_lib, 2, 8, 200, 200, True, np.random.default_rng(1), stream=s1.cuda_stream)
    assert r.ok, r.describe()
    r = kc.check_softmax_bw(softmax_lib, 996, 700, np.random.default_rng(2), stream=s2.cuda_stream)
    assert r.ok, r.describe()
    r = kc.check_layernorm_fw(layernorm_lib, 333, 768, np.random.default_rng(3), stream=s1.cuda_stream)
    assert r.ok, r.describe()
    r = kc.check_layernorm_bw(layernorm_lib, 1000, 1024, np.random.default_rng(4),
                              stream_1=s1.cuda_stream, stream_2=s2.cuda_stream)
    assert r.ok, r.describe()


_REJECT = {
    "softmax to_len 1025": ("softmax", "launch_attn_softmax(x, None, 1, 1, 1, 1025, False, None)", "1024"),
    "softmax_bw len 2049": ("softmax", "launch_attn_softmax_bw(x, x, 1, 2049, None)", "2048"),
    "layernorm hidden 30": ("layernorm", "launch_layernorm(x, x, x, x, x, x, 1, 30, None)", "multiple of 4"),
    "layernorm_bw hidden 4100": (
        "layernorm", "launch_layernorm_bw(x, x, x, x, x, x, x, x, x, 1, 4100, None, None)", "4096"),
}


@pytest.mark.parametrize("name", list(_REJECT))
def test_rejects_unsupported_shapes(so_dir: Path, name: str) -> None:
    """Unsupported shapes raise std::runtime_error with a clear message (which, through
    ctypes, ends the process: so the call runs in a child)."""
    kind, call, needle = _REJECT[name]
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import numpy as np
        import kit_checks as kc
        lib = kc.load_{kind}_lib({str(so_dir / (kind + "_kernel.so"))!r})
        buf = np.zeros(1 << 16, dtype=np.float32)
        x = buf.ctypes.data
        lib.{call}
        print("RETURNED")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "RETURNED" not in proc.stdout, f"{name}: call returned instead of raising"
    assert proc.returncode != 0
    assert needle in proc.stderr, proc.stderr[-2000:]
