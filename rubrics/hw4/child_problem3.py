"""Child-side operations for hw4's Problem 3 (run inside the sandbox, cwd = the submission).

Problem 3 asks the student to adopt the fused ops in MultiHeadAttention / TransformerLayer /
DecoderLM behind `use_fused_kernel`. These handlers build the submission's OWN DecoderLM
twice (unfused and fused, identical parameters), run steps the parent asks for and report
what happened; the parent draws every input, keeps the clock and judges the results.

- `p3_setup`  {config}: import the student's minitorch, wrap the backend's fused ops
  (attn_softmax_fw/bw, layernorm_fw/bw) with call counters, build both models as the course's
  driver does (`DecoderLM(**config)`, p_dropout 0) and copy every parameter of the unfused
  model into its counterpart in the fused one, paired by role (rubrics.hw4.parameter_roles:
  the fused branch is the student's design, so names and order may differ). Gradients and
  the names reported are in the unfused model's order, the fused model's mapped to it. A
  model that cannot be built or paired is reported as `{"setup_failure": {case_id, message}}`.
- `p3_step`   {model, tokens, grad, want_logits, logits_out, grads_out, device_memory}: one
  forward + backward(grad), optionally writing the logits and every parameter's gradient;
  reports the step's peak host memory (and the device's, sampled, with device_memory).
- `p3_logits` {model, tokens, out}: forward only (the parent's causality probe).

The call counts are reported by code that shares a process with the student's, so they
diagnose honest mistakes (a fused path that silently composes basic ops), not forgery; a
submission that fakes them gains nothing, since its speed is measured by the parent.
"""
from __future__ import annotations

import importlib
import inspect
import os
import random
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from rubrics.hw4.parameter_roles import ParameterMappingError, Shape, map_parameters
from worker.gpu.channel import ArrayRef
from worker.gpu.child import ChildState, handler
from worker.gpu.step_memory import StepMemory

FUSED_OPS = ("attn_softmax_fw", "attn_softmax_bw", "layernorm_fw", "layernorm_bw")
MODELS = ("unfused", "fused")


