"""Which base the similarity check uses: the assignment's setting (a zip staff gave, a git ref),
else the rubric's default, else our kit's stripped starter; a git repository that is no folder
here is cloned once; every base is named exactly (the commit a ref resolved to, the zip's name
and sha256, its files' count and digest); a folder of this machine is never one. Real git
repositories, served over HTTPS (tests/fixtures/https_git.py)."""
from __future__ import annotations

import dataclasses
import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.settings import Settings
from grader.similarity.base import (
    UPLOAD,
    assignment_base,
    clone_dir,
    describe_assignment_base,
    describe_setting,
    fetch_refusal,
    files_digest,
    save_base,
    text_sha256,
)
from grader.similarity.compare import starter_sources
from grader.similarity.fetch import BaseRefused, FetchRules
from tests.fixtures.https_git import https_git_server, publish
from worker.rubric import load_rubric
from worker.starter_kit import render_starter
from worker.unpack import BadArchive, UnpackLimits

RUBRIC = load_rubric("hw4")
NO_FETCH = FetchRules.of(Settings(_env_file=None))  # type: ignore[call-arg]
LIMITS = UnpackLimits(max_total_bytes=200 << 20, max_file_bytes=50 << 20, max_files=5000, max_depth=24, max_ratio=100.0)


@pytest.fixture(scope="module")
def starter_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str, FetchRules]]:
    """A repository holding the student starter, with one file changed from our kit's, served
    over HTTPS: its folder, commit, URL and the rules that let it be fetched."""
    work = tmp_path_factory.mktemp("repo")
    repo = work / "llmsys_hw4"
    render_starter(RUBRIC.starter_dir, repo)
    (repo / "minitorch" / "optim.py").write_text("# the course's own optimizer file\n")
    git = ["git", "-C", str(repo), "-c", "user.name=Staff", "-c", "user.email=staff@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "starter"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (work / "srv").mkdir()
    publish(repo, work / "srv", "llmsys_hw4.git")
    with https_git_server(work / "srv", work) as server:
        rules = FetchRules.of(Settings.from_variables(server.variables()))
        yield repo, commit, server.url("llmsys_hw4.git"), rules


def test_a_git_ref_staff_set_is_the_base(starter_repo: tuple[Path, str, str, FetchRules], tmp_path: Path) -> None:
    _repo, commit, url, rules = starter_repo
    spec = f"git:{url}@{commit}"
    base = assignment_base(tmp_path, RUBRIC, LIMITS, spec, rules)
    assert base.label == f"{spec} (commit {commit}; {len(base.sources)} files, digest {files_digest(base.sources)[:16]})"
    assert base.received
    assert base.sources["minitorch/optim.py"] == "# the course's own optimizer file\n"
    assert base.sources["src/softmax_kernel.cu"] == starter_sources(RUBRIC)["src/softmax_kernel.cu"]
    with pytest.raises(BadArchive, match="no-such-ref"):
        assignment_base(tmp_path, RUBRIC, LIMITS, f"git:{url}@no-such-ref", rules)


def test_a_folder_of_this_machine_is_never_a_base(starter_repo: tuple[Path, str, str, FetchRules],
                                                  tmp_path: Path) -> None:
    """(issue 54: a local path archived a repository of the worker host)"""
    repo, commit, _url, rules = starter_repo
    for spec in (f"git:{repo}@{commit}", f"git:file://{repo}@{commit}", str(repo)):
        with pytest.raises(BadArchive, match="is not an https:// URL|a git base is git:"):
            assignment_base(tmp_path, RUBRIC, LIMITS, spec, rules)
    assert not clone_dir(tmp_path).exists()


def test_a_repository_url_is_cloned_once(starter_repo: tuple[Path, str, str, FetchRules], tmp_path: Path) -> None:
    _repo, commit, url, rules = starter_repo
    spec = f"git:{url}@{commit[:8]}"
    first = assignment_base(tmp_path, RUBRIC, LIMITS, spec, rules)
    assert f"(commit {commit};" in first.label  # the short ref named by the whole commit it resolved to
    clones = list(clone_dir(tmp_path).glob("*.git"))
    assert len(clones) == 1 and first.sources["minitorch/optim.py"].startswith("# the course's")
    assert assignment_base(tmp_path, RUBRIC, LIMITS, spec, rules).sources == first.sources
    assert list(clone_dir(tmp_path).glob("*.git")) == clones
    # a clone kept from before is used only while its host is still listed
    with pytest.raises(BaseRefused, match="127.0.0.1 is not a host bases may be fetched from"):
        assignment_base(tmp_path, RUBRIC, LIMITS, spec, dataclasses.replace(rules, hosts=()))


def test_the_rubric_default_and_the_kit_fallback(starter_repo: tuple[Path, str, str, FetchRules],
                                                 tmp_path: Path) -> None:
    _repo, commit, url, rules = starter_repo
    rubric = dataclasses.replace(RUBRIC, similarity_base=f"git:{url}@{commit}")
    default = assignment_base(tmp_path, rubric, LIMITS, None, rules)
    assert default.received and default.label.startswith(f"the rubric's default, git:{url}@{commit} (commit {commit};")
    refused = assignment_base(tmp_path / "other", rubric, LIMITS, None, dataclasses.replace(rules, hosts=()))
    assert not refused.received and refused.sources == starter_sources(RUBRIC)
    assert "could not be read (127.0.0.1 is not a host bases may be fetched from" in refused.label
    assert fetch_refusal(None, rubric.similarity_base, dataclasses.replace(rules, hosts=())) is not None
    assert fetch_refusal(None, rubric.similarity_base, rules) is None
    assert describe_setting(None, None) == "our kit's stripped starter (no starter given)"


def test_a_zip_staff_gave_is_named_by_its_file_and_sha256(starter_repo: tuple[Path, str, str, FetchRules],
                                                         tmp_path: Path) -> None:
    repo = starter_repo[0]
    archive = tmp_path / "starter.zip"
    subprocess.run(["git", "-C", str(repo), "archive", "--format=zip", "--prefix=llmsys_hw4/", "-o", str(archive),
                    "HEAD"], check=True)
    data = archive.read_bytes()
    count = save_base(tmp_path, "hw4", data, RUBRIC, LIMITS, "C:\\Users\\ta\\llmsys_hw4 (spring).zip")
    base = assignment_base(tmp_path, RUBRIC, LIMITS, UPLOAD, NO_FETCH)
    sha = hashlib.sha256(data).hexdigest()
    assert len(base.sources) == count
    assert base.label == (f"the starter zip staff gave (llmsys_hw4 (spring).zip, sha256 {sha}; {count} files, "
                          f"digest {files_digest(base.sources)[:16]})")
    assert describe_assignment_base(UPLOAD, "hw4", [], tmp_path) == (
        f"the starter zip staff gave (llmsys_hw4 (spring).zip, sha256 {sha})")
    text = base.sources["minitorch/optim.py"]
    assert text_sha256(text) == hashlib.sha256((repo / "minitorch" / "optim.py").read_bytes()).hexdigest()


def test_a_git_spec_that_git_would_read_as_an_option_is_refused(tmp_path: Path) -> None:
    for spec in ("git:--upload-pack=touch /tmp/x@main", "git:/srv/starter@--output=/tmp/x"):
        with pytest.raises(BadArchive, match="cannot start with '-'"):
            assignment_base(tmp_path, RUBRIC, LIMITS, spec, NO_FETCH)


def test_a_zip_staff_gave_that_is_gone_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BadArchive, match="upload it again"):
        assignment_base(tmp_path, RUBRIC, LIMITS, UPLOAD, NO_FETCH)
