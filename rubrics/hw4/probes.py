"""hw4's mutant probes: Python-side mutants (worker.mutants) are detected by running the
mutant tree's own MiniTorch in a child process (cwd = the tree, so `minitorch` and its
relative .so paths resolve there):

    python -m rubrics.hw4.probes probe {binding_grads|fused_calls} {cuda|numpy}

prints one JSON object. `cuda` uses CudaKernelOps (needs the built .so files, pycuda and
torch); `numpy` uses the kit's NumpyOps (CPU), which carries the same fused-op interface.
numpy and minitorch are imported inside the probes only: this module stays light.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.mutants import MutantError

FUSED_OPS = ("attn_softmax_fw", "attn_softmax_bw", "layernorm_fw", "layernorm_bw")


def _probe_backend(name: str) -> tuple[Any, Any]:  # pragma: no cover - runs in the child
    import minitorch

    if name == "cuda":
        from minitorch.cuda_kernel_ops import CudaKernelOps

        return minitorch, CudaKernelOps
    if name == "numpy":
        return minitorch, minitorch.NumpyOps
    raise SystemExit(f"unknown backend {name!r}")


def _close(got: Any, want: Any, atol: float, rtol: float) -> tuple[bool, str]:
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, f"shape {got.shape} != {want.shape}"
    diff = np.abs(got - want)
    good = np.isfinite(got) & (diff <= atol + rtol * np.abs(want))
    if good.all():
        return True, f"max_err {float(diff.max()) if diff.size else 0.0:.3g}"
    bad = int((~good).sum())
    return False, f"{bad} of {good.size} out of tolerance (atol={atol:g}, rtol={rtol:g})"


def probe_binding_grads(backend_name: str) -> dict[str, dict[str, Any]]:
    """Tensor.attn_softmax / Tensor.layernorm forward and autodiff backward through the
    tree's binding, against float64 references with the course's tolerances.
    Returns {problem id: {"ok": bool, "message": str}} for 1.1, 1.2, 2.1, 2.2."""
    import numpy as np

    mt, ops = _probe_backend(backend_name)
    backend = mt.TensorBackend(ops)
    results: dict[str, dict[str, Any]] = {}

    def record(problem: str, ok: bool, message: str) -> None:
        prev = results.get(problem)
        if prev is None or (prev["ok"] and not ok):
            results[problem] = {"ok": ok, "message": message}

    def t(arr: Any, grad: bool = False) -> Any:
        return mt.tensor_from_numpy(np.asarray(arr, dtype=np.float32), backend=backend, requires_grad=grad)

    _probe_softmax(t, record)
    _probe_layernorm(t, record)
    return results


Record = Callable[[str, bool, str], None]


def _probe_softmax(t: Callable[..., Any], record: Record) -> None:
    """1.1 and 1.2 through Tensor.attn_softmax and its backward."""
    import numpy as np

    for batch, from_len, to_len, future in ((2, 9, 9, True), (2, 40, 100, False), (1, 33, 33, False)):
        rng = np.random.default_rng(1000 * batch + to_len)
        x = rng.standard_normal((batch, 4, from_len, to_len)).astype(np.float32) * 2
        mask = np.where(rng.random((batch, to_len)) < 0.3, -1e8, 0.0).astype(np.float32)
        mask[:, 0] = 0.0
        g = rng.standard_normal(x.shape).astype(np.float32)
        z = x.astype(np.float64) + mask.astype(np.float64)[:, None, None, :]
        if future:
            z = np.where(np.triu(np.ones((from_len, to_len), bool), 1), -np.inf, z)
        y = np.exp(z - z.max(-1, keepdims=True))
        y /= y.sum(-1, keepdims=True)
        dx = y * (g - (g * y).sum(-1, keepdims=True))
        try:
            inp = t(x, True)
            out = inp.attn_softmax(t(mask), mask_future=future)
            record("1.1", *_close(out.to_numpy(), y, 1e-3, 1e-3))
        except Exception as exc:  # a crash in the binding is a failure of the problem
            record("1.1", False, f"forward: {type(exc).__name__}: {exc}")
            record("1.2", False, "forward failed")
            continue
        try:
            out.backward(t(g))
            if inp.grad is None:
                record("1.2", False, "inp.grad is None")
            else:
                record("1.2", *_close(inp.grad.to_numpy(), dx, 1e-2, 1e-3))
        except Exception as exc:
            record("1.2", False, f"backward: {type(exc).__name__}: {exc}")



def _probe_layernorm(t: Callable[..., Any], record: Record) -> None:
    """2.1 and 2.2 through Tensor.layernorm and its backward."""
    import numpy as np

    for rows, hidden in ((7, 32), (64, 256), (5, 1024)):
        rng = np.random.default_rng(rows + hidden)
        x = (rng.standard_normal((rows, hidden)) * 2 + 1).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, hidden).astype(np.float32)
        beta = rng.standard_normal(hidden).astype(np.float32)
        g = rng.standard_normal((rows, hidden)).astype(np.float32)
        x64 = x.astype(np.float64)
        rstd = 1.0 / np.sqrt(x64.var(1, keepdims=True) + 1e-8)
        xhat = (x64 - x64.mean(1, keepdims=True)) * rstd
        gx = g * gamma.astype(np.float64)
        want = {
            "inp": rstd * (gx - gx.mean(1, keepdims=True) - xhat * (gx * xhat).mean(1, keepdims=True)),
            "gamma": (g * xhat).sum(0),
            "beta": g.astype(np.float64).sum(0),
        }
        try:
            xs, gs, bs = t(x, True), t(gamma, True), t(beta, True)
            out = xs.layernorm(gs, bs)
            record("2.1", *_close(out.to_numpy(), xhat * gamma + beta, 1e-2, 1e-3))
        except Exception as exc:
            record("2.1", False, f"forward: {type(exc).__name__}: {exc}")
            record("2.2", False, "forward failed")
            continue
        try:
            out.backward(t(g))
            for name, tensor in (("inp", xs), ("gamma", gs), ("beta", bs)):
                if tensor.grad is None:
                    record("2.2", False, f"{name}.grad is None")
                    continue
                ok, message = _close(tensor.grad.to_numpy(), want[name], 1e-3, 1e-2)
                record("2.2", ok, f"{name}.grad: {message}")
        except Exception as exc:
            record("2.2", False, f"backward: {type(exc).__name__}: {exc}")


def probe_fused_calls(backend_name: str) -> dict[str, Any]:
    """Train-step of a small DecoderLM fused and unfused (same seed, no dropout): the fused
    model's calls of each backend fused op (counted by wrapping the ops class before the
    backend is built) and both losses. A fused path that silently composes basic ops shows as
    a zero count with a loss equal to the unfused one."""
    import numpy as np

    mt, ops = _probe_backend(backend_name)
    counts = {name: 0 for name in FUSED_OPS}
    for name in FUSED_OPS:
        original = getattr(ops, name)

        def counted(*args: Any, __name: str = name, __fn: Any = original, **kwargs: Any) -> Any:
            counts[__name] += 1
            return __fn(*args, **kwargs)

        setattr(ops, name, staticmethod(counted))
    backend = mt.TensorBackend(ops)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 50, (2, 12))
    targets = rng.integers(0, 50, (2, 12))
    losses: dict[str, float] = {}
    fused_counts: dict[str, int] = {}
    for fused in (False, True):
        for name in counts:
            counts[name] = 0
        mt.seed(5)
        model = mt.DecoderLM(
            n_vocab=50, n_embd=32, n_head=4, n_positions=12, p_dropout=0.0, ln_eps=1e-8,
            bias=True, backend=backend, use_fused_kernel=fused,
        )
        loss = mt.cross_entropy_loss(model(ids), targets)
        loss.backward()
        losses["fused" if fused else "unfused"] = float(loss.item())
        if fused:
            fused_counts = dict(counts)
        else:
            unfused_counts = dict(counts)
    return {"fused_counts": fused_counts, "unfused_counts": unfused_counts, "losses": losses}


PROBES = {"binding_grads": probe_binding_grads, "fused_calls": probe_fused_calls}


def probe_command(detect: str, backend: str) -> list[str]:
    """argv (minus the interpreter) of a probe child: run it with cwd = the mutant tree and
    the project root on PYTHONPATH (see probe_env)."""
    if detect not in PROBES:
        raise MutantError(f"no probe for detect={detect!r}")
    return ["-m", "rubrics.hw4.probes", "probe", detect, backend]


def probe_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a probe child: the project root first on PYTHONPATH."""
    import os

    env = dict(os.environ if base is None else base)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _main(argv: list[str]) -> int:  # pragma: no cover - exercised through subprocesses
    import json
    import sys

    if len(argv) != 3 or argv[0] != "probe" or argv[1] not in PROBES:
        print("usage: python -m rubrics.hw4.probes probe {binding_grads|fused_calls} {cuda|numpy}", file=sys.stderr)
        return 2
    # the tree under test (cwd) must win over anything else named minitorch
    sys.path.insert(0, str(Path.cwd()))
    result = PROBES[argv[1]](argv[2])
    print("PROBE_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    raise SystemExit(_main(sys.argv[1:]))
