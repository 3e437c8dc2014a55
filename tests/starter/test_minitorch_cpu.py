"""The reference kit's MiniTorch (starter/hw4/minitorch) on its numpy backend: autodiff,
the fused ops against their compositions, and Problem 3's DecoderLM. CPU only (numpy)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

KIT = Path(__file__).resolve().parents[2] / "starter" / "hw4"


def _drop_minitorch() -> None:
    for name in [m for m in sys.modules if m == "minitorch" or m.startswith("minitorch.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def mt():
    """The kit's minitorch, imported from starter/hw4 and forgotten afterwards."""
    _drop_minitorch()
    sys.path.insert(0, str(KIT))
    keep_bytecode_flag = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no __pycache__ inside the reference kit's source tree
    try:
        import minitorch

        assert Path(minitorch.__file__).resolve().is_relative_to(KIT)
        yield minitorch
    finally:
        sys.dont_write_bytecode = keep_bytecode_flag
        sys.path.remove(str(KIT))
        _drop_minitorch()


def _t(mt, arr, grad=True):
    return mt.tensor_from_numpy(np.asarray(arr, dtype=np.float32), backend=mt.NumpyBackend, requires_grad=grad)


def _check_grads(mt, fn, *arrays, n_checks=6, rtol=2e-2, atol=2e-3, seed=0):
    """Gradient of fn(*xs).sum() by autodiff vs central differences at random entries."""
    rng = np.random.default_rng(seed)
    xs = [_t(mt, a) for a in arrays]
    out = fn(*xs)
    out.sum().backward()
    for i, x in enumerate(xs):
        assert x.grad is not None and x.grad.shape == x.shape, (i, x.grad)
        g = x.grad.to_numpy()
        for _ in range(n_checks):
            ind = tuple(int(rng.integers(0, s)) for s in x.shape)
            const = [_t(mt, a, grad=False) for a in arrays]
            num = mt.grad_central_difference(fn, *const, arg=i, ind=ind, epsilon=1e-2)
            assert abs(g[ind] - num) <= atol + rtol * abs(num), (fn.__name__, i, ind, g[ind], num)


def test_package_imports_without_cuda(mt):
    assert "minitorch.cuda_kernel_ops" not in sys.modules
    assert hasattr(mt, "TensorBackend") and hasattr(mt, "DecoderLM")
    x = mt.tensor([[1.0, 2.0], [3.0, 4.0]], backend=mt.NumpyBackend, requires_grad=True)
    assert x.shape == (2, 2) and x.requires_grad()
    assert np.allclose(x._tensor._storage, [1, 2, 3, 4])


def test_strided_views(mt):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = _t(mt, a, grad=False)
    p = x.permute(2, 0, 1)
    assert p.shape == (4, 2, 3) and not p._tensor.is_contiguous()
    assert np.array_equal(p.to_numpy(), a.transpose(2, 0, 1))
    assert np.array_equal(p.contiguous().view(4, 6).to_numpy(), a.transpose(2, 0, 1).reshape(4, 6))
    assert np.allclose((p + 1.0).to_numpy(), a.transpose(2, 0, 1) + 1)
    assert np.allclose(x.sum(1).to_numpy(), a.sum(1, keepdims=True))
    assert np.allclose(x.max(2).to_numpy(), a.max(2, keepdims=True))
    assert np.allclose(x.var(2).to_numpy(), a.var(2, keepdims=True), atol=1e-5)


def test_elementwise_grads(mt):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 2.0, (3, 4))
    b = rng.standard_normal((4,))

    def mixed(x, y):
        return (x * y + x.log() - (x * 0.3).exp()) / (x + 1.0) + y.sigmoid() * x.relu() - x.tanh()

    _check_grads(mt, mixed, a, b)


def test_reduction_and_shape_grads(mt):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 4))

    def red(x):
        return x.permute(2, 0, 1).contiguous().view(4, 6).mean(1) * x.var(2).sum() + x.max(1).sum(2)

    _check_grads(mt, red, a)


def test_matmul_and_softmax_grads(mt):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 5))
    b = rng.standard_normal((5, 4))
    w = rng.standard_normal((2, 3, 4))

    def f(x, y):
        return mt.nn.softmax(x @ y, dim=2) * _t(mt, w, grad=False) + mt.nn.logsumexp(x @ y, 1)

    _check_grads(mt, f, a, b)


def _fused_softmax_case(mt, batch, nhead, from_len, to_len, mask_future, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, nhead, from_len, to_len)).astype(np.float32)
    mask = np.where(rng.random((batch, to_len)) < 0.2, -1e4, 0.0).astype(np.float32)
    mask[:, 0] = 0.0
    g = rng.standard_normal(x.shape).astype(np.float32)
    return x, mask, g


@pytest.mark.parametrize("mask_future", [False, True])
def test_attn_softmax_fused_matches_composed(mt, mask_future):
    B = mt.NumpyBackend
    x, mask, g = _fused_softmax_case(mt, 2, 3, 7, 7, mask_future, seed=4)
    # fused
    inp = _t(mt, x)
    out = inp.attn_softmax(_t(mt, mask, grad=False), mask_future=mask_future)
    out.backward(mt.tensor_from_numpy(g, backend=B))
    # composed
    inp2 = _t(mt, x)
    add = mask.reshape(2, 1, 1, 7) + (np.triu(np.full((7, 7), -1e9, np.float32), 1) if mask_future else 0)
    ref = mt.nn.softmax(inp2 + mt.tensor_from_numpy(add, backend=B), dim=3)
    ref.backward(mt.tensor_from_numpy(g, backend=B))
    assert np.allclose(out.to_numpy(), ref.to_numpy(), atol=1e-6, rtol=1e-5)
    assert np.allclose(inp.grad.to_numpy(), inp2.grad.to_numpy(), atol=1e-5, rtol=1e-4)
    # float64 reference
    z = x.astype(np.float64) + add
    y = np.exp(z - z.max(-1, keepdims=True))
    y /= y.sum(-1, keepdims=True)
    assert np.allclose(out.to_numpy(), y, atol=1e-6)
    assert np.allclose(inp.grad.to_numpy(), y * (g - (g * y).sum(-1, keepdims=True)), atol=1e-5)


