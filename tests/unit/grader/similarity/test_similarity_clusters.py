"""Clusters (grader.similarity.clusters): files several students hand in alike, reported with
who, which files and of which kind, beside the pair scores (which count such code up to half the
class, issue 51: four identical solutions among eight score high); a starter file is never a cluster."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.similarity.base import Base
from grader.similarity.cache import PrintCache
from grader.similarity.clusters import cluster_of, find_clusters
from grader.similarity.compare import compare_class, starter_sources
from grader.similarity.prints import Fingerprinting
from grader.similarity.report import report_json, report_pages
from tests.fixtures.similarity_class import generate_class
from worker.rubric import load_rubric

RUBRIC = load_rubric("hw4")
BASE = {"kernel.cu": "// TODO: write the kernel\n__global__ void scale(float* x, int n) {\n}\n"}
SOLUTION = """\
// my kernel
__global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int stride = gridDim.x * blockDim.x;
  for (; i < n; i += stride) {
    float v = x[i];
    if (v > 0.f) { x[i] = v * 2.f + 1.f; } else { x[i] = v * 0.5f - 1.f; }
    x[i] = fminf(fmaxf(x[i], -100.f), 100.f);
  }
}
__global__ void shift(float* y, const float* x, int n, float by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[i] = x[i] + by * static_cast<float>(i % 7); }
  if (i == 0) { y[0] = -y[0]; }
}
"""


def _own(seed: int) -> str:
    """A solution of a style of its own: the same task written another way."""
    ops = ["+", "-", "*"][seed % 3]
    return ("__global__ void scale(float* x, int n) {\n"
            + "".join(f"  if (threadIdx.x == {k}) {{ x[{k * seed}] = x[{k}] {ops} {seed + k}.f; }}\n"
                      for k in range(seed + 3))
            + "}\n")


def _clusters(students: dict[str, dict[str, str]], base: dict[str, str] = BASE):
    return find_clusters(students, base, PrintCache(Fingerprinting()))


def test_four_identical_submissions_among_eight_are_one_cluster_and_their_pairs_score_high() -> None:
    students = {f"s{i}": {"kernel.cu": SOLUTION if i < 4 else _own(i)} for i in range(8)}
    pairs = compare_class(students, BASE)
    copies = [p for p in pairs if {p.a, p.b} <= {"s0", "s1", "s2", "s3"}]
    assert len(copies) == 6 and all(p.score > 0.9 for p in copies)  # held by 4 of 8: a quarter scored them 0
    assert all(p.score < 0.5 for p in pairs if p not in copies)
    clusters = _clusters(students)
    assert len(clusters) == 1
    assert clusters[0].students == ("s0", "s1", "s2", "s3") and clusters[0].files == ("kernel.cu",)
    assert clusters[0].identical and clusters[0].kind == "identical"


def test_a_file_of_a_listed_common_source_is_no_cluster_and_counts_for_nothing() -> None:
    """The four hand in a file the course lists as common code (an earlier assignment's): no
    cluster, and their pairs score as the others' do."""
    students = {f"s{i}": {"kernel.cu": SOLUTION if i < 4 else _own(i)} for i in range(8)}
    common = [{"previous/kernel.cu": SOLUTION}]  # listed under another path: the content is what counts
    assert find_clusters(students, BASE, PrintCache(Fingerprinting()), common) == []
    assert all(p.score < 0.5 for p in compare_class(students, BASE, common=common))


def test_a_starter_file_everyone_hands_in_is_no_cluster() -> None:
    # the starter as given, and reformatted with its comment changed: the same after normalization
    relaid = "__global__   void scale(float *x,\n int n)\n{ }  // done\n"
    students = {f"s{i}": {"kernel.cu": BASE["kernel.cu"] if i % 2 else relaid} for i in range(8)}
    assert _clusters(students) == []


def test_renamed_variables_are_identical_and_an_edited_copy_joins_as_near_identical() -> None:
    renamed = re.sub(r"\bstride\b", "step", re.sub(r"\bv\b", "value", SOLUTION)).replace("// my kernel", "")
    assert renamed != SOLUTION
    edited = SOLUTION.replace("  if (i == 0) { y[0] = -y[0]; }\n", "  if (i == 1) { y[1] = -y[1] * 3.f; }\n")
    students = {"a": {"kernel.cu": SOLUTION}, "b": {"kernel.cu": renamed}, "c": {"kernel.cu": _own(5)}}
    [both] = _clusters(students)
    assert both.students == ("a", "b") and both.identical
    [three] = _clusters({**students, "d": {"kernel.cu": edited}})
    assert three.students == ("a", "b", "d") and not three.identical and three.kind == "near-identical"
    assert len({h.digest for h in three.holders}) == 2
    assert _clusters({**students, "d": {"kernel.cu": SOLUTION[:400] + _own(9)}})[0].students == ("a", "b")


def test_unrelated_solutions_are_no_cluster() -> None:
    assert _clusters({f"s{i}": {"kernel.cu": _own(i)} for i in range(8)}) == []


@pytest.fixture(scope="module")
def starter() -> dict[str, str]:
    return starter_sources(RUBRIC)


def test_the_report_names_the_cluster_on_an_eight_student_class(tmp_path: Path, starter: dict[str, str]) -> None:
    """Through the report's own path: compare_class and find_clusters on one cache, the JSON
    report and the HTML pages (clusters on the first page, before the ranking)."""
    generated = generate_class(RUBRIC, tmp_path / "class", size=8, seed=20260406, planted=(1, 5))
    students = {name: s.files for name, s in generated.items()}
    for name in ("s02", "s03", "s06"):
        students[name] = dict(students["s00"])
    config = Fingerprinting(literal_copies=False)
    prints = PrintCache(config)
    pairs = compare_class(students, starter, config, prints)
    clusters = find_clusters(students, starter, prints)
    # the generator gives students a few alternatives per region: a file may be alike by chance too
    copiers = ("s00", "s02", "s03", "s06")
    assert all(set(copiers) <= set(c.students) for c in clusters if "s00" in c.students)
    four = [c for c in clusters if c.students == copiers]
    assert len(four) == 1 and four[0].identical and len(four[0].files) >= 3
    assert "s01" in next(c for c in clusters if "s05" in c.students).students  # the planted, disguised copy
    body = report_json("hw4", pairs, clusters)
    assert [cluster_of(c) for c in body["clusters"]] == clusters
    assert body["clusters"][clusters.index(four[0])]["students"] == ["s00", "s02", "s03", "s06"]
    first = report_pages("hw4", pairs, students, Base(starter, "stripped starter", False), detailed=2,
                         clusters=clusters)["report.html"]
    section = first[first.index('id="clusters"'):first.index("<h2>Pairs</h2>")]
    assert "s00, s02, s03, s06" in section and "identical" in section
    assert first.index('id="clusters"') < first.index('<table class="rank"><thead><tr><th>#</th><th>student A')


def test_the_normalized_digest_is_kept_with_the_fingerprints_on_disk(tmp_path: Path) -> None:
    config = Fingerprinting()
    digest = PrintCache(config, tmp_path).get("kernel.cu", SOLUTION).digest
    renamed = SOLUTION.replace("stride", "step").replace("// my kernel", "// mine")
    again = PrintCache(config, tmp_path)
    stored = again._load(again.key("kernel.cu", SOLUTION))
    assert stored is not None and stored.digest == digest
    assert again.get("kernel.cu", renamed).digest == digest != again.get("kernel.cu", _own(3)).digest
