"""The sandboxed child: runs requested operations on the submission's code, nothing else.

    python -m worker.gpu.child --fd N --arena PATH --arena-size BYTES --handlers MODULE_OR_FILE

Started by the trusted parent inside the sandbox with cwd = a copy of the staged submission
(so the student's MiniTorch finds its .so files by their relative paths). It answers each
request with {"ok": true, ...} or {"ok": false, "error": ...}. Verdicts and times are the
parent's: the child only computes.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib
import importlib.util
import os
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.gpu.channel import Arena, Channel, ChannelClosed
from worker.sandbox.limits import GRADER_TMP

Handler = Callable[["ChildState", dict[str, Any]], dict[str, Any]]
HANDLERS: dict[str, Handler] = {}


def handler(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[name] = fn
        return fn

    return register


class ChildState:
    """What handlers keep between requests (loaded libraries, prepared tensors)."""

    def __init__(self, arena: Arena, root: Path) -> None:
        self.arena = arena
        self.root = root
        self.memo: dict[str, Any] = {}


def _cuda_context() -> None:
    """Make and release a CUDA context on the child's GPU through the driver API (raises
    RuntimeError saying which call failed): proof that the sandbox reaches the GPU."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"no CUDA driver in the sandbox: {exc}") from exc
    device, context = ctypes.c_int(0), ctypes.c_void_p()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), 0)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(context), device))):
        status = getattr(cuda, call)(*args)
        if status != 0:
            raise RuntimeError(f"{call} failed with CUDA error {status}")
    cuda.cuDevicePrimaryCtxRelease(device)


@handler("ready")
def _ready(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """Our side of the child is up: the interpreter, the handlers and, with `cuda`, a CUDA
    context, before any of the submission's code runs (the parent's way to tell our faults
    from the submission's: rubrics.hw4.loading)."""
    if msg.get("cuda"):
        _cuda_context()
    return {"python": sys.version.split()[0]}


def import_operations(name: str) -> None:
    """Import an assignment's operations, which register their handlers: a module name
    (rubrics.hw4.child_kernels), or a .py file (an assignment kept beside its rubric copies its
    operations into the child's tree: the sandbox shows only the project's worker/ package)."""
    if not name.endswith(".py"):
        importlib.import_module(name)
        return
    spec = importlib.util.spec_from_file_location(f"kg_operations_{Path(name).stem}", name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no Python file {name}")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def serve(channel: Channel, state: ChildState) -> None:
    while True:
        try:
            msg = channel.recv(None)
        except ChannelClosed:
            return
        op = msg.get("op", "")
        try:
            fn = HANDLERS[op]
        except KeyError:
            channel.send({"ok": False, "error": f"unknown operation {op!r}"})
            continue
        try:
            reply = fn(state, msg)
            reply["ok"] = True
        except Exception as exc:  # the student's code failed: report it, keep serving
            tail = "".join(traceback.format_exception(exc)[-6:])
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": tail[-4000:]}
        channel.send(reply)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--arena", type=Path, required=True)
    parser.add_argument("--arena-size", type=int, required=True)
    parser.add_argument("--handlers", action="append", default=[])
    args = parser.parse_args(argv)
    for name in args.handlers:
        import_operations(name)
    # Run as `python -m worker.gpu.child`, this file is __main__: a second copy of the module,
    # while the handler modules registered into the imported worker.gpu.child's table.
    HANDLERS.update(importlib.import_module("worker.gpu.child").HANDLERS)
    if os.path.isdir(GRADER_TMP):
        tempfile.tempdir = GRADER_TMP  # our temporary files (the profiler's) outside the submission's quota
    root = Path.cwd()
    sys.path.insert(0, str(root))  # the submission's own packages (minitorch) come from its tree
    channel = Channel(socket.socket(fileno=args.fd))
    serve(channel, ChildState(Arena(args.arena, args.arena_size, create=False), root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