def test_attn_softmax_backward_returns_grad_and_mask_slot(mt):
    B = mt.NumpyBackend
    x, mask, g = _fused_softmax_case(mt, 1, 2, 3, 4, False, seed=5)
    inp = _t(mt, x)
    out = inp.attn_softmax(_t(mt, mask, grad=False))
    grads = out.history.last_fn.backward(out.history.ctx, mt.tensor_from_numpy(g, backend=B))
    assert len(grads) == 2 and grads[0].shape == x.shape


def test_layernorm_fused_matches_composed(mt):
    B = mt.NumpyBackend
    rng = np.random.default_rng(6)
    rows, hidden = 9, 32
    x = (rng.standard_normal((rows, hidden)) * 2 + 0.5).astype(np.float32)
    gamma = rng.standard_normal(hidden).astype(np.float32)
    beta = rng.standard_normal(hidden).astype(np.float32)
    g = rng.standard_normal((rows, hidden)).astype(np.float32)

    xs, gs, bs = _t(mt, x), _t(mt, gamma), _t(mt, beta)
    out = xs.layernorm(gs, bs)
    out.backward(mt.tensor_from_numpy(g, backend=B))
    grads = out.history.last_fn.backward(out.history.ctx, mt.tensor_from_numpy(g, backend=B))
    assert len(grads) == 3

    xr, gr, br = _t(mt, x), _t(mt, gamma), _t(mt, beta)
    mean = xr.mean(1)
    var = xr.var(1)
    ref = (xr - mean) / ((var + 1e-8) ** 0.5) * gr + br
    ref.backward(mt.tensor_from_numpy(g, backend=B))
    assert np.allclose(out.to_numpy(), ref.to_numpy(), atol=1e-4, rtol=1e-4)
    for a, b in [(xs, xr), (gs, gr), (bs, br)]:
        assert np.allclose(a.grad.to_numpy(), b.grad.to_numpy(), atol=1e-4, rtol=1e-3)

    # float64 reference
    x64 = x.astype(np.float64)
    mu = x64.mean(1, keepdims=True)
    sd = np.sqrt(x64.var(1, keepdims=True) + 1e-8)
    xhat = (x64 - mu) / sd
    assert np.allclose(out.to_numpy(), xhat * gamma + beta, atol=1e-5)
    assert np.allclose(gs.grad.to_numpy(), (g * xhat).sum(0), atol=1e-4)
    assert np.allclose(bs.grad.to_numpy(), g.sum(0), atol=1e-4)


def _tiny_lm(mt, fused, seed, p_dropout=0.0, n_vocab=24, n_embd=32, n_head=4, n_positions=12):
    mt.seed(seed)
    return mt.DecoderLM(
        n_vocab=n_vocab, n_embd=n_embd, n_head=n_head, n_positions=n_positions, p_dropout=p_dropout,
        ln_eps=1e-8, bias=True, backend=mt.NumpyBackend, use_fused_kernel=fused,
    )


def test_decoder_fused_and_unfused_match(mt):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 24, (3, 12))
    targets = rng.integers(0, 24, (3, 12))
    losses, grads = [], []
    for fused in (False, True):
        model = _tiny_lm(mt, fused, seed=11)
        loss = mt.cross_entropy_loss(model(ids), targets)
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.value.grad.to_numpy() for n, p in model.named_parameters()})
    assert np.isfinite(losses).all()
    assert abs(losses[0] - losses[1]) < 1e-4 * max(1.0, abs(losses[0])), losses
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert np.allclose(grads[0][name], grads[1][name], atol=1e-4, rtol=1e-2), name


def _synthetic_batch(rng, batch, seq, n_vocab):
    """Each sequence counts up by a random step: the next token is predictable from the last two."""
    start = rng.integers(0, n_vocab, (batch, 1))
    step = rng.integers(1, 4, (batch, 1))
    seqs = (start + step * np.arange(seq + 1)) % n_vocab
    return seqs[:, :-1], seqs[:, 1:]


@pytest.mark.parametrize("fused", [False, True])
def test_decoder_trains(mt, fused):
    rng = np.random.default_rng(8)
    model = _tiny_lm(mt, fused, seed=12, p_dropout=0.0)
    opt = mt.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(100):
        ids, targets = _synthetic_batch(rng, 8, 12, 24)
        opt.zero_grad()
        loss = mt.cross_entropy_loss(model(ids), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.isfinite(losses).all()
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.5 * first, (first, last)


def test_dropout_train_and_eval(mt):
    x = _t(mt, np.ones((64, 64)), grad=False)
    drop = mt.Dropout(0.5)
    y = drop(x).to_numpy()
    assert 0.3 < (y == 0).mean() < 0.7 and np.allclose(y[y != 0], 2.0)
    drop.eval()
    assert np.array_equal(drop(x).to_numpy(), x.to_numpy())
