"""rubrics/hw4/cases.py and its steps (case_inputs, references, abi) on the CPU: a numpy
stand-in for the student's library receives the same host pointers the real .so would
(through abi_call), so the whole path make_inputs -> reference -> abi_call -> verify runs
here, and deliberately broken variants must be caught."""
from __future__ import annotations

import ctypes
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from rubrics.hw4 import abi, case_inputs, references
from rubrics.hw4 import cases as hc
from worker.checks import CheckResult

CASES = hc.load_cases("hw4")
ALL = [c for problem in sorted(CASES) for c in CASES[problem]]


def _view(ptr: int | None, shape: tuple[int, ...]) -> np.ndarray | None:
    if ptr is None:
        return None
    n = int(np.prod(shape))
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr)).reshape(shape)


class NumpyLib:
    """The four launch functions in float32 numpy, written independently of the references
    (one-pass variance as the kernels compute it). `bugs` switches on broken variants."""

    def __init__(self, *bugs: str, eps: float = 1e-8) -> None:
        self.bugs = set(bugs)
        self.eps = eps
        self.calls = 0

    def _rows(self, n: int) -> int:
        return n - 1 if "row_off_by_one" in self.bugs else n

    def _cols(self, n: int) -> int:
        return n - 4 if "drop_last_float4" in self.bugs else n

    def launch_attn_softmax(self, inp, mask, batch, nhead, from_len, to_len, mask_future, stream):
        self.calls += 1
        x = _view(inp, (batch * nhead * from_len, to_len))
        m = _view(mask, (batch, to_len))
        vals = x.reshape(batch, nhead, from_len, to_len).copy()
        if m is not None and "ignore_mask" not in self.bugs:
            vals = vals + m[:, None, None, :]
        if mask_future and "ignore_mask_future" not in self.bugs:
            vals = np.where(np.triu(np.ones((from_len, to_len), bool), 1), np.float32(-np.inf), vals)
        vals = vals.reshape(-1, to_len)
        top = vals.max(axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, np.float32(0))
        e = np.exp(vals - top)
        s = e.sum(axis=-1, keepdims=True)
        y = np.where(s > 0, e / np.where(s > 0, s, 1), 0).astype(np.float32)
        r = self._rows(x.shape[0])
        x[:r] = y[:r]

    def launch_attn_softmax_bw(self, out_grad, soft_out, rows, n, stream):
        self.calls += 1
        g = _view(out_grad, (rows, n))
        y = _view(soft_out, (rows, n))
        res = y * (g - (g * y).sum(axis=-1, keepdims=True))
        r = self._rows(rows)
        g[:r] = res[:r]

    def _stats(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self._cols(x.shape[1])
        xs = x[:, :c]
        mean = xs.mean(axis=-1, dtype=np.float32)
        var = (xs * xs).mean(axis=-1, dtype=np.float32) - mean * mean
        return var, mean

    def launch_layernorm(self, ln_res, vars_, means, inp, gamma, beta, rows, hidden, stream):
        self.calls += 1
        x = _view(inp, (rows, hidden))
        out, v, m = _view(ln_res, (rows, hidden)), _view(vars_, (rows,)), _view(means, (rows,))
        g, b = _view(gamma, (hidden,)), _view(beta, (hidden,))
        var, mean = self._stats(x)
        y = (x - mean[:, None]) / np.sqrt(var[:, None] + np.float32(self.eps)) * g + b
        r, c = self._rows(rows), self._cols(hidden)
        out[:r, :c] = y[:r, :c]
        v[:r], m[:r] = var[:r], mean[:r]

    def launch_layernorm_bw(self, gamma_grad, betta_grad, inp_grad, out_grad, inp, gamma, beta,
                            vars_, means, rows, hidden, s1, s2):
        self.calls += 1
        dy, x = _view(out_grad, (rows, hidden)), _view(inp, (rows, hidden))
        g = _view(gamma, (hidden,))
        var, mean = _view(vars_, (rows,)), _view(means, (rows,))
        r, c = self._rows(rows), self._cols(hidden)
        rstd = 1 / np.sqrt(var[:, None] + np.float32(self.eps))
        xhat = (x - mean[:, None]) * rstd
        _view(gamma_grad, (hidden,))[:c] = (dy * xhat)[:r, :c].sum(axis=0)
        _view(betta_grad, (hidden,))[:c] = dy[:r, :c].sum(axis=0)
        dxhat = dy * g
        dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
        _view(inp_grad, (rows, hidden))[:r, :c] = dx[:r, :c]


def _rng(case: hc.Case) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(case.id.encode()))


