"""float64 references of hw4's kernel cases, and the verdict on a call's outputs (trusted side).

reference() gives what one C ABI call should write, binding_reference() what one call of the
student's MiniTorch binding should return; verify() compares outputs with either under the
course's tolerance for the case's kind (rubrics.hw4.cases.TOLERANCES): |got - ref| <= atol +
rtol * |ref| element-wise, and NaN or inf in an output never passes.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rubrics.hw4.cases import LN_EPS, TOLERANCES, Case
from worker.checks import CheckResult, compare


def softmax_fw_ref(inp: np.ndarray, mask: np.ndarray | None, mask_future: bool) -> np.ndarray:
    """inp [B, H, F, T] float32; mask [B, T] or [B, 1, 1, T] additive, or None. The mask is added in float32 (as
    any float32 implementation does), then softmax in float64; mask_future hides keys j > i.
    A row whose entries are all -inf gives zeros."""
    x = np.array(inp, dtype=np.float32, copy=True)
    if mask is not None:
        m = np.asarray(mask, dtype=np.float32)
        x = x + m.reshape(m.shape[0], 1, 1, m.shape[-1])
    x = x.astype(np.float64)
    if mask_future:
        future = np.triu(np.ones(x.shape[-2:], dtype=bool), k=1)
        x = np.where(future, -np.inf, x)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = np.sum(e, axis=-1, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def softmax_bw_ref(grad: np.ndarray, y: np.ndarray) -> np.ndarray:
    g = np.asarray(grad, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    dx: np.ndarray = y * (g - np.sum(g * y, axis=-1, keepdims=True))
    return dx


def layernorm_fw_ref(inp: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, var without eps, mean) in float64."""
    x = np.asarray(inp, dtype=np.float64)
    mean = x.mean(axis=-1)
    var = x.var(axis=-1)
    xhat = (x - mean[:, None]) / np.sqrt(var[:, None] + LN_EPS)
    return xhat * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64), var, mean


def layernorm_bw_ref(dy: np.ndarray, inp: np.ndarray, gamma: np.ndarray, var: np.ndarray,
                     mean: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dgamma, dbeta, dinp) in float64; var, mean: the values handed to the kernel."""
    dy = np.asarray(dy, dtype=np.float64)
    x = np.asarray(inp, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    rstd = 1.0 / np.sqrt(np.asarray(var, np.float64)[:, None] + LN_EPS)
    xhat = (x - np.asarray(mean, np.float64)[:, None]) * rstd
    dbeta = dy.sum(axis=0)
    dgamma = (dy * xhat).sum(axis=0)
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dgamma, dbeta, dx


def reference(case: Case, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 expected outputs keyed like abi_output_names. `inputs` must be make_inputs'
    arrays as they were before the call (compute this first, or on a copy); nothing is
    modified."""
    p = case.params
    if case.kind == "softmax_fw":
        return {"inp": softmax_fw_ref(inputs["inp"], inputs.get("mask"), p["mask_future"])}
    if case.kind == "softmax_bw":
        return {"out_grad": softmax_bw_ref(inputs["out_grad"], inputs["soft_out"])}
    if case.kind == "layernorm_fw":
        out, var, mean = layernorm_fw_ref(inputs["inp"], inputs["gamma"], inputs["beta"])
        return {"ln_res": out, "vars": var, "means": mean}
    dgamma, dbeta, dx = layernorm_bw_ref(inputs["out_grad"], inputs["inp"], inputs["gamma"],
                                         inputs["vars"], inputs["means"])
    return {"gamma_grad": dgamma, "betta_grad": dbeta, "inp_grad": dx}


def binding_output_names(case: Case) -> tuple[str, ...]:
    return {
        "softmax_fw": ("out",),
        "softmax_bw": ("inp_grad",),
        "layernorm_fw": ("out",),
        "layernorm_bw": ("inp_grad", "gamma_grad", "beta_grad"),
    }[case.kind]


def binding_reference(case: Case, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 expected results of the binding path (make_binding_inputs), keyed like
    binding_output_names: the fused op's output (fw) or the gradients (bw). The layernorm
    statistics are exact (float64) here: the binding computes its own."""
    if case.kind == "softmax_fw":
        return {"out": softmax_fw_ref(inputs["inp"], inputs["mask"], False)}
    if case.kind == "softmax_bw":
        y = softmax_fw_ref(inputs["inp"], inputs["mask"], False)
        return {"inp_grad": softmax_bw_ref(inputs["out_grad"], y)}
    if case.kind == "layernorm_fw":
        return {"out": layernorm_fw_ref(inputs["inp"], inputs["gamma"], inputs["beta"])[0]}
    x64 = np.asarray(inputs["inp"], dtype=np.float64)
    dgamma, dbeta, dx = layernorm_bw_ref(inputs["out_grad"], x64, inputs["gamma"],
                                         x64.var(axis=-1), x64.mean(axis=-1))
    return {"inp_grad": dx, "gamma_grad": dgamma, "beta_grad": dbeta}



def verify(case: Case, outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> CheckResult:
    """Compare the outputs (after the call) with reference()'s or binding_reference()'s,
    with the course's tolerance for the case's kind. A missing output fails."""
    missing = [n for n in expected if n not in outputs]
    if missing:
        return CheckResult(False, float("inf"), None, case.shape, f"missing output(s) {missing}", missing[0])
    atol, rtol = TOLERANCES[case.kind]
    return compare({n: (outputs[n], expected[n]) for n in expected}, atol, rtol, case.shape)
