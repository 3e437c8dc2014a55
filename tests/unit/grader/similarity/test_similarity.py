"""grader.similarity.compare: a planted copy ranks first in a seeded class of 30, its driving file
named; the base's own code and a listed common source's never count, and nothing else is left
out for how many students share it (issue 51); matching regions come back as line ranges; the
reports render.

The seeded class's students draw each kernel from a handful of implementations
(tests/fixtures/similarity_class.py), so whole kernels recur across the class by construction,
each held by about a third of it: the typical pair scores high (one whole kernel alike is
enough), and the planted copy, alike everywhere, ranks first by the lines it shares.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader.similarity.base import Base
from grader.similarity.compare import PairResult, compare_class, starter_sources, tree_sources
from grader.similarity.report import report_json, report_pages
from tests.fixtures.similarity_class import generate_class
from worker.rubric import load_rubric

RUBRIC = load_rubric("hw4")
PLANTED = (7, 23)


@pytest.fixture(scope="module")
def starter() -> dict[str, str]:
    return starter_sources(RUBRIC)


@pytest.fixture(scope="module")
def seeded_class(tmp_path_factory: pytest.TempPathFactory, starter: dict[str, str]) -> tuple[dict, list[PairResult]]:
    students = generate_class(RUBRIC, tmp_path_factory.mktemp("class"), size=30, seed=20260319, planted=PLANTED)
    return students, compare_class({name: s.files for name, s in students.items()}, starter)


def test_the_planted_copy_ranks_first_by_the_lines_it_shares(seeded_class) -> None:
    """The kernels the generator's students drew alike (each by about a third of the class) count:
    the typical pair scores high (one whole kernel alike is enough), and the planted copy, alike
    everywhere, ranks first by the lines it shares, far more than any other pair's."""
    students, pairs = seeded_class
    assert len(students) == 30 and len(pairs) == 30 * 29 // 2
    top = pairs[0]
    assert (top.a, top.b) == ("s07", "s23") and top.score == 1.0 and top.driver and top.matches[0].share_a > 0.9
    assert pairs[len(pairs) // 2].score > 0.75  # the class-share rule of issue 51's time scored it below
    assert pairs[0].shared_lines > 1.5 * max(p.shared_lines for p in pairs[1:])


def test_the_copy_is_disguised_and_the_class_is_varied(seeded_class) -> None:
    students, pairs = seeded_class
    original, copy = students["s07"], students["s23"]
    assert original.files != copy.files  # names, comments, layout and order differ
    assert original.files["src/layernorm_kernel.cu"].index("ker_ln_bw_dgamma_dbetta(") < \
        original.files["src/layernorm_kernel.cu"].index("ker_ln_bw_dinp(")
    assert copy.files["src/layernorm_kernel.cu"].index("ker_ln_bw_dgamma_dbetta(") > \
        copy.files["src/layernorm_kernel.cu"].index("ker_ln_bw_dinp(")
    kernels = {s.files["src/softmax_kernel.cu"] for name, s in students.items()}
    assert len(kernels) == 30
    assert pairs[len(pairs) // 2].shared_lines < 0.5 * pairs[0].shared_lines  # the typical pair shares far less


def test_matching_regions_are_line_ranges_on_both_sides(seeded_class) -> None:
    students, pairs = seeded_class
    top = pairs[0]
    match = next(m for m in top.matches if m.path_a == "src/softmax_kernel.cu")
    text_a = students[top.a].files[match.path_a]
    kernel_line = text_a[: text_a.index("ker_attn_softmax(float* inp")].count("\n") + 1
    assert any(a <= kernel_line + 5 <= b for a, b in match.lines_a)
    lines_b = students[top.b].files[match.path_b].count("\n") + 1
    assert all(1 <= a <= b <= lines_b for a, b in match.lines_b)


def test_the_starter_never_counts(starter: dict[str, str]) -> None:
    reference = tree_sources(RUBRIC.starter_dir, RUBRIC.student_files)
    pairs = compare_class({"bare1": starter, "bare2": dict(starter), "ref": reference}, starter)
    scores = {(p.a, p.b): p.score for p in pairs}
    assert scores[("bare1", "bare2")] == 0.0  # identical, but nothing of their own
    assert scores[("bare1", "ref")] == 0.0
    # without the starter as boilerplate the bare starters would look identical
    assert compare_class({"bare1": starter, "bare2": dict(starter)}, {})[0].score > 0.9


def test_code_all_eight_share_counts_unless_it_is_listed_as_common(starter: dict[str, str]) -> None:
    """Eight students hand in the kit's softmax kernel (its solution is not the starter's), each
    with a comment of their own, s1's file being s0's exactly and s4..s7's one text: every pair
    shares the whole kernel and scores so (the class-share rule before issue 51 scored them all
    0). Listed as common code (a source the course hands out), the kernel counts for nothing:
    every pair scores 0, the literal copies too, since all they share beyond it is a comment."""
    path = "src/softmax_kernel.cu"
    kernel = tree_sources(RUBRIC.starter_dir, RUBRIC.student_files)[path]
    texts = [f"// {name}'s kernel\n{kernel}" for name in ("s0", "s0", "s2", "s3", "s4", "s4", "s4", "s4")]
    students = {f"s{i}": {path: text} for i, text in enumerate(texts)}
    pairs = {(p.a, p.b): p for p in compare_class(students, starter)}
    assert len(pairs) == 28 and all(p.score == 1.0 for p in pairs.values())
    copy = pairs[("s0", "s1")]
    assert copy.driver == f"{path} (identical file)" and copy.matches[0].identical
    assert copy.matches[0].lines_a == copy.matches[0].lines_b and copy.matches[0].lines_a  # the code beyond the starter
    assert not pairs[("s0", "s2")].matches[0].identical
    listed = compare_class(students, starter, common=[{path: kernel}])
    assert all(p.score == 0.0 for p in listed)


def test_tree_sources_takes_the_rubric_files_only(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "minitorch").mkdir()
    (tmp_path / "src" / "softmax_kernel.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "minitorch" / "tensor.py").write_bytes(b"x = 1\n\xff\n")
    (tmp_path / "kernel_tests").mkdir()
    (tmp_path / "kernel_tests" / "test_x.py").write_text("assert True\n")
    (tmp_path / "src" / "linked.cu").symlink_to(tmp_path / "src" / "softmax_kernel.cu")
    found = tree_sources(tmp_path, RUBRIC.student_files)
    assert set(found) == {"src/softmax_kernel.cu", "minitorch/tensor.py"}
    assert found["minitorch/tensor.py"] == "x = 1\n\ufffd\n"


def test_reports(seeded_class, starter: dict[str, str]) -> None:
    students, pairs = seeded_class
    data = report_json("hw4", pairs)
    assert data["students"] == 30 and data["pairs"][0]["a"] == "s07"
    assert data["pairs"][0]["matches"][0]["lines_a"] and data["pairs"][0]["driver"]
    json.dumps(data)
    pages = report_pages("hw4", pairs, {n: s.files for n, s in students.items()}, Base(starter, "the kit starter"),
                         detailed=2, per_page=200, stem="hw4-sim")
    assert sorted(pages) == ["hw4-sim-pair-1.html", "hw4-sim-pair-2.html", "hw4-sim-ranking-2.html",
                             "hw4-sim-ranking-3.html", "hw4-sim.html"]  # 435 pairs, 200 a page
    ranked = [re.findall(r"<tr><td>(\d+)</td>", pages[name]) for name in ("hw4-sim.html", "hw4-sim-ranking-2.html",
                                                                         "hw4-sim-ranking-3.html")]
    assert [int(n) for page in ranked for n in page] == list(range(1, len(pairs) + 1))  # every pair ranked once
    first = pages["hw4-sim.html"]
    assert '<a href="hw4-sim-pair-1.html">' in first and '<a href="hw4-sim-ranking-2.html">2</a>' in first
    assert "Base: the kit starter." in first and '<span class="l hit">' not in first
    pair = pages["hw4-sim-pair-1.html"]
    assert '<span class="l hit">' in pair and "1. s07 and s23" in pair and '<a href="hw4-sim.html">' in pair
    assert all("<script" not in page for page in pages.values()) and "&lt;" in pair  # sources are escaped
    assert max(len(page.encode()) for page in pages.values()) < 200_000