def _run(lib, case: hc.Case, rng=None) -> CheckResult:
    arrays = case_inputs.make_inputs(case, rng or _rng(case))
    before = {k: v.copy() for k, v in arrays.items()}
    expected = references.reference(case, before)
    abi.abi_call(lib, case, arrays)
    return references.verify(case, {n: arrays[n] for n in abi.abi_output_names(case)}, expected)


# --------------------------------------------------------------------------- the case lists


def test_load_cases_public_and_hidden_for_every_problem() -> None:
    assert sorted(CASES) == ["1.1", "1.2", "2.1", "2.2"]
    for problem, cases in CASES.items():
        assert any(c.public for c in cases) and any(not c.public for c in cases), problem
        assert {c.kind for c in cases} == {hc.PROBLEM_KIND[problem]}
        assert all(c.problem == problem for c in cases)
    ids = [c.id for c in ALL]
    assert len(ids) == len(set(ids))
    # coverage the hidden set promises
    assert {c.params["mask"] for c in CASES["1.1"]} == set(hc.MASK_KINDS)
    assert max(c.params["hidden"] for c in CASES["2.2"]) == 4096
    assert any(c.params["to_len"] == 1024 and c.params["mask_future"] for c in CASES["1.1"])


def test_load_cases_rejects_bad_data(tmp_path: Path) -> None:
    bad = tmp_path / "r.yaml"
    bad.write_text('cases:\n  "2.1":\n    kind: layernorm_fw\n    hidden: [{rows: 3, hidden: 30}]\n')
    with pytest.raises(hc.CaseError, match="multiple of 4"):
        hc.load_cases(bad)
    bad.write_text('cases:\n  "1.2":\n    kind: softmax_bw\n    hidden: [{rows: 4, softmax_len: 4}, {rows: 4, softmax_len: 4}]\n')
    with pytest.raises(hc.CaseError, match="duplicate"):
        hc.load_cases(bad)
    bad.write_text('cases:\n  "1.1":\n    kind: softmax_fw\n    hidden: [{batch: 1, nhead: 1, from_len: 2, to_len: 2, mask_future: false, mask: nope}]\n')
    with pytest.raises(hc.CaseError, match="mask"):
        hc.load_cases(bad)


def test_make_inputs_shapes_poison_and_freshness() -> None:
    for case in ALL:
        if np.prod(case.shape) > 200_000:
            continue
        a = case_inputs.make_inputs(case, np.random.default_rng(1))
        assert set(a) == set(abi.abi_shapes(case)), case.id
        for name, arr in a.items():
            assert arr.dtype == np.float32 and arr.flags.c_contiguous, (case.id, name)
            assert arr.shape == abi.abi_shapes(case)[name]
        for name in abi.abi_output_names(case):
            inplace = name in ("inp", "out_grad")
            assert np.isnan(a[name]).all() != inplace, (case.id, name)
        rng = np.random.default_rng(1)
        first, second = case_inputs.make_inputs(case, rng), case_inputs.make_inputs(case, rng)
        main = "out_grad" if case.kind == "softmax_bw" else "inp"
        if a[main].size > 1:
            assert not np.array_equal(first[main], second[main]), case.id
        assert all(np.array_equal(first[k], a[k], equal_nan=True) for k in a), case.id  # same seed, same draw


# --------------------------------------------------------------------------- verification


def test_correct_library_passes_every_case() -> None:
    lib = NumpyLib()
    for case in ALL:
        result = _run(lib, case)
        assert result.ok, f"{case.id}: {result.describe()}"
        assert result.where is None and result.max_err < 1.0
    assert lib.calls == len(ALL)


def test_in_process_runner_and_kit_checks_layer() -> None:
    gpu_dir = str(Path(__file__).resolve().parents[3] / "gpu")
    sys.path.insert(0, gpu_dir)
    try:
        import kit_checks as kc
    finally:
        sys.path.remove(gpu_dir)
    assert [c.id for c in kc.SOFTMAX_BW_CASES] == [c.id for c in CASES["1.2"]]
    case = kc.LAYERNORM_BW_CASES[0]
    assert case.run(NumpyLib(), _rng(case)).ok
    assert not case.run(NumpyLib("row_off_by_one"), _rng(case)).ok
    assert kc.check_softmax_fw(NumpyLib(), 2, 3, 40, 40, True, np.random.default_rng(0), mask="inf").ok
    assert not kc.check_layernorm_fw(NumpyLib(eps=1e-2), 20, 64, np.random.default_rng(0), scale=0.02).ok