def _counting(name: str, fn: Callable[..., Any], counts: dict[str, int]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return fn(*args, **kwargs)

    counted._kg_counted = True  # type: ignore[attr-defined]
    counted.__name__ = getattr(fn, "__name__", name)
    counted.__doc__ = getattr(fn, "__doc__", None)
    return counted


def install_counters(ops: type, counts: dict[str, int]) -> list[str]:
    """Replace each fused op of the ops CLASS by a counting wrapper (before any TensorBackend
    copies it). Returns the names found."""
    found = []
    for name in FUSED_OPS:
        if not hasattr(ops, name):
            continue
        current = getattr(ops, name)  # a staticmethod resolves to the plain function
        if getattr(current, "_kg_counted", False):
            found.append(name)
            continue
        setattr(ops, name, staticmethod(_counting(name, current, counts)))
        found.append(name)
    return found


def wrap_backend(backend: Any, counts: dict[str, int]) -> None:
    """A backend that bound its fused ops some other way gets counters on the instance too."""
    for name in FUSED_OPS:
        attr = getattr(backend, name, None)
        if callable(attr) and not getattr(attr, "_kg_counted", False):
            try:
                setattr(backend, name, _counting(name, attr, counts))
            except (AttributeError, TypeError):
                pass


def _seed(mt: Any, seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    seeder = getattr(mt, "seed", None)
    if callable(seeder):
        seeder(seed)


def make_tensor(mt: Any, backend: Any, array: np.ndarray) -> Any:
    """A float32 tensor through the course-style API: tensor_from_numpy when the package has
    it, else Tensor.make on a flat storage, else minitorch.tensor(list) (slow, last resort)."""
    data = np.array(array, dtype=np.float32)  # always a private copy
    if hasattr(mt, "tensor_from_numpy"):
        return mt.tensor_from_numpy(data, backend=backend)
    tensor_cls = getattr(mt, "Tensor", None)
    if tensor_cls is not None and hasattr(tensor_cls, "make"):
        return tensor_cls.make(data.reshape(-1), tuple(data.shape), backend=backend)
    return mt.tensor(data.tolist(), backend=backend)


# The keys of the course's driver (project/run_machine_translation.py, main): DecoderLM(**config).
DRIVER_KEYS = ("n_vocab", "n_embd", "n_head", "n_positions", "p_dropout", "ln_eps", "backend", "use_fused_kernel")


class SetupFailure(Exception):
    """The submission's DecoderLM cannot be graded as built: a failed case, not a crash."""

    def __init__(self, case_id: str, message: str) -> None:
        super().__init__(message)
        self.case_id, self.message = case_id, message


def driver_config(cfg: dict[str, Any], backend: Any, fused: bool) -> dict[str, Any]:
    """The driver's config, p_dropout 0 so that both models compute the same function."""
    return dict(n_vocab=int(cfg["n_vocab"]), n_embd=int(cfg["n_embd"]), n_head=int(cfg["n_head"]),
                n_positions=int(cfg["n_positions"]), p_dropout=0.0, ln_eps=1e-5, backend=backend,
                use_fused_kernel=fused)


def _driver_call() -> str:
    return "DecoderLM(**config) with the keys " + ", ".join(DRIVER_KEYS)


def _check_takes_flag(cls: Any) -> None:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return  # no signature to read: the call below says what is wrong
    if "use_fused_kernel" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    raise SetupFailure("p3-constructs", (
        "DecoderLM does not take use_fused_kernel: the course's driver (project/run_machine_translation.py) "
        f"builds the model as {_driver_call()}, and Problem 3 compares DecoderLM(use_fused_kernel=False) "
        "with DecoderLM(use_fused_kernel=True); without that argument it could not be graded"))


def build_model(mt: Any, cfg: dict[str, Any], backend: Any, fused: bool) -> Any:
    """DecoderLM(**config) as the driver calls it; whatever the student's code raises while
    building is reported as a failed case naming the model."""
    try:
        return mt.DecoderLM(**driver_config(cfg, backend, fused))
    except Exception as exc:
        text = str(exc).strip()
        raise SetupFailure("p3-constructs", (
            f"building DecoderLM(use_fused_kernel={fused}) as the course's driver does ({_driver_call()}) "
            f"raised {type(exc).__name__}{': ' + text if text else ''}{_where(exc)}")) from exc


def _where(exc: BaseException) -> str:
    """` at minitorch/x.py line N`: the innermost frame in the submission (the cwd), if any;
    never a path of the grader's machine."""
    cwd = os.getcwd() + os.sep
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename
        if os.path.isabs(path):
            if not path.startswith(cwd):
                continue
            path = path[len(cwd):]
        return f" at {path} line {frame.lineno}"
    return ""


def _shape(p: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in p.value.shape)


def _used_parameters(mt: Any, backend: Any, model: Any) -> set[str] | None:
    """The names of the parameters that get a gradient from one tiny step of `model` (one
    sequence of two tokens); None where that step raises (the checked steps will say so)."""
    try:
        tokens = make_tensor(mt, backend, np.zeros((1, 2), dtype=np.float32))
        logits = model(idx=tokens)
        logits.backward(make_tensor(mt, backend, np.ones(tuple(int(s) for s in logits.shape), dtype=np.float32)))
        return {n for n, p in model.named_parameters() if getattr(p.value, "grad", None) is not None}
    except Exception:
        return None
    finally:
        _reset_grads(model)


def pair_parameters(mt: Any, backend: Any, unfused: Any,
                    fused: Any) -> tuple[list[tuple[str, Any, str, Any]], list[tuple[str, Shape]]]:
    """(unfused name, parameter, fused name, parameter) for every unfused parameter, in the
    unfused model's named_parameters order, paired by role; and the fused model's parameters
    that pair with none, (name, shape): they keep the fused model's own values.

    Where the fused model has parameters the unfused lacks, it may hold the unfused model's
    modules without using them (its own gamma and beta instead): then the unfused parameters
    pair with the fused ones its step uses, if all of them can."""
    src, dst = list(unfused.named_parameters()), list(fused.named_parameters())
    listed = [(n, _shape(p)) for n, p in src]
    try:
        mapping, fused_only = map_parameters(listed, [(n, _shape(p)) for n, p in dst])
    except ParameterMappingError as exc:
        raise SetupFailure("p3-parameters-pair", str(exc)) from exc
    used = _used_parameters(mt, backend, fused) if fused_only else None
    if used is not None and any(n not in used for n in mapping.values()):
        try:
            mapping, _ = map_parameters(listed, [(n, _shape(p)) for n, p in dst if n in used])
        except ParameterMappingError:
            pass  # the pairing by name stands; the gradient check names what got no gradient
        paired = set(mapping.values())
        fused_only = [(n, _shape(p)) for n, p in dst if n not in paired]
    by_name = dict(dst)
    return [(n, p, mapping[n], by_name[mapping[n]]) for n, p in src], fused_only


def _copy_parameters(pairs: list[tuple[str, Any, str, Any]], mt: Any, backend: Any) -> int:
    """Copy each unfused parameter's value into its fused counterpart; returns the elements copied."""
    elements = 0
    for s_name, s_p, d_name, d_p in pairs:
        value = np.asarray(s_p.value.to_numpy(), dtype=np.float32)
        if tuple(d_p.value.shape) != value.shape:  # map_parameters pairs equal shapes only
            raise ValueError(f"parameter {s_name} {value.shape} vs {d_name} {tuple(d_p.value.shape)}")
        data = d_p.value._tensor
        storage = getattr(data, "_storage", None)
        contiguous = getattr(data, "is_contiguous", lambda: False)()
        if isinstance(storage, np.ndarray) and contiguous and storage.size == value.size:
            storage[...] = value.reshape(storage.shape)
        else:
            fresh = make_tensor(mt, backend, value)
            d_p.update(fresh)
        if not np.array_equal(np.asarray(d_p.value.to_numpy(), dtype=np.float32), value):
            raise ValueError(f"copying parameter {s_name} into the fused model's {d_name} did not take")
        elements += value.size
    return elements


def _load_backend(mt: Any, kind: str) -> type:
    if kind == "cuda":
        cuda_ops: type = importlib.import_module("minitorch.cuda_kernel_ops").CudaKernelOps
        return cuda_ops
    if kind == "numpy":  # our kit's CPU backend: CPU tests of the grader only
        ops = getattr(mt, "NumpyOps", None)
        if ops is None:
            ops = importlib.import_module("minitorch.fast_ops").NumpyOps
        return type(ops) if not isinstance(ops, type) else ops
    raise ValueError(f"unknown backend {kind!r}")


@handler("p3_setup")
def p3_setup(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    cfg = msg["config"]
    mt = importlib.import_module("minitorch")
    ops = _load_backend(mt, str(cfg.get("backend", "cuda")))
    counts = {name: 0 for name in FUSED_OPS}
    wrapped = install_counters(ops, counts)
    backend = mt.TensorBackend(ops)
    wrap_backend(backend, counts)
    seed = int(cfg.get("seed", 0))
    models = {}
    try:
        _check_takes_flag(mt.DecoderLM)
        for name in MODELS:
            _seed(mt, seed)  # the same draws for both: the copy below makes it exact regardless
            models[name] = build_model(mt, cfg, backend, name == "fused")
        pairs, fused_only = pair_parameters(mt, backend, models["unfused"], models["fused"])
    except SetupFailure as exc:
        return {"setup_failure": {"case_id": exc.case_id, "message": exc.message}, "fused_ops_found": wrapped}
    elements = _copy_parameters(pairs, mt, backend)
    # Both models' parameters in one order (the unfused model's): _write_grads writes the
    # fused model's gradients role by role against the unfused ones.
    ordered = {"unfused": [(u, up) for u, up, _, _ in pairs], "fused": [(f, fp) for _, _, f, fp in pairs]}
    state.memo["p3"] = {"mt": mt, "backend": backend, "models": models, "counts": counts, "ordered": ordered}
    return {"parameters": len(pairs), "parameter_elements": elements, "fused_ops_found": wrapped,
            "parameter_names": [u for u, _, _, _ in pairs], "fused_parameter_names": [f for _, _, f, _ in pairs],
            "parameter_shapes": [list(_shape(up)) for _, up, _, _ in pairs],
            "fused_only_parameters": [[n, list(shape)] for n, shape in fused_only]}


def _context(state: ChildState, msg: dict[str, Any]) -> tuple[Any, Any, Any, dict[str, int]]:
    p3 = state.memo.get("p3")
    if p3 is None:
        raise RuntimeError("p3_setup has not run")
    model = msg.get("model")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}")
    return p3["mt"], p3["backend"], p3["models"][model], p3["counts"]


def _tokens(state: ChildState, mt: Any, backend: Any, ref: dict[str, Any]) -> tuple[Any, tuple[int, int]]:
    ids = state.arena.view(ArrayRef.from_json(ref))
    if ids.ndim != 2:
        raise ValueError(f"tokens must be [batch, seq], got {ids.shape}")
    # Token ids as float32 values, as the course's DecoderLM takes them (exact below 2**24),
    # with requires_grad set as the driver's loss_fn sets it on its batch.
    tokens = make_tensor(mt, backend, ids.astype(np.float32))
    tokens.requires_grad_(True)
    return tokens, (int(ids.shape[0]), int(ids.shape[1]))


def _forward(state: ChildState, msg: dict[str, Any], tokens_key: str) -> tuple[Any, Any, Any, dict[str, int]]:
    mt, backend, model, counts = _context(state, msg)
    for name in counts:
        counts[name] = 0
    tokens, (batch, seq) = _tokens(state, mt, backend, msg[tokens_key])
    logits = model(idx=tokens)  # the driver calls it so (run_machine_translation.py loss_fn)
    shape = tuple(int(s) for s in logits.shape)
    n_vocab = int(getattr(model, "n_vocab", shape[-1]))
    if shape != (batch, seq, n_vocab):
        raise ValueError(f"DecoderLM returned logits of shape {list(shape)}, expected {[batch, seq, n_vocab]}")
    return mt, backend, logits, counts


def _write(state: ChildState, ref: dict[str, Any], tensor: Any) -> None:
    out = state.arena.view(ArrayRef.from_json(ref))
    out[...] = np.asarray(tensor.to_numpy(), dtype=np.float32).reshape(out.shape)


def _write_grads(state: ChildState, ref: dict[str, Any], params: list[tuple[str, Any]]) -> None:
    """Every parameter's gradient, flattened and concatenated in the paired order of p3_setup
    (the unfused model's named_parameters order); a parameter without a gradient is written
    as NaN (the parent sees it)."""
    out = state.arena.view(ArrayRef.from_json(ref)).reshape(-1)
    pos = 0
    for name, p in params:
        n = int(np.prod(tuple(int(s) for s in p.value.shape)))
        if pos + n > out.size:
            raise ValueError("the parameters outgrew the gradient buffer")
        grad = getattr(p.value, "grad", None)
        if grad is None:
            out[pos:pos + n] = np.nan
        else:
            arr = np.asarray(grad.to_numpy(), dtype=np.float32)
            if arr.size != n:
                raise ValueError(f"gradient of {name} has {arr.size} values for a parameter of {n}")
            out[pos:pos + n] = arr.reshape(-1)
        pos += n
    if pos != out.size:
        raise ValueError(f"{pos} parameter values for a gradient buffer of {out.size}")


def _reset_grads(model: Any) -> None:
    for p in model.parameters():
        value = p.value
        if hasattr(value, "grad"):
            value.grad = None
        if hasattr(value, "derivative"):  # older MiniTorch's name
            value.derivative = None


@handler("p3_step")
def p3_step(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """One training step's forward and backward: logits = model(tokens); logits.backward(grad);
    with `grads_out`, every parameter's gradient is written to the arena inside the step (so
    the timed call cannot defer or skip the backward work: the parent verifies it).

    The timed step is forward + backward without an optimizer update: those are the parts the
    fused kernels change (attention softmax and LayerNorm, forward and backward); an optimizer
    step is the same elementwise work in both models and would only dilute the ratio. The
    upstream gradient comes from the parent (a random logits-shaped tensor) instead of a loss,
    so the student's loss code is not part of the comparison either. Parameter gradients are
    reset before each step so that they never accumulate across steps."""
    _, _, model, _ = _context(state, msg)
    _reset_grads(model)
    with StepMemory(device=bool(msg.get("device_memory"))) as memory:
        mt, backend, logits, counts = _forward(state, msg, "tokens")
        grad_view = state.arena.view(ArrayRef.from_json(msg["grad"]))
        if tuple(grad_view.shape) != tuple(int(s) for s in logits.shape):
            raise ValueError(f"upstream gradient {list(grad_view.shape)} does not match logits {list(logits.shape)}")
        logits.backward(make_tensor(mt, backend, grad_view))
        with_grad = sum(1 for p in model.parameters() if getattr(p.value, "grad", None) is not None)
        if msg.get("want_logits") and msg.get("logits_out") is not None:
            _write(state, msg["logits_out"], logits)
        if msg.get("grads_out") is not None:
            _write_grads(state, msg["grads_out"], state.memo["p3"]["ordered"][msg["model"]])
    return {"counts": dict(counts), "params_with_grad": with_grad, "memory": memory.figures()}


@handler("p3_logits")
def p3_logits(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    _, _, logits, counts = _forward(state, msg, "tokens")
    _write(state, msg["out"], logits)
    return {"counts": dict(counts)}
