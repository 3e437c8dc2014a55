"""Child-side operations for hw4's kernel problems (run inside the sandbox).

`abi`: call the student's launch function through ctypes on arrays in the arena.
`binding_prepare` / `binding_forward` / `binding_run` / `binding_read`: the same computation
through the student's MiniTorch, either the fused op ("custom") or the composition of basic ops
("baseline"), called exactly as the course's current kernel_tests call them
(rubrics/hw4/CONTRACT.md). As in the course's tests, tensors are made (and a backward's forward
is run) before the clock, `binding_run` is what each test's custom() and baseline() put inside
their clock, and the results are read after it. The parent times `binding_run` and
`binding_read` on its own clock.
"""
from __future__ import annotations

import ctypes
import importlib
import statistics
from typing import Any

import numpy as np

from rubrics.hw4.abi import abi_call, family, library_of, load_abi, prepared_forward
from rubrics.hw4.cases import LN_EPS, Case
from worker.gpu.channel import ArrayRef
from worker.gpu.child import ChildState, handler

# The LayerNorm backward's leaves and the names of their gradients sent back.
GRADIENTS = {"layernorm": (("inp", "inp_grad"), ("gamma", "gamma_grad"), ("beta", "beta_grad"))}


def _views(state: ChildState, refs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: state.arena.view(ArrayRef.from_json(ref)) for name, ref in refs.items()}


def _library(state: ChildState, case: Case) -> Any:
    key = f"lib:{family(case.kind)}"
    if key not in state.memo:
        state.memo[key] = load_abi(case.kind, state.root / library_of(case.kind))
    return state.memo[key]


