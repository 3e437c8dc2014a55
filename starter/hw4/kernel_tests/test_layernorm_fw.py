"""Problem 2.1: fused LayerNorm forward vs the MiniTorch composition (mean/var ops)."""
import numpy as np
import pytest

from test_utils import assert_close, report, time_call, to_tensor

SHAPES = [(8, 32), (128, 32), (512, 32), (1024, 32), (256, 256), (100, 1024), (64, 4096)]


def composed_layernorm(x, gamma, beta, eps=1e-8):
    mean = x.mean(1)
    var = x.var(1)
    return (x - mean) / ((var + eps) ** 0.5) * gamma + beta


@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_fw(shape):
    rows, hidden = shape
    rng = np.random.default_rng(rows + hidden)
    x = to_tensor(rng.standard_normal(shape) * 2 + 1)
    gamma = to_tensor(rng.standard_normal(hidden))
    beta = to_tensor(rng.standard_normal(hidden))

    custom = x.layernorm(gamma, beta).to_numpy()
    baseline = composed_layernorm(x, gamma, beta).to_numpy()
    assert_close(custom, baseline, atol=1e-2, rtol=1e-3, what="layernorm forward")

    base_ms = time_call(lambda: composed_layernorm(x, gamma, beta))
    custom_ms = time_call(lambda: x.layernorm(gamma, beta))
    report("layernorm fw", shape, base_ms, custom_ms)