def _outputs_and_expected(case: hc.Case):
    arrays = case_inputs.make_inputs(case, np.random.default_rng(3))
    expected = references.reference(case, arrays)
    abi.abi_call(NumpyLib(), case, arrays)
    return {n: arrays[n].copy() for n in abi.abi_output_names(case)}, expected


def test_nan_output_fails() -> None:
    case = hc.make_case("softmax_fw", batch=2, nhead=2, from_len=8, to_len=8, mask_future=False)
    out, exp = _outputs_and_expected(case)
    assert references.verify(case, out, exp).ok
    out["inp"][1, 0, 5, 2] = np.nan
    r = references.verify(case, out, exp)
    assert not r.ok and r.where == (1, 0, 5, 2) and r.output == "inp" and r.max_err == np.inf
    assert "inp[1, 0, 5, 2]" in r.describe()


def test_wrong_value_located() -> None:
    case = hc.make_case("layernorm_bw", rows=16, hidden=64)
    out, exp = _outputs_and_expected(case)
    out["inp_grad"][9, 33] += 0.5
    r = references.verify(case, out, exp)
    assert not r.ok and r.output == "inp_grad" and r.where == (9, 33)
    assert r.max_where == ("inp_grad", (9, 33)) and 0.49 < r.max_err < 0.51
    assert r.shape == (16, 64)


def test_untouched_poisoned_output_fails() -> None:
    case = hc.make_case("layernorm_fw", rows=5, hidden=8)
    arrays = case_inputs.make_inputs(case, np.random.default_rng(0))
    expected = references.reference(case, arrays)
    r = references.verify(case, {n: arrays[n] for n in abi.abi_output_names(case)}, expected)  # no call
    assert not r.ok and r.output == "ln_res" and r.where == (0, 0)
    # only the stats left untouched still fails
    out, exp = _outputs_and_expected(case)
    out["means"][:] = np.nan
    assert not references.verify(case, out, exp).ok
    assert not references.verify(case, {"ln_res": out["ln_res"]}, exp).ok  # missing outputs


def test_abi_call_rejects_wrong_buffers() -> None:
    case = hc.make_case("softmax_bw", rows=4, softmax_len=8)
    arrays = case_inputs.make_inputs(case, np.random.default_rng(0))
    with pytest.raises(hc.CaseError):
        abi.abi_call(NumpyLib(), case, {**arrays, "soft_out": arrays["soft_out"][:2]})
    with pytest.raises(hc.CaseError):
        abi.abi_call(NumpyLib(), case, {**arrays, "soft_out": arrays["soft_out"].astype(np.float64)})


BROKEN = [
    ("ignore_mask", {}, ["1.1"]),
    ("ignore_mask_future", {}, ["1.1"]),
    ("eps_1e-2", {"eps": 1e-2}, ["2.1", "2.2"]),
    ("drop_last_float4", {}, ["2.1", "2.2"]),
    ("row_off_by_one", {}, ["1.1", "1.2", "2.1", "2.2"]),
]


