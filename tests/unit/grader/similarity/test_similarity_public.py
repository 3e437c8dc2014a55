"""Known public solutions (grader.similarity.public, issue 51): a listed source is compared with
every student as a submission that is no student's, and a student who copied it gets the
source named (in the comparison, the JSON report and the HTML report); sources are never ranked
among the students nor against one another; code many students share outside the base counts.
Sources are read from a zip staff gave (named by its file name and sha256) and from a git ref
served over real HTTPS (named `<repository>@<commit>`, tests/fixtures/https_git.py)."""
from __future__ import annotations

import hashlib
import io
import re
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.settings import Settings
from grader.similarity.base import Base
from grader.similarity.compare import compare_all, starter_sources
from grader.similarity.fetch import FetchRules
from grader.similarity.public import (
    COMMON,
    GIT,
    SOLUTION,
    UPLOAD,
    entry_role_words,
    entry_words,
    git_entry,
    read_sources,
    save_zip,
    with_role,
    zip_path,
)
from grader.similarity.report import report_json, report_pages
from tests.fixtures.https_git import https_git_server, publish
from worker.rubric import load_rubric
from worker.starter_kit import render_starter
from worker.unpack import BadArchive, UnpackLimits

RUBRIC = load_rubric("hw4")
NO_FETCH = FetchRules.of(Settings(_env_file=None))  # type: ignore[call-arg]
LIMITS = UnpackLimits(max_total_bytes=200 << 20, max_file_bytes=50 << 20, max_files=5000, max_depth=24, max_ratio=100.0)
BASE = {"kernel.cu": "// TODO: write the kernel\n__global__ void blur(const float* in, float* out, int n) {\n}\n"}
PUBLISHED = """\
// blur, from a blog post
__global__ void blur(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float left = i > 0 ? in[i - 1] : in[i];
  float right = i + 1 < n ? in[i + 1] : in[i];
  float mid = in[i];
  float acc = 0.25f * left + 0.5f * mid + 0.25f * right;
  for (int pass = 0; pass < 3; ++pass) { acc = acc * 0.9f + mid * 0.1f; }
  out[i] = fminf(fmaxf(acc, -1e4f), 1e4f);
}
__global__ void blur_rows(const float* in, float* out, int rows, int cols) {
  int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows || c >= cols) return;
  const float* row = in + static_cast<size_t>(r) * cols;
  float s = row[c];
  if (c > 0) s += row[c - 1];
  if (c + 1 < cols) s += row[c + 1];
  out[static_cast<size_t>(r) * cols + c] = s / 3.f;
}
"""
LABEL = "https://github.com/someone/blur-solutions@0123456789abcdef0123456789abcdef01234567"


def _own(seed: int) -> str:
    """A solution of a student's own: the same task written another way."""
    op = ["+", "-", "*"][seed % 3]
    return ("__global__ void blur(const float* in, float* out, int n) {\n"
            + "".join(f"  if (threadIdx.x == {k}) {{ out[{k * seed}] = in[{k}] {op} {seed + k}.f; }}\n"
                      for k in range(seed + 3))
            + "}\n")


def _disguised(text: str) -> str:
    """`text` with its names and comments changed: what a student hands in after copying it."""
    renamed = re.sub(r"\bacc\b", "total", re.sub(r"\bleft\b", "lhs", re.sub(r"\bright\b", "rhs", text)))
    return renamed.replace("// blur, from a blog post", "// my own blur (honest)")


def test_a_student_who_copied_a_public_solution_gets_it_named() -> None:
    students = {"ana": {"kernel.cu": _disguised(PUBLISHED)}, **{f"s{i}": {"kernel.cu": _own(i)} for i in range(1, 6)}}
    fork = "a fork.zip, sha256 " + "1" * 64  # the same solution published twice: alike, never compared
    public = {LABEL: {"kernel.cu": PUBLISHED}, fork: {"kernel.cu": PUBLISHED.replace("blog post", "forum")},
              "other.zip, sha256 " + "0" * 64: {"kernel.cu": _own(11)}}
    compared = compare_all(students, BASE, public)
    assert len(compared.pairs) == 6 * 5 // 2  # the students' pairs only: a source is never a student
    assert all(p.a in students and p.b in students for p in compared.pairs)
    assert [(p.a, p.b) for p in compared.sources[:2]] == [("ana", fork), ("ana", LABEL)]
    top = compared.sources[1]
    assert top.score > 0.9 and top.driver.startswith("kernel.cu")
    assert all(p.a in students and p.b in public for p in compared.sources)  # never a source against a source
    assert all(p.score < 0.5 for p in compared.sources[2:])
    assert max(p.score for p in compared.pairs) < 0.5  # ana copied no student

    body = report_json("blur", compared.pairs, (), sorted(public), compared.sources)
    assert body["public_sources"] == sorted(public)
    assert (body["public_matches"][1]["student"], body["public_matches"][1]["source"]) == ("ana", LABEL)
    assert body["public_matches"][1]["score"] > 0.9 and body["students"] == 6
    first = report_pages("blur", compared.pairs, students, Base(BASE, "the starter"), detailed=0,
                         public=sorted(public), public_matches=compared.sources)["report.html"]
    section = first[first.index('id="public"'):first.index('id="clusters"')]
    assert f"<tr><td>ana</td><td>{LABEL}</td>" in section


