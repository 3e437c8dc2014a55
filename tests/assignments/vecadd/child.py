"""The vecadd stage's child: runs in the sandbox, in a copy of the student's built tree, calls
vec_add of lib/vecadd.so on each case's float32 inputs (<case>.a, <case>.b) and writes its
output to <case>.out. Standard library only (a system python3 runs it)."""
import array
import ctypes
import sys


def floats(path: str) -> array.array:
    values = array.array("f")
    with open(path, "rb") as fh:
        values.frombytes(fh.read())
    return values


def main(case_ids: list[str]) -> None:
    lib = ctypes.CDLL("./lib/vecadd.so")
    lib.vec_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.vec_add.restype = None
    for case_id in case_ids:
        a, b = floats(f"{case_id}.a"), floats(f"{case_id}.b")
        out = array.array("f", bytes(4 * len(a)))
        lib.vec_add(a.buffer_info()[0], b.buffer_info()[0], out.buffer_info()[0], len(a))
        with open(f"{case_id}.out", "wb") as fh:
            fh.write(out.tobytes())


if __name__ == "__main__":
    main(sys.argv[1:])
