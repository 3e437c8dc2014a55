"""The reference kit's MiniTorch on the GPU: CudaKernelOps basic ops (combine.so) against
numpy, the four fused ops through Tensor.attn_softmax / Tensor.layernorm and autodiff
against float64 references with the course's tolerances, and Problem 3 (DecoderLM fused vs
unfused: matching losses, both train)."""
from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SOFTMAX_FW_TOL = dict(atol=1e-3, rtol=1e-3)
SOFTMAX_BW_TOL = dict(atol=1e-2, rtol=1e-3)
LAYERNORM_FW_TOL = dict(atol=1e-2, rtol=1e-3)
LAYERNORM_BW_TOL = dict(atol=1e-3, rtol=1e-2)


@pytest.fixture()
def kit(in_kit):
    import minitorch
    from minitorch.cuda_kernel_ops import CudaKernelOps

    return minitorch, minitorch.TensorBackend(CudaKernelOps)


def _t(mt, arr, backend, grad=False):
    return mt.tensor_from_numpy(np.asarray(arr, dtype=np.float32), backend=backend, requires_grad=grad)


def test_basic_ops_match_numpy(kit):
    mt, CB = kit
    NB = mt.NumpyBackend
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (2, 3, 40)).astype(np.float32)
    b = rng.standard_normal((3, 1)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)

    def run(be):
        x, y, W = _t(mt, a, be, True), _t(mt, b, be, True), _t(mt, w, be, True)
        z = (x.permute(0, 2, 1) * y.permute(1, 0)).permute(0, 2, 1).exp().log().sigmoid() / (x + 1.0)
        q = z @ W
        r = mt.nn.softmax(q, dim=2) * q.relu() + mt.nn.logsumexp(q, 1) - q.tanh() + (x.permute(0, 2, 1) @ z).sum(0).mean()
        s = r.sum()
        s.backward()
        lt = (x < 1.0) + (x == x) + x.max(2)
        return [s, x.grad, y.grad, W.grad, lt, x.var(1), x.contiguous()]

    for got, want in zip(run(CB), run(NB)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-4, atol=1e-4)


def test_large_reduce_and_matmul_vs_float64(kit):
    mt, CB = kit
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 700, 129)).astype(np.float32)
    b = rng.standard_normal((129, 333)).astype(np.float32)
    x = _t(mt, a, CB)
    np.testing.assert_allclose(x.sum(1).to_numpy(), a.astype(np.float64).sum(1, keepdims=True), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(x.max(1).to_numpy(), a.max(1, keepdims=True))
    np.testing.assert_allclose(x.sum().to_numpy(), [a.astype(np.float64).sum()], rtol=1e-4, atol=1e-2)
    got = (x @ _t(mt, b, CB)).to_numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    # batched, transposed operands (strided reads) and broadcast batch dims
    c = rng.standard_normal((4, 1, 50, 33)).astype(np.float32)
    d = rng.standard_normal((1, 5, 70, 33)).astype(np.float32)
    got = (_t(mt, c, CB) @ _t(mt, d, CB).permute(0, 1, 3, 2)).to_numpy()
    np.testing.assert_allclose(got, c.astype(np.float64) @ d.transpose(0, 1, 3, 2), rtol=1e-4, atol=1e-3)


def _softmax_ref(x, mask, mask_future):
    z = x.astype(np.float64) + mask.astype(np.float64)[:, None, None, :]
    if mask_future:
        z = np.where(np.triu(np.ones(z.shape[-2:], bool), 1), -np.inf, z)
    y = np.exp(z - z.max(-1, keepdims=True))
    return y / y.sum(-1, keepdims=True)


@pytest.mark.parametrize(
    "batch,from_len,to_len,mask_future",
    [(1, 1, 1, False), (4, 7, 31, False), (2, 33, 33, True), (16, 64, 64, False), (8, 100, 128, True),
     (3, 200, 256, False), (2, 512, 512, True), (1, 20, 1000, False)],
)
def test_fused_softmax_fw_bw_vs_float64(kit, batch, from_len, to_len, mask_future):
    mt, CB = kit
    rng = np.random.default_rng(batch * 1000 + to_len)
    nhead = 8
    x = rng.standard_normal((batch, nhead, from_len, to_len)).astype(np.float32) * 3
    mask = np.where(rng.random((batch, to_len)) < 0.25, -1e8, 0.0).astype(np.float32)
    mask[:, 0] = 0.0
    g = rng.standard_normal(x.shape).astype(np.float32)
    inp = _t(mt, x, CB, True)
    out = inp.attn_softmax(_t(mt, mask, CB), mask_future=mask_future)
    y = _softmax_ref(x, mask, mask_future)
    got = out.to_numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, y, **SOFTMAX_FW_TOL)
    out.backward(_t(mt, g, CB))
    want = y * (g - (g * y).sum(-1, keepdims=True))
    np.testing.assert_allclose(inp.grad.to_numpy(), want, **SOFTMAX_BW_TOL)
    # the composed MiniTorch softmax on combine.so agrees too (the course's baseline)
    if not mask_future and x.size <= 1 << 20:
        base = mt.nn.softmax(_t(mt, x, CB) + _t(mt, mask.reshape(batch, 1, 1, to_len), CB), dim=3)
        np.testing.assert_allclose(base.to_numpy(), y, **SOFTMAX_FW_TOL)