def test_four_copies_of_one_solution_among_eight_score_high_and_each_matches_the_source() -> None:
    """Four of eight hand in the published solution renamed alike: its code is not the base's, so it
    counts, listed or not (the common-code rule of a quarter, before issue 51, scored their pairs
    0); listed, each of the four matches it."""
    students = {f"s{i}": {"kernel.cu": _disguised(PUBLISHED) if i < 4 else _own(i)} for i in range(8)}
    copies = [p for p in compare_all(students, BASE, {}).pairs if {p.a, p.b} <= {"s0", "s1", "s2", "s3"}]
    assert len(copies) == 6 and all(p.score == 1.0 for p in copies)
    compared = compare_all(students, BASE, {LABEL: {"kernel.cu": PUBLISHED}})
    assert [(p.a, p.score) for p in compared.sources if p.score > 0.9] == [(f"s{i}", 1.0) for i in range(4)]


def test_a_solution_most_of_the_class_copied_counts_and_only_common_code_is_left_out() -> None:
    """Six of eight hand in the published solution: their pairs score 1.0 listed or not (more than
    half the class: the rule before issue 51 left it out as common knowledge); listed as a
    solution, each of the six matches it; listed as common code instead, it counts for nothing."""
    students = {f"s{i}": {"kernel.cu": _disguised(PUBLISHED) if i < 6 else _own(i)} for i in range(8)}
    copiers = {f"s{i}" for i in range(6)}
    unlisted = compare_all(students, BASE, {})
    assert all(p.score == 1.0 for p in unlisted.pairs if {p.a, p.b} <= copiers)
    listed = compare_all(students, BASE, {LABEL: {"kernel.cu": PUBLISHED}})
    assert {p.a for p in listed.sources if p.score == 1.0} == copiers
    assert all(p.score == 1.0 for p in listed.pairs if {p.a, p.b} <= copiers)
    common = compare_all(students, BASE, {}, common=[{"kernel.cu": PUBLISHED}])
    assert all(p.score < 0.5 for p in common.pairs) and common.sources == []


@pytest.fixture(scope="module")
def solution_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str, FetchRules]]:
    """A public solution of hw4 (our kit's starter with a softmax kernel of its own) in a git
    repository served over HTTPS: its folder, commit, URL and the rules that let it be fetched."""
    work = tmp_path_factory.mktemp("public")
    repo = work / "hw4-solutions"
    render_starter(RUBRIC.starter_dir, repo)
    (repo / "src" / "softmax_kernel.cu").write_text(PUBLISHED)
    git = ["git", "-C", str(repo), "-c", "user.name=Someone", "-c", "user.email=someone@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "my solutions"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (work / "srv").mkdir()
    publish(repo, work / "srv", "hw4-solutions.git")
    with https_git_server(work / "srv", work) as server:
        yield repo, commit, server.url("hw4-solutions.git"), FetchRules.of(Settings.from_variables(server.variables()))


def test_a_listed_zip_and_git_ref_are_read_and_named_exactly(solution_repo: tuple[Path, str, str, FetchRules],
                                                             tmp_path: Path) -> None:
    repo, commit, url, rules = solution_repo
    archive = tmp_path / "found.zip"
    subprocess.run(["git", "-C", str(repo), "archive", "--format=zip", "--prefix=hw4/", "-o", str(archive), "HEAD"],
                   check=True)
    data = archive.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    entry = save_zip(tmp_path, "hw4", data, RUBRIC, LIMITS, "C:\\Downloads\\found online.zip")
    assert entry == {"kind": UPLOAD, "filename": "found online.zip", "sha256": sha}
    assert zip_path(tmp_path, "hw4", sha).is_file()
    listed = [entry, with_role(git_entry(f"git:{url}@{commit[:10]}"), COMMON)]  # the zip as listed before roles
    assert listed[1]["kind"] == GIT
    read = read_sources(tmp_path, RUBRIC, LIMITS, listed, rules)
    assert [(s.label, s.role) for s in read] == [(f"found online.zip, sha256 {sha}", SOLUTION), (f"{url}@{commit}", COMMON)]
    assert entry_role_words(listed[1]) == f"git:{url}@{commit[:10]} (common code, left out)"
    with pytest.raises(BadArchive, match="role is solution or common, not 'copied'"):
        with_role(entry, "copied")
    assert all(s.sources["src/softmax_kernel.cu"] == PUBLISHED for s in read)
    assert read[0].sources == read[1].sources and read[0].sources.keys() == starter_sources(RUBRIC).keys()
    # A source that cannot be read fails the computation naming it; a zip without the
    # assignment's files is never listed.
    with pytest.raises(BadArchive, match=re.escape(f"the public source git:{url}@no-such-ref cannot be read")):
        read_sources(tmp_path, RUBRIC, LIMITS, [git_entry(f"git:{url}@no-such-ref")], rules)
    zip_path(tmp_path, "hw4", sha).unlink()
    with pytest.raises(BadArchive, match=f"the public source {re.escape(entry_words(entry))} cannot be read"):
        read_sources(tmp_path, RUBRIC, LIMITS, [entry], NO_FETCH)
    empty = io.BytesIO()
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("notes/readme.txt", "nothing here")
    with pytest.raises(BadArchive):
        save_zip(tmp_path, "hw4", empty.getvalue(), RUBRIC, LIMITS, "notes.zip")
    with pytest.raises(BadArchive, match="git:<repository>@<ref>"):
        git_entry("https://github.com/someone/x")
