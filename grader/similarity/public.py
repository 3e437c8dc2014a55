"""Sources staff list for an assignment's similarity check (issue 51), each in one of two roles:
- a known public solution (role "solution"): matched against every student like a submission
  that is no student's (grader.similarity.compare.compare_all), never ranked among the students'
  pairs, never graded, and named in the report wherever a student's files match it;
- code the class may share (role "common"), such as an earlier assignment's files the starter
  lacks: left out like the starter itself (its fingerprints never count, a file equal to one of
  its files is no copy) and named in the report as left out.
Nothing else is discounted for being common: the similarity check drops no code for how many
students hold it.

A source is listed (`Assignment.similarity_sources`, a JSON list of entries) as either
- `{"kind": "git", "spec": "git:<repository>@<ref>", "role": ...}`, fetched only as
  grader.similarity.fetch allows (the rules of a git base: https, a listed host, a public
  address, a time and a size cap), and named in the report by the commit the ref resolved to
  (`<repository>@<commit>`); or
- `{"kind": "upload", "filename": ..., "sha256": ..., "role": ...}`, a zip staff gave, kept at
  `KG_DATA_DIR/reports/similarity-public-<slug>/<sha256>.zip` and named by its file name and sha256.
An entry without a role (listed before roles existed) is a known solution. Its files are the
rubric's student files, read as a base's are (grader.similarity.base.zip_sources). A listed
source that cannot be read fails the computation saying which, as a base staff set does: never
silently left out.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.datadir import private_dir
from grader.similarity.base import clone_dir, git_zip, parse_git_spec, zip_sources
from grader.similarity.compare import Sources
from grader.similarity.fetch import FetchRules
from worker.rubric import Rubric
from worker.unpack import BadArchive, UnpackLimits

GIT, UPLOAD = "git", "upload"
SOLUTION, COMMON = "solution", "common"
ROLE_WORDS = {SOLUTION: "known solution", COMMON: "common code, left out"}
Entry = dict[str, Any]  # one listed source, as Assignment.similarity_sources keeps it


@dataclass(frozen=True)
class PublicSource:
    label: str  # exactly what it is: `<repository>@<commit>`, or `<zip name>, sha256 <sha256>`
    sources: Sources
    role: str = SOLUTION


def role_of(entry: Entry) -> str:
    return str(entry.get("role", SOLUTION))


def with_role(entry: Entry, role: str) -> Entry:
    """`entry` in `role`; BadArchive when `role` is neither."""
    if role not in ROLE_WORDS:
        raise BadArchive(f"a listed source's role is {' or '.join(ROLE_WORDS)}, not {role!r}")
    return {**entry, "role": role}


def entry_key(entry: Entry) -> str:
    """What tells listed sources apart (the settings page removes one by it)."""
    return entry["spec"] if entry["kind"] == GIT else f"upload:{entry['sha256']}"


def entry_words(entry: Entry) -> str:
    """A listed source in words, before anything is fetched."""
    return entry["spec"] if entry["kind"] == GIT else f"{entry['filename']}, sha256 {entry['sha256']}"


def entry_role_words(entry: Entry) -> str:
    """A listed source and its role in words."""
    return f"{entry_words(entry)} ({ROLE_WORDS[role_of(entry)]})"


def git_entry(spec: str) -> Entry:
    """The entry of a git ref; BadArchive when `spec` is not `git:<repository>@<ref>`."""
    parse_git_spec(spec)
    return {"kind": GIT, "spec": spec}


def zip_path(data_dir: Path, slug: str, sha256: str) -> Path:
    return data_dir / "reports" / f"similarity-public-{slug}" / f"{sha256}.zip"


def save_zip(data_dir: Path, slug: str, archive: bytes, rubric: Rubric, limits: UnpackLimits, filename: str) -> Entry:
    """Keeps `archive` once it holds some of the rubric's student files; its entry (BadArchive
    when it holds none)."""
    sha256 = hashlib.sha256(archive).hexdigest()
    target = zip_path(data_dir, slug, sha256)
    private_dir(target.parent)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".public-", suffix=".zip")
    with os.fdopen(fd, "wb") as fh:
        fh.write(archive)
    try:
        zip_sources(Path(tmp), rubric, limits)
    except BadArchive as exc:
        os.unlink(tmp)
        raise BadArchive(str(exc).replace("the starter holds", "the zip holds")) from exc
    os.replace(tmp, target)
    return {"kind": UPLOAD, "filename": Path(filename.replace("\\", "/")).name or target.name, "sha256": sha256}


def read_sources(data_dir: Path, rubric: Rubric, limits: UnpackLimits, listed: Sequence[Entry],
                 rules: FetchRules) -> list[PublicSource]:
    """The files of every listed source, each named exactly; BadArchive naming the one that
    cannot be read."""
    found: dict[str, PublicSource] = {}
    for entry in listed:
        try:
            source = _read(data_dir, rubric, limits, entry, rules)
        except BadArchive as exc:
            raise BadArchive(f"the public source {entry_words(entry)} cannot be read: {exc}") from exc
        found.setdefault(source.label, source)
    return list(found.values())


def _read(data_dir: Path, rubric: Rubric, limits: UnpackLimits, entry: Entry, rules: FetchRules) -> PublicSource:
    if entry["kind"] == GIT:
        with tempfile.TemporaryDirectory(prefix="kg-public-") as tmp:
            commit = git_zip(entry["spec"], Path(tmp) / "public.zip", rules, clone_dir(data_dir))
            files = zip_sources(Path(tmp) / "public.zip", rubric, limits)
        return PublicSource(f"{parse_git_spec(entry['spec'])[0]}@{commit}", files, role_of(entry))
    stored = zip_path(data_dir, rubric.slug, entry["sha256"])
    if not stored.is_file():
        raise BadArchive("its zip is no longer kept: add it again")
    return PublicSource(entry_words(entry), zip_sources(stored, rubric, limits), role_of(entry))
