"""The child's side of a library-call problem (worker.library_call): inputs held on the GPU, one
function of a built library called on them, its last output copied back through the arena.

An assignment's operations file (copied into the child's tree) imports this module and calls
`declare` with how its function is called; the parent names the library, the function and the
case in each message, and reads each output back (`read`) apart from the timed calls. Device
memory comes from torch; the parent holds the clock and checks every output.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

from worker.gpu.channel import ArrayRef
from worker.gpu.child import ChildState, handler

# (the function, its input, its output) -> None: one call, queued on the default stream
Invoke = Callable[[Any, Any, Any], None]
_DECLARED: dict[str, Any] = {}


def declare(argtypes: list[Any], invoke: Invoke) -> None:
    """How the assignment's function is called: its ctypes argument types and one call of it
    on torch tensors (the case's input, the output to write)."""
    _DECLARED.update(argtypes=argtypes, invoke=invoke)


def _function(state: ChildState, library: str, name: str) -> Any:
    key = f"fn:{library}:{name}"
    if key not in state.memo:
        fn = getattr(ctypes.CDLL(str(state.root / library)), name)
        fn.argtypes, fn.restype = _DECLARED["argtypes"], None
        state.memo[key] = fn
    return state.memo[key]


@handler("put")
def put(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """The arena's input copied to the GPU under the case's id."""
    import torch

    host = state.arena.view(ArrayRef.from_json(msg["input"]))
    state.memo[f"in:{msg['case']}"] = torch.from_numpy(host.copy()).cuda()
    return {}


@handler("call")
def call(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """`calls` calls of the function on the case's input into its output (of `shape`; set to NaN
    first, so a function that writes nothing is seen), then one synchronize: what is timed."""
    import torch

    key = f"out:{msg['case']}"
    if key not in state.memo:
        state.memo[key] = torch.empty(tuple(msg["shape"]), dtype=torch.float32, device="cuda")
    fn, data, out = _function(state, msg["library"], msg["function"]), state.memo[f"in:{msg['case']}"], state.memo[key]
    out.fill_(math.nan)
    for _ in range(int(msg["calls"])):
        _DECLARED["invoke"](fn, data, out)
    torch.cuda.synchronize()
    return {}


@handler("read")
def read(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """The case's last output copied into the arena at `out`, for the parent to check."""
    state.arena.view(ArrayRef.from_json(msg["out"]))[...] = state.memo[f"out:{msg['case']}"].cpu().numpy()
    return {}
