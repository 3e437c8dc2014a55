"""The transpose stage's call, for its children (worker.library_call copies this file into each
child's tree; worker.gpu.library_child holds the inputs and runs the calls): transpose(in, out,
rows, cols) of the student's lib/transpose.so, or transpose_naive of our kit's copy."""
from __future__ import annotations

import ctypes
from typing import Any

from worker.gpu.library_child import declare


def _invoke(fn: Any, data: Any, out: Any) -> None:
    rows, cols = data.shape
    fn(data.data_ptr(), out.data_ptr(), rows, cols)


declare([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int], _invoke)
