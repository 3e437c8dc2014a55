"""The reduce stage's child operations: the plug-in copies this file into each child's tree and
worker.gpu.child imports it there, in the sandbox. The inputs are kept on the GPU; reduce_sum of
the student's lib/reduce.so (in a copy of the student's built tree), or reduce_sum_naive of our
kit's copy (kg_reference/reduce.so, in a child of its own), is called on them. Device memory
comes from torch; the parent holds the clock and checks every sum."""
from __future__ import annotations

import ctypes
import math
from typing import Any

from worker.gpu.channel import ArrayRef
from worker.gpu.child import ChildState, handler

# variant -> (library in the child's tree, function): the student's reduction and our naive one
FUNCTIONS = {"student": ("lib/reduce.so", "reduce_sum"), "naive": ("kg_reference/reduce.so", "reduce_sum_naive")}


def _function(state: ChildState, variant: str) -> Any:
    key = f"fn:{variant}"
    if key not in state.memo:
        path, name = FUNCTIONS[variant]
        fn = getattr(ctypes.CDLL(str(state.root / path)), name)
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int], None
        state.memo[key] = fn
    return state.memo[key]


@handler("put")
def put(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """The arena's input copied to the GPU under the case's id."""
    import torch

    host = state.arena.view(ArrayRef.from_json(msg["input"]))
    state.memo[f"in:{msg['case']}"] = torch.from_numpy(host.copy()).cuda()
    if "out" not in state.memo:  # the one output float every call writes
        state.memo["out"] = torch.empty(1, dtype=torch.float32, device="cuda")
    return {}


@handler("sum")
def run_sum(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """`calls` reductions of the case's input by the variant, then one synchronize; the last
    sum (the output is set to NaN first, so a function that writes nothing is seen)."""
    import torch

    fn, data, out = _function(state, msg["variant"]), state.memo[f"in:{msg['case']}"], state.memo["out"]
    out.fill_(math.nan)
    for _ in range(int(msg["calls"])):
        fn(data.data_ptr(), out.data_ptr(), data.numel())
    torch.cuda.synchronize()
    value = float(out.item())
    return {"sum": value if math.isfinite(value) else repr(value)}
