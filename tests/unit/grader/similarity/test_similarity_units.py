"""grader.similarity.units finds kernels, launchers and methods by line; grader.similarity.cache
keeps fingerprints on disk by content; files identical to the base are never compared; one
function pasted into another student's file puts that pair first, the function named."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grader.similarity import compare
from grader.similarity.cache import PrintCache
from grader.similarity.compare import compare_class, own_files, starter_sources
from grader.similarity.prints import Fingerprinting, fingerprint_file
from grader.similarity.units import functions_of
from tests.fixtures.similarity_class import generate_class
from worker.rubric import load_rubric

CUDA = """#include "x.h"
namespace lightseq {
struct Pair { int a; float f() const { return a; } };
template <typename T, int N>
__global__ void ker_one(T *inp, int n) {
  const char *s = "}";  // a brace in a string {
  if (n > 0) { inp[0] = 1; }
}
extern "C" {
void launch_one(float *inp, int n) {
  ker_one<float, 4><<<1, 32>>>(inp, n);
}
}
}
"""
PY = """class Attn:
    def __init__(self, n):
        self.n = n

    def forward(self, x):
        return (
            x * self.n
        )


def helper(y):
    return y
"""


def test_functions_by_line() -> None:
    assert [(f.name, f.first, f.last) for f in functions_of("src/k.cu", CUDA)] == [
        ("ker_one", 4, 8), ("launch_one", 10, 12)]
    assert [(f.name, f.first, f.last) for f in functions_of("m.py", PY)] == [
        ("Attn.__init__", 2, 3), ("Attn.forward", 5, 8), ("helper", 11, 12)]
    assert functions_of("notes.txt", "x") == ()


def test_fingerprints_kept_on_disk_by_content(tmp_path: Path) -> None:
    config = Fingerprinting()
    first = PrintCache(config, tmp_path)
    first.fill([("src/k.cu", CUDA)])
    assert len(list(tmp_path.rglob("*.npz"))) == 1
    again = PrintCache(config, tmp_path).get("src/k.cu", CUDA)  # read back, not recomputed
    fresh = fingerprint_file("src/k.cu", CUDA, config)
    assert (again.hashes == fresh.hashes).all() and (again.first == fresh.first).all()
    assert again.functions == fresh.functions


def test_a_pasted_kernel_is_named_among_its_pairs_matches(tmp_path: Path) -> None:
    """s05 pastes s02's ker_ln_bw_dinp over its own (the two drew different implementations of it):
    their pair then holds a match of that kernel, named as such, where before it held none. (The
    generator's students draw whole kernels from a handful, so other pairs score as high.)"""
    rubric = load_rubric("hw4")
    base = starter_sources(rubric)
    students = {n: dict(s.files) for n, s in generate_class(rubric, tmp_path, size=8, seed=7, planted=(0, 1)).items()}
    del students["s01"]  # the generator's disguised copy: not this test's plant
    path, kernel = "src/layernorm_kernel.cu", "ker_ln_bw_dinp"

    def pasted_match(pairs: list) -> list:
        pair = next(p for p in pairs if {p.a, p.b} == {"s02", "s05"})
        return [m for m in pair.matches if m.label == f"{path}: {kernel}" and m.score > 0.9]

    assert pasted_match(compare_class(students, base)) == []
    source = next(f for f in functions_of(path, students["s02"][path]) if f.name == kernel)
    target = next(f for f in functions_of(path, students["s05"][path]) if f.name == kernel)
    lines_src, lines_dst = students["s02"][path].splitlines(True), students["s05"][path].splitlines(True)
    students["s05"][path] = "".join(lines_dst[: target.first - 1] + lines_src[source.first - 1: source.last]
                                    + lines_dst[target.last:])
    assert set(own_files(students["s03"], base)) < set(students["s03"])  # unchanged starter files dropped
    [pasted] = pasted_match(compare_class(students, base))  # named as such
    assert pasted.lines_a and pasted.lines_b


def test_the_self_join_in_small_batches_finds_what_one_batch_finds(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The inverted index's self-join is taken a batch of entries at a time (memory); batches of 7
    entries, most fingerprints' groups split from their neighbours, give every pair exactly."""
    rubric = load_rubric("hw4")
    students = {n: dict(s.files) for n, s in generate_class(rubric, tmp_path, size=6, seed=11, planted=(0, 1)).items()}
    base = starter_sources(rubric)
    whole = compare_class(students, base)
    monkeypatch.setattr(compare, "PAIR_BATCH", 7)
    assert compare_class(students, base) == whole
    sizes = [3, 3, 10, 1, 1, 1, 4, 4]
    slices = compare._batches(np.array(sizes), 5)
    assert [i for first, end in slices for i in range(first, end)] == list(range(len(sizes)))
    assert all(sum(sizes[first:end]) <= 5 + max(sizes[first:end]) for first, end in slices) and len(slices) > 2
