"""grader.similarity: shared regions are put on the lines that hold them (a header comment, a
class name); a starter's hints count as the starter; pairs whose scores saturate at 100% still
rank by how much they share; a starter's markers are never highlighted as shared code."""
from __future__ import annotations

import random

import numpy as np
from copydetect.utils import filter_code

from grader.similarity.compare import compare_class
from grader.similarity.prints import Fingerprinting, _raw_offset, fingerprint_file
from grader.similarity.report import numbered_lines, report_json, starter_lines

HEADER = "".join(f"// a note of the student's own, line {n}\n" for n in range(1, 151))


def _function(name: str, seed: int, statements: int = 60) -> str:
    """A C function of `statements` distinct lines (names normalized away, the numbers and
    operators make each line its own)."""
    rng = random.Random(seed)
    ops = "+-*/"
    body = "".join(f"  v{rng.randrange(9)} = v{rng.randrange(9)} {rng.choice(ops)} {rng.randrange(1000)} "
                   f"{rng.choice(ops)} v{rng.randrange(9)} * {rng.randrange(1000)};\n" for _ in range(statements))
    return f"__global__ void {name}(float* v0, float* v1) {{\n  float v2, v3, v4, v5, v6, v7, v8;\n{body}}}\n"


def test_fingerprints_are_on_the_lines_that_hold_them() -> None:
    """Every character of the filtered text maps back to itself in the file, past a long header
    comment and a class name (copydetect's rows for both are repaired)."""
    text = HEADER + "struct Holder { int x; };\nclass Kernel {\n public:\n  int y;\n};\n" + _function("k", 1)
    filtered, offsets = filter_code(text, "a.cu")
    raw = _raw_offset(np.arange(len(filtered)), offsets)
    literal = [j for j, ch in enumerate(filtered) if ch not in "VFOPS"]
    assert all(text[raw[j]] == filtered[j] for j in literal)
    prints = fingerprint_file("a.cu", text, Fingerprinting())
    assert prints.first.min() > 150  # nothing shared in the header: it holds no code


def test_code_the_starters_hints_give_counts_as_the_starter() -> None:
    """The starter's launcher says in a comment how to dispatch; two honest students write that
    chain and otherwise code of their own: nothing of theirs is shared. Without the hint in the
    base the same chain drives their pair."""
    chain = "".join(f"  {'else ' if i else ''}if (len <= {32 << i}) ker_bw<float, {1 << i}><<<grid, block, 0, stream>>>"
                    f"(out_grad, soft_out, rows, len);\n" for i in range(6))
    hinted = "void launch_bw(float* out_grad, float* soft_out, int rows, int len) {\n  // Hint: dispatch so:\n" + \
        "".join(f"  // {line.strip()}\n" for line in chain.splitlines()) + "}\n"
    bare = "void launch_bw(float* out_grad, float* soft_out, int rows, int len) {\n}\n"
    students = {name: {"src/softmax.cu": _function(f"own_{name}", seed) +
                       "void launch_bw(float* out_grad, float* soft_out, int rows, int len) {\n" + chain + "}\n"}
                for name, seed in (("ann", 11), ("bo", 22))}
    with_hint = compare_class(students, {"src/softmax.cu": hinted})[0]
    without = compare_class(students, {"src/softmax.cu": bare})[0]
    assert without.score > 0.5 and "launch_bw" in without.driver, without
    assert with_hint.score < min(0.2, without.score / 3), with_hint  # what is left: the chain's edges
    # The chain's lines are the starter's to the highlighting too.
    assert {line.strip() for line in chain.splitlines()} <= starter_lines({"src/softmax.cu": hinted}, "src/softmax.cu")


def test_copies_that_both_score_100_percent_rank_by_what_they_share() -> None:
    """ann wrote two files of kernels; cy copied the larger (two kernels), bo the smaller (one):
    both pairs score 1 (the score saturates) with one match each, and cy's copy ranks first by
    its shared lines (by name, bo's would)."""
    files = {"src/a.cu": _function("k0", 100) + _function("k1", 101), "src/b.cu": _function("k2", 102)}
    students = {"ann": files, "cy": {"src/a.cu": files["src/a.cu"], "src/b.cu": _function("cy_own", 6)},
                "bo": {"src/a.cu": _function("bo_own", 7), "src/b.cu": files["src/b.cu"]},
                "dee": {"src/a.cu": _function("dee", 8)}}
    pairs = compare_class(students, {}, Fingerprinting(literal_copies=False))
    ranked = [(p.a, p.b) for p in pairs]
    scores = {(p.a, p.b): p for p in pairs}
    whole, one = scores[("ann", "cy")], scores[("ann", "bo")]
    assert whole.score == one.score == 1.0
    assert whole.shared_lines == 2 * one.shared_lines and whole.longest_run > one.longest_run
    assert ranked.index(("ann", "cy")) < ranked.index(("ann", "bo")) < ranked.index(("ann", "dee"))
    row = next(p for p in report_json("hw4", pairs)["pairs"] if (p["a"], p["b"]) == ("ann", "cy"))
    assert (row["shared_lines"], row["longest_run"]) == (whole.shared_lines, whole.longest_run)


def test_a_starters_markers_are_never_highlighted() -> None:
    """Markers of any starter version (this term's, last term's, our kit's) inside a shared
    region are left plain; a comment the students wrote is highlighted like their code."""
    text = ("// BEGIN ASSIGN3_3\n  x = y * 2;\n  /// END ASSIGN4_2_2\n# BEGIN ASSIGN2.1\n"
            "// BEGIN SOLUTION: 1.1 softmax\n  /// TODO\n  // our own trick: fold the mask in\n  z = x;\n")
    shown = {line.strip(): hit for _, line, hit in numbered_lines(text, [(1, 8)])}
    assert [line for line, hit in shown.items() if hit] == ["x = y * 2;", "// our own trick: fold the mask in", "z = x;"]