@pytest.mark.parametrize("bug,kwargs,problems", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_variants_fail(bug: str, kwargs: dict, problems: list[str]) -> None:
    lib = NumpyLib(*([] if kwargs else [bug]), **kwargs)
    for problem in problems:
        failed = None
        for case in CASES[problem]:  # stop at the first failure
            result = _run(lib, case)
            if not result.ok:
                failed = (case, result)
                break
        assert failed, f"{bug} passed every case of {problem}"


def test_binding_inputs_and_references() -> None:
    rng = np.random.default_rng(5)
    sbw = hc.make_case("softmax_bw", rows=996, softmax_len=65)
    assert case_inputs.binding_factors(sbw) == (1, 4, 249, 65)
    assert case_inputs.binding_factors(CASES["1.2"][1]) == (1, 8, 512, 512)
    a = case_inputs.make_binding_inputs(sbw, rng)
    assert a["inp"].shape == a["out_grad"].shape == (1, 4, 249, 65)
    assert a["mask"].shape == (1, 1, 1, 65) and not a["mask"].any()
    ref = references.binding_reference(sbw, a)["inp_grad"]
    # finite differences of sum(softmax(inp) * out_grad) on one row
    x = a["inp"][0, 1, 7].astype(np.float64)
    g = a["out_grad"][0, 1, 7].astype(np.float64)
    f = lambda v: float((np.exp(v - v.max()) / np.exp(v - v.max()).sum() * g).sum())  # noqa: E731
    h = 1e-6
    fd = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)[:5]]
    np.testing.assert_allclose(ref[0, 1, 7, :5], fd, atol=1e-6)

    sfw = hc.make_case("softmax_fw", batch=2, nhead=2, from_len=4, to_len=6, mask_future=False, mask="none")
    b = case_inputs.make_binding_inputs(sfw, rng)
    assert b["mask"].shape == (2, 1, 1, 6) and not b["mask"].any()  # as the course's tests shape it
    np.testing.assert_allclose(references.binding_reference(sfw, b)["out"].sum(-1), 1.0)

    lbw = hc.make_case("layernorm_bw", rows=6, hidden=8)
    c = case_inputs.make_binding_inputs(lbw, rng)
    assert set(c) == {"inp", "gamma", "beta", "out_grad"}
    r = references.binding_reference(lbw, c)
    x64, g64, b64, dy = (c[k].astype(np.float64) for k in ("inp", "gamma", "beta", "out_grad"))

    def loss(x=x64, gm=g64, bt=b64):
        return float((references.layernorm_fw_ref(x, gm, bt)[0] * dy).sum())
    e = np.zeros_like(x64)
    e[2, 3] = h
    np.testing.assert_allclose(r["inp_grad"][2, 3], (loss(x64 + e) - loss(x64 - e)) / (2 * h), rtol=1e-5)
    e1 = np.zeros_like(g64)
    e1[4] = h
    np.testing.assert_allclose(r["gamma_grad"][4], (loss(gm=g64 + e1) - loss(gm=g64 - e1)) / (2 * h), rtol=1e-5)
    np.testing.assert_allclose(r["beta_grad"], dy.sum(0))
    lfw = hc.make_case("layernorm_fw", rows=6, hidden=8)
    d = case_inputs.make_binding_inputs(lfw, rng)
    assert set(d) == {"inp", "gamma", "beta"}
    assert set(references.binding_reference(lfw, d)) == set(references.binding_output_names(lfw)) == {"out"}


def test_inputs_are_the_courses_uniform_draws() -> None:
    """kt.rand draws uniform(-1, 1); a case's scale and offset stretch and move that, and every
    draw is fresh."""
    rng = np.random.default_rng(11)
    case = hc.make_case("layernorm_fw", rows=512, hidden=1024, scale=3.0, offset=5.0)
    first, again = case_inputs.make_binding_inputs(case, rng), case_inputs.make_binding_inputs(case, rng)
    x = first["inp"]
    assert x.dtype == np.float32 and 2.0 <= x.min() < 2.01 and 7.99 < x.max() <= 8.0
    assert abs(x.mean() - 5.0) < 0.01 and abs(x.std() - 3.0 / 3**0.5) < 0.01
    assert np.abs(first["gamma"]).max() <= 1.0 and np.abs(first["beta"]).max() <= 1.0
    assert not np.array_equal(again["inp"], x)
    soft = case_inputs.make_inputs(hc.make_case("softmax_bw", rows=8, softmax_len=50), rng)["soft_out"]
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-6)
    # softmax of uniform(-1, 1) rows: within a row no entry is more than e^2 times another
    assert (soft.max(-1) / soft.min(-1)).max() <= np.exp(2.0) * (1 + 1e-5)


def test_a_layernorm_backwards_gamma_is_drawn_away_from_zero() -> None:
    """Only the backward's: the forward keeps the course's uniform(-1, 1) gamma."""
    rng = np.random.default_rng(5)
    gamma = case_inputs.make_inputs(hc.make_case("layernorm_bw", rows=2, hidden=4096), rng)["gamma"]
    assert np.abs(gamma).min() >= np.float32(hc.MIN_ABS_GAMMA) and np.abs(gamma).max() <= 1.0
    assert 0.4 < (gamma > 0).mean() < 0.6
    forward = case_inputs.make_inputs(hc.make_case("layernorm_fw", rows=2, hidden=4096), rng)["gamma"]
    assert np.abs(forward).min() < hc.MIN_ABS_GAMMA
    text = hc.make_case("layernorm_bw", rows=3, hidden=8).describe_inputs()
    assert "gamma [8] uniform(-1, 1) with |gamma| >= 0.1" in text


