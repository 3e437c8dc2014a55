"""Problem 1.2: fused attention softmax backward vs backpropagating through the composition."""
import numpy as np
import pytest

import minitorch
from test_utils import assert_close, report, time_call, to_tensor

SHAPES = [(1, 8, 8, 8), (4, 8, 32, 32), (8, 8, 64, 64), (8, 8, 128, 128), (2, 8, 256, 256), (2, 8, 512, 512), (3, 8, 40, 40)]


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_bw(shape):
    batch, nhead, from_len, to_len = shape
    rng = np.random.default_rng(sum(shape) + 1)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = np.zeros((batch, to_len), dtype=np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    grad = to_tensor(g)

    def custom_graph():
        inp = to_tensor(x, requires_grad=True)
        return inp, inp.attn_softmax(to_tensor(mask))

    def baseline_graph():
        inp = to_tensor(x, requires_grad=True)
        return inp, minitorch.nn.softmax(inp + to_tensor(mask.reshape(batch, 1, 1, to_len)), dim=3)

    inp_c, out_c = custom_graph()
    out_c.backward(grad)
    inp_b, out_b = baseline_graph()
    out_b.backward(grad)
    assert_close(inp_c.grad.to_numpy(), inp_b.grad.to_numpy(), atol=1e-2, rtol=1e-3, what="softmax backward")

    # time only the backward pass, on a fresh graph each call
    def timed_backward(make):
        graphs = [make()[1] for _ in range(6)]
        return lambda: graphs.pop().backward(grad)

    base_ms = time_call(timed_backward(baseline_graph))
    custom_ms = time_call(timed_backward(custom_graph))
    report("softmax bw", shape, base_ms, custom_ms)
