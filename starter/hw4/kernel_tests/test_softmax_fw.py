"""Problem 1.1: fused attention softmax forward vs the MiniTorch composition."""
import numpy as np
import pytest

import minitorch
from test_utils import assert_close, report, time_call, to_tensor

SHAPES = [(1, 8, 8, 8), (4, 8, 32, 32), (8, 8, 64, 64), (8, 8, 128, 128), (2, 8, 256, 256), (2, 8, 512, 512), (3, 8, 40, 40)]


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_fw(shape):
    batch, nhead, from_len, to_len = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    mask = np.where(rng.random((batch, to_len)) < 0.2, -1e8, 0.0).astype(np.float32)
    mask[:, 0] = 0.0
    inp, m = to_tensor(x), to_tensor(mask)
    m4 = to_tensor(mask.reshape(batch, 1, 1, to_len))

    custom = inp.attn_softmax(m).to_numpy()
    baseline = minitorch.nn.softmax(inp + m4, dim=3).to_numpy()
    assert_close(custom, baseline, atol=1e-3, rtol=1e-3, what="softmax forward")

    base_ms = time_call(lambda: minitorch.nn.softmax(inp + m4, dim=3))
    custom_ms = time_call(lambda: inp.attn_softmax(m))
    report("softmax fw", shape, base_ms, custom_ms)