@pytest.mark.parametrize("rows,hidden", [(1, 4), (7, 32), (128, 32), (1000, 256), (96, 1024), (33, 4096)])
def test_fused_layernorm_fw_bw_vs_float64(kit, rows, hidden):
    mt, CB = kit
    rng = np.random.default_rng(rows + hidden)
    x = (rng.standard_normal((rows, hidden)) * 2 + 1).astype(np.float32)
    gamma = rng.standard_normal(hidden).astype(np.float32)
    beta = rng.standard_normal(hidden).astype(np.float32)
    g = rng.standard_normal((rows, hidden)).astype(np.float32)
    xs, gs, bs = _t(mt, x, CB, True), _t(mt, gamma, CB, True), _t(mt, beta, CB, True)
    out = xs.layernorm(gs, bs)
    x64 = x.astype(np.float64)
    mu = x64.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(x64.var(1, keepdims=True) + 1e-8)
    xhat = (x64 - mu) * rstd
    np.testing.assert_allclose(out.to_numpy(), xhat * gamma + beta, **LAYERNORM_FW_TOL)
    out.backward(_t(mt, g, CB))
    gx = g * gamma
    dinp = rstd * (gx - gx.mean(1, keepdims=True) - xhat * (gx * xhat).mean(1, keepdims=True))
    np.testing.assert_allclose(xs.grad.to_numpy(), dinp, **LAYERNORM_BW_TOL)
    np.testing.assert_allclose(gs.grad.to_numpy(), (g * xhat).sum(0), **LAYERNORM_BW_TOL)
    np.testing.assert_allclose(bs.grad.to_numpy(), g.astype(np.float64).sum(0), **LAYERNORM_BW_TOL)


def _lm(mt, backend, fused, seed, n_vocab, n_embd=64, n_head=8, n_positions=16):
    mt.seed(seed)
    return mt.DecoderLM(
        n_vocab=n_vocab, n_embd=n_embd, n_head=n_head, n_positions=n_positions, p_dropout=0.0,
        ln_eps=1e-8, bias=True, backend=backend, use_fused_kernel=fused,
    )


def test_decoder_fused_matches_unfused(kit):
    mt, CB = kit
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 100, (4, 16))
    targets = rng.integers(0, 100, (4, 16))
    losses, grads = [], []
    for fused in (False, True):
        model = _lm(mt, CB, fused, seed=5, n_vocab=100)
        loss = mt.cross_entropy_loss(model(ids), targets)
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.value.grad.to_numpy() for n, p in model.named_parameters()})
    assert np.isfinite(losses).all()
    assert abs(losses[0] - losses[1]) < 1e-4 * max(1.0, abs(losses[0])), losses
    for name in grads[0]:
        np.testing.assert_allclose(grads[1][name], grads[0][name], atol=1e-3, rtol=1e-2, err_msg=name)


def test_decoder_trains_fused_and_unfused(kit):
    mt, CB = kit
    steps, batch, seq, vocab = 150, 8, 16, 32
    report = {}
    for fused in (False, True):
        rng = np.random.default_rng(3)
        model = _lm(mt, CB, fused, seed=6, n_vocab=vocab)
        opt = mt.Adam(model.parameters(), lr=3e-3)
        losses = []
        started = time.perf_counter()
        for _ in range(steps):
            start = rng.integers(0, vocab, (batch, 1))
            step = rng.integers(1, 4, (batch, 1))
            seqs = (start + step * np.arange(seq + 1)) % vocab
            opt.zero_grad()
            loss = mt.cross_entropy_loss(model(seqs[:, :-1]), seqs[:, 1:])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        elapsed = time.perf_counter() - started
        first, last = float(np.mean(losses[:10])), float(np.mean(losses[-10:]))
        report[fused] = (first, last, elapsed / steps)
        assert np.isfinite(losses).all()
        assert last < 0.5 * first, (fused, first, last)
    print(
        "\nProblem 3 (small config) loss first10->last10 and s/step: "
        + ", ".join(f"{'fused' if k else 'unfused'} {v[0]:.3f}->{v[1]:.3f} {v[2] * 1e3:.1f} ms" for k, v in report.items())
    )
