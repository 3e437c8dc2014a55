"""Problem 2.2: fused LayerNorm backward (input, gamma and beta gradients) vs the composition."""
import numpy as np
import pytest

from test_layernorm_fw import composed_layernorm
from test_utils import assert_close, report, time_call, to_tensor

SHAPES = [(8, 32), (128, 32), (512, 32), (1024, 32), (256, 256), (100, 1024), (64, 4096)]


@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_bw(shape):
    rows, hidden = shape
    rng = np.random.default_rng(rows * 3 + hidden)
    x = rng.standard_normal(shape) * 2 + 1
    gamma = rng.standard_normal(hidden)
    beta = rng.standard_normal(hidden)
    grad = to_tensor(rng.standard_normal(shape))

    def graph(fused):
        xs, gs, bs = (to_tensor(a, requires_grad=True) for a in (x, gamma, beta))
        out = xs.layernorm(gs, bs) if fused else composed_layernorm(xs, gs, bs)
        return (xs, gs, bs), out

    (xc, gc, bc), out_c = graph(True)
    out_c.backward(grad)
    (xb, gb, bb), out_b = graph(False)
    out_b.backward(grad)
    for name, a, b in [("inp", xc, xb), ("gamma", gc, gb), ("beta", bc, bb)]:
        assert_close(a.grad.to_numpy(), b.grad.to_numpy(), atol=1e-3, rtol=1e-2, what=f"layernorm backward ({name})")

    def timed_backward(fused):
        graphs = [graph(fused)[1] for _ in range(6)]
        return lambda: graphs.pop().backward(grad)

    base_ms = time_call(timed_backward(False))
    custom_ms = time_call(timed_backward(True))
    report("layernorm bw", shape, base_ms, custom_ms)