@pytest.mark.parametrize("seed", [29, 57, 123])
def test_a_backward_reading_inp_as_the_output_passes_whatever_gamma_is_drawn(seed: int) -> None:
    """LightSeq's reading (rubrics/hw4/conventions.py) recovers x̂ = (out - beta) / gamma. These
    seeds drew, from uniform(-1, 1), a gamma within 2e-5 of zero for the [1024, 4096] case: in
    float32 that x̂ then missed gamma_grad's tolerance by 1.9-17x, so a correct backward lost a
    case by luck (an H100 grade of the convention mutant did, 2026-12-07)."""
    case = hc.make_case("layernorm_bw", rows=1024, hidden=4096)
    a = case_inputs.make_binding_inputs(case, np.random.default_rng(seed))
    x, gamma, beta = a["inp"], a["gamma"], a["beta"]
    var, mean = NumpyLib()._stats(x)  # as the float32 forward above computes them
    out = (x - mean[:, None]) / np.sqrt(var[:, None] + np.float32(hc.LN_EPS)) * gamma + beta  # saved for the backward
    xhat = (out - beta) / gamma
    gamma_grad = (a["out_grad"] * xhat).sum(axis=0, dtype=np.float32)
    expected = references.binding_reference(case, a)["gamma_grad"]
    result = references.verify(case, {"gamma_grad": gamma_grad}, {"gamma_grad": expected})
    assert result.ok, result.describe()


def _within_bs_sl(batch: int, seq: int, to_len: int | None = None) -> bool:
    """What test_utils.py's bs_sl can draw: seq 1..512, batch 1..1024 // seq, and a second
    length for the same batch within min(1024 // batch, 512)."""
    ok = 1 <= seq <= 512 and 1 <= batch <= 1024 // seq
    return ok and (to_len is None or 1 <= to_len <= min(1024 // batch, 512))


def test_public_cases_are_the_courses_own_domain() -> None:
    for case in ALL:
        if not case.public:
            continue
        p = case.params
        assert p["scale"] == 1.0 and not p.get("offset"), case.id
        if case.kind == "softmax_fw":
            assert p["nhead"] == 8 and p["mask"] == "pad" and not p["mask_future"], case.id
            assert _within_bs_sl(p["batch"], p["from_len"], p["to_len"]), case.id
        elif case.kind == "softmax_bw":
            assert p["nhead"] == 8 and _within_bs_sl(p["batch"], p["from_len"], p["softmax_len"]), case.id
        else:
            assert p["hidden"] == 32 and p["rows"] <= 1024, case.id


def test_every_case_is_inside_the_starters_domain() -> None:
    for case in ALL:
        p = case.params
        if case.kind == "softmax_fw":
            assert p["to_len"] <= 1024 and p["mask"] in hc.MASK_KINDS
            assert not p["mask_future"] or p["from_len"] == p["to_len"], case.id  # self-attention only
            assert "mask" in abi.abi_shapes(case)  # the launcher always reads a mask
        elif case.kind == "softmax_bw":
            assert p["softmax_len"] <= 2048 and p["rows"] % 4 == 0, case.id
        else:
            assert p["hidden"] % 4 == 0 and p["hidden"] <= 4096 and p["scale"] >= hc.MIN_LN_SCALE, case.id


@pytest.mark.parametrize("kind,params,match", [
    ("softmax_fw", dict(batch=1, nhead=1, from_len=2, to_len=1025, mask_future=False), "to_len"),
    ("softmax_bw", dict(rows=6, softmax_len=8), "multiple of 4"),
    ("softmax_bw", dict(rows=4, softmax_len=2049), "softmax_len"),
    ("layernorm_fw", dict(rows=2, hidden=8192), "4096"),
    ("layernorm_bw", dict(rows=2, hidden=64, scale=0.01), "eps convention"),
])
def test_cases_outside_the_domain_are_refused(kind: str, params: dict, match: str) -> None:
    with pytest.raises(hc.CaseError, match=match):
        hc.make_case(kind, **params)


def test_cases_describe_how_to_rebuild_their_inputs() -> None:
    text = hc.make_case("softmax_fw", batch=2, nhead=8, from_len=5, to_len=33, mask_future=True,
                        mask="none").describe_inputs()
    assert "inp [2, 8, 5, 33] uniform(-1, 1)" in text and "attn_mask [2, 1, 1, 33] zeros" in text
    assert "mask_future=True" in text
    text = hc.make_case("layernorm_bw", rows=3, hidden=8, offset=5).describe_inputs()
    assert "uniform(-1, 1) + 5" in text and "out_grad" in text