@handler("load_library")
def load_library(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """Load one of the submission's libraries as ctypes loads it (its constructors run), for
    rubrics.hw4.loading."""
    ctypes.CDLL(str(state.root / msg["path"]))
    return {}


@handler("load_minitorch")
def load_minitorch(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """Import the submission's minitorch with its CUDA backend, as the binding does (the
    course's backend loads every library at import), for rubrics.hw4.loading."""
    _minitorch(state)
    return {}


@handler("abi")
def abi(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    case = Case(**msg["case"])
    abi_call(_library(state, case), case, _views(state, msg["arrays"]))
    return {}


@handler("kernel_time")
def kernel_time(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """GPU time of the kernels that one C ABI call launches, without its copies: CUPTI's
    activity records (through torch.profiler) of `calls` back-to-back calls.
    Informational only (it runs beside the student's code, which could tamper with it); the
    speedup that scores is timed by the parent."""
    import torch  # noqa: PLC0415 - only where the course's binding runs
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    case, calls = Case(**msg["case"]), int(msg["calls"])
    lib, arrays = _library(state, case), _views(state, msg["arrays"])
    abi_call(lib, case, arrays)  # warm-up: module load and first-launch costs stay outside
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            abi_call(lib, case, arrays)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))]
    if not kernels:
        raise RuntimeError("the profiler saw no kernel launch")
    durations: dict[str, list[float]] = {}
    for e in kernels:
        durations.setdefault(e.name, []).append(e.time_range.elapsed_us())
    # Per kernel, its median launch times its launches per call: robust to a launch that
    # waited out another process's time slice (other problems' checks share the GPU).
    per_call_us = sum(statistics.median(d) * len(d) / calls for d in durations.values())
    return {"kernel_ms": per_call_us / 1000.0, "kernels": sorted(durations)[:8]}


def _minitorch(state: ChildState) -> tuple[Any, Any]:
    if "backend" not in state.memo:
        mt = importlib.import_module("minitorch")
        ops = importlib.import_module("minitorch.cuda_kernel_ops").CudaKernelOps
        state.memo["mt"], state.memo["backend"] = mt, mt.TensorBackend(ops)
    return state.memo["mt"], state.memo["backend"]


def _tensor(mt: Any, backend: Any, array: np.ndarray, course: bool) -> Any:
    """A leaf tensor with requires_grad=True, as the course's tests make every tensor.
    `course`: through minitorch.tensor(list), their very call; else tensor_from_numpy where
    the package has it (the timing trials make tens of MB of tensors)."""
    data = np.array(array, dtype=np.float32)
    if not course and hasattr(mt, "tensor_from_numpy"):
        return mt.tensor_from_numpy(data, backend=backend, requires_grad=True)
    return mt.tensor(data.tolist(), backend=backend, requires_grad=True)


def _attn_softmax_function(mt: Any) -> Any:
    found = getattr(mt, "Attn_Softmax", None)
    return found if found is not None else importlib.import_module("minitorch.tensor_functions").Attn_Softmax


def _forward(mt: Any, kind: str, variant: str, t: dict[str, Any]) -> Any:
    """The forward ops of test_softmax_fw / test_layernorm_fw (custom and baseline)."""
    if family(kind) == "softmax":
        if variant == "custom":
            return t["inp"].attn_softmax(t["mask"])
        return mt.nn.softmax(t["inp"] + t["mask"], dim=3)
    if variant == "custom":
        return t["inp"].layernorm(t["gamma"], t["beta"])
    x = t["inp"].contiguous()
    batch, _ = x.shape
    mean = x.mean(dim=1).view(batch, 1)
    variance = x.var(dim=1).view(batch, 1)
    return t["gamma"] * ((x - mean) / ((variance + LN_EPS) ** 0.5)) + t["beta"]


def _softmax_backward(mt: Any, variant: str, one: dict[str, Any]) -> Any:
    """test_softmax_bw's timed part: Attn_Softmax.backward on the forward's context (custom),
    or the explicit composition y * (g - sum(g * y)) over the last dim (baseline)."""
    soft, grad = one["out"], one["grad"]
    if variant == "custom":
        result = _attn_softmax_function(mt).backward(soft.history.ctx, grad)
        return result[0] if isinstance(result, (tuple, list)) else result
    b, h, f, _ = soft.shape
    tsum = (grad * soft).sum(dim=3).view(b, h, f, 1)
    return soft * (grad - tsum)


def _layernorm_backward_baseline(mt: Any, backend: Any, leaves: dict[str, Any], grad: Any) -> dict[str, Any]:
    """test_layernorm_bw's baseline: the backward formula composed of basic ops, with the
    standard deviation sqrt(var) made into a tensor inside the clock, as the course does."""
    x, gamma = leaves["inp"], leaves["gamma"]
    hidden = x.shape[1]
    means, variances = x.mean(dim=1), x.var(dim=1)
    stds = mt.tensor(np.sqrt(variances.to_numpy()).reshape(-1, 1).tolist(), backend=backend, requires_grad=True)
    xhat = (x - means) / stds
    dxhat = grad * gamma
    beta_grad = grad.sum(dim=0)
    gamma_grad = (grad * xhat).sum(dim=0)
    dinp = dxhat.sum(dim=1) + xhat * (dxhat * xhat).sum(dim=1)
    dinp = (dxhat - dinp / hidden) / stds
    return {"inp_grad": dinp, "gamma_grad": gamma_grad, "beta_grad": beta_grad}


@handler("binding_warm")
def binding_warm(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """A child's one-time costs (MiniTorch imported, CUDA context made, the basic-ops library
    loaded) paid on a few basic ops of no problem in particular, before any timing."""
    mt, backend = _minitorch(state)
    x = _tensor(mt, backend, np.arange(6, dtype=np.float32).reshape(2, 3), course=False)
    (x * x + x).sum(dim=1).to_numpy()
    _synchronize(state)
    return {}


@handler("binding_prepare")
def binding_prepare(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """`reps` independent computations, each with its own tensors made from the real inputs
    (arrays with a leading `reps` axis), outside the clock as in the course's tests; the
    upstream gradient becomes a tensor of its own. A backward's forward follows in
    `binding_forward`."""
    mt, backend = _minitorch(state)
    variant = msg["variant"]
    course = bool(msg.get("course_tensors", False))
    stacked = _views(state, msg["arrays"])
    prepared = []
    for i in range(int(msg.get("reps", 1))):
        inputs = {name: a[i] for name, a in stacked.items()}
        grad = inputs.pop("out_grad", None)
        one: dict[str, Any] = {"leaves": {name: _tensor(mt, backend, a, course) for name, a in inputs.items()}}
        if grad is not None:
            one["grad"] = _tensor(mt, backend, grad, course)
        prepared.append(one)
    state.memo[f"prepared:{variant}"] = prepared
    return {}


@handler("binding_forward")
def binding_forward(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """A backward kind's forward on each prepared computation, as the course's tests run it
    before their clock starts (abi.prepared_forward: a softmax backward's baseline takes
    nn.softmax(inp), its custom attn_softmax(inp, mask)). A request of its own, so a forward
    that never returns is told apart from the tensors' making (rubrics.hw4.hangs)."""
    mt, _ = _minitorch(state)
    kind, variant = msg["kind"], msg["variant"]
    for one in state.memo[f"prepared:{variant}"]:
        if prepared_forward(kind, variant) == "baseline":
            one["out"] = mt.nn.softmax(one["leaves"]["inp"], dim=3)
        else:
            one["out"] = _forward(mt, kind, "custom", one["leaves"])
    return {}


def _synchronize(state: ChildState) -> None:
    """Wait for the GPU (the driver's cuCtxSynchronize), so that work a fused op left running
    asynchronously is inside the clock; a no-op where no context is current."""
    if "libcuda" not in state.memo:
        try:
            state.memo["libcuda"] = ctypes.CDLL("libcuda.so.1")
        except OSError:
            state.memo["libcuda"] = None
    if state.memo["libcuda"] is not None:
        state.memo["libcuda"].cuCtxSynchronize()


def _compute(mt: Any, backend: Any, kind: str, variant: str, one: dict[str, Any]) -> dict[str, Any]:
    """One prepared computation: the tensors it yields, by output name."""
    leaves = one["leaves"]
    if kind.endswith("_fw"):
        return {"out": _forward(mt, kind, variant, leaves)}
    if kind == "softmax_bw":
        return {"inp_grad": _softmax_backward(mt, variant, one)}
    if variant == "custom":
        one["out"].backward(one["grad"])
        return {name: leaves[leaf].grad for leaf, name in GRADIENTS["layernorm"]}
    return _layernorm_backward_baseline(mt, backend, leaves, one["grad"])


@handler("binding_run")
def binding_run(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """The timed part (the parent's clock): each prepared computation in turn, then a wait
    for the GPU. What each computation yields is kept for `binding_read`."""
    mt, backend = _minitorch(state)
    kind, variant = msg["kind"], msg["variant"]
    prepared = state.memo.pop(f"prepared:{variant}")
    state.memo[f"results:{variant}"] = [_compute(mt, backend, kind, variant, one) for one in prepared]
    _synchronize(state)
    return {}


@handler("binding_read")
def binding_read(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """The results of the last `binding_run` into the arrays the parent asked for (a leading
    `reps` axis). Timed apart from the computation, as the course reads its results after its
    clock; the parent compares the fused op's read with the composition's, so work deferred
    into the read is still counted."""
    outputs = _views(state, msg["outputs"])
    for i, results in enumerate(state.memo.pop(f"results:{msg['variant']}")):
        for name, tensor in results.items():
            if name in outputs:
                outputs[name][i] = tensor.to_numpy().reshape(outputs[name].shape[1:])
    return {}
