"""The base of an assignment's similarity check: the starter its students received, whose code
never counts.

Where it comes from, first found wins:
- the assignment's setting (`Assignment.similarity_base`, the settings page): `upload`, the zip
  staff gave (kept at `KG_DATA_DIR/reports/similarity-base-<slug>.zip`), or a git ref
  `git:<repository>@<ref>`, fetched only as grader.similarity.fetch allows (https, a listed
  host, a public address, a time and a size cap; never a folder of this machine);
- the rubric's default (`similarity: base:` in rubrics/<slug>.yaml, a git ref);
- our kit's stripped starter (grader.similarity.starter_sources), the fallback, also when the
  rubric's default cannot be fetched (the report says so).
A setting staff chose that cannot be read is an error, never silently replaced. A git
repository is cloned once under `KG_DATA_DIR/reports/starters/`. `grader similarity --base`
names one directly (a git ref, or, the operator's own command, a zip or a folder of this machine).

A base is named exactly (`Base.label`): the zip staff gave by its file name and sha256, a git
ref by the commit it resolved to, and every base by how many files it holds and a digest of
them (`files_digest`); the pair view names each base file it compared against by its sha256.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.datadir import private_dir, tighten, write_private
from grader.similarity.compare import Sources, starter_sources, tree_sources
from grader.similarity.fetch import FetchRules, check_host, fetch_clone
from worker.rubric import Rubric, RubricError, load_rubric
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip

UPLOAD = "upload"  # the setting naming the zip staff gave
GIT_TIMEOUT_S = 300


@dataclass(frozen=True)
class Base:
    sources: Sources
    label: str  # what it is, in words, for the report
    received: bool = True  # the starter the students received; False: our kit's stand-in


def text_sha256(text: str) -> str:
    """A file's sha256 as `sha256sum` gives it (of its text as UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()


def files_digest(sources: Sources) -> str:
    """One sha256 for a set of files: of each path and its text's sha256, in path order."""
    return hashlib.sha256("".join(f"{path}\0{text_sha256(text)}\n" for path, text in sorted(sources.items()))
                          .encode()).hexdigest()


def named(words: str, sources: Sources, origin: str = "", received: bool = True) -> Base:
    """`words` with what identifies the base exactly: `origin` (a commit, a zip's name and sha256)
    and its files' count and digest; for a stand-in, what that costs."""
    where = f"{origin}; " if origin else ""
    caveat = "" if received else (". A stand-in: code of the starter the students really received counts as theirs, "
                                  "so pairs score high on it: give that starter in the settings")
    return Base(sources, f"{words} ({where}{len(sources)} files, digest {files_digest(sources)[:16]}){caveat}", received)


def base_path(data_dir: Path, slug: str) -> Path:
    return data_dir / "reports" / f"similarity-base-{slug}.zip"


def _upload_note(data_dir: Path, slug: str) -> Path:
    return base_path(data_dir, slug).with_suffix(".json")


def upload_origin(data_dir: Path, slug: str) -> str:
    """The zip staff gave, by its file name and sha256 (kept beside it); "" when not known."""
    try:
        note = json.loads(_upload_note(data_dir, slug).read_text())
    except (FileNotFoundError, ValueError):
        return ""
    return f"{note['filename']}, sha256 {note['sha256']}"


def clone_dir(data_dir: Path) -> Path:
    return data_dir / "reports" / "starters"


def zip_sources(archive: Path, rubric: Rubric, limits: UnpackLimits) -> Sources:
    """The rubric's student files in a starter zip (unpacked with the pipeline's checks);
    BadArchive when it holds none of them."""
    with tempfile.TemporaryDirectory(prefix="kg-base-") as tmp:
        unpack_zip(archive, Path(tmp) / "base", limits)
        found = tree_sources(find_assignment_root(Path(tmp) / "base", rubric.required_files), rubric.student_files)
    if not found:
        raise BadArchive("the starter holds none of the assignment's student files")
    return found


def parse_git_spec(spec: str) -> tuple[str, str]:
    """(repository, ref) of `git:<repository>@<ref>`; BadArchive when it is not one."""
    repository, _, ref = spec.removeprefix("git:").rpartition("@")
    if not spec.startswith("git:") or not repository or not ref:
        raise BadArchive(f"a git base is git:<repository>@<ref>, not {spec!r}")
    if repository.startswith("-") or ref.startswith("-"):  # git would read it as an option
        raise BadArchive(f"a git repository or ref cannot start with '-': {spec!r}")
    return repository, ref


def git_zip(spec: str, dest: Path, rules: FetchRules, clones: Path | None = None) -> str:
    """`git:<repository>@<ref>` archived as a zip at `dest`; the commit `ref` names. The
    repository is fetched (bare) under `clones` first, or into a temporary folder without one,
    only as grader.similarity.fetch allows: never a folder of this machine."""
    repository, ref = parse_git_spec(spec)
    with tempfile.TemporaryDirectory(prefix="kg-clone-") as tmp:
        local = _clone(repository, rules, clones or Path(tmp))
        commit = _git(["-C", local, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                      f"git rev-parse {ref} of {repository}")
        _git(["-C", local, "archive", "--format=zip", "-o", str(dest), commit], f"git archive {ref} of {repository}")
    return commit


def _clone(repository: str, rules: FetchRules, clones: Path) -> str:
    """The bare clone of `repository` under `clones`, fetched once. One kept from before is used
    only while its URL still passes the rules (the operator may have taken its host off the list)."""
    check_host(repository, rules)
    target = clones / (hashlib.sha256(repository.encode()).hexdigest()[:16] + ".git")
    if not target.is_dir():
        private_dir(clones)
        partial = Path(tempfile.mkdtemp(dir=clones, prefix=".clone-"))
        try:
            fetch_clone(repository, rules, partial)
        except BadArchive:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        tighten(partial)  # git's files follow the umask (a worker's is 022): the data dir's are owner-only
        os.replace(partial, target)
    return str(target)


def _git(args: list[str], what: str) -> str:
    """What git printed; BadArchive, with git's words, when it failed."""
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BadArchive(f"{what}: no answer in {GIT_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        raise BadArchive(f"{what}: {done.stderr.strip()}")
    return done.stdout.strip()


def given_base(spec: str, rubric: Rubric, limits: UnpackLimits, rules: FetchRules, clones: Path | None = None,
               words: str | None = None) -> Base:
    """A base named directly: a git ref (fetched as `rules` allow), or for the operator's
    `grader similarity --base` a zip or a starter folder of this machine (`words`: how the report
    says it, by default the spec itself)."""
    if spec.startswith("git:"):
        with tempfile.TemporaryDirectory(prefix="kg-base-") as tmp:
            commit = git_zip(spec, Path(tmp) / "base.zip", rules, clones)
            return named(words or spec, zip_sources(Path(tmp) / "base.zip", rubric, limits), f"commit {commit}")
    path = Path(spec)
    if path.is_dir():
        return named(words or spec, tree_sources(path, rubric.student_files))
    origin = f"{path.name}, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}" if path.is_file() else ""
    return named(words or spec, zip_sources(path, rubric, limits), origin)


def save_base(data_dir: Path, slug: str, archive: bytes, rubric: Rubric, limits: UnpackLimits,
              filename: str = "") -> int:
    """Keeps `archive` as the assignment's base once it reads as a starter, with its file name
    and sha256 beside it; its file count."""
    target = base_path(data_dir, slug)
    private_dir(target.parent)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".base-", suffix=".zip")
    with os.fdopen(fd, "wb") as fh:
        fh.write(archive)
    try:
        count = len(zip_sources(Path(tmp), rubric, limits))
    except BadArchive:
        os.unlink(tmp)
        raise
    os.replace(tmp, target)
    note = {"filename": Path(filename.replace("\\", "/")).name or target.name,
            "sha256": hashlib.sha256(archive).hexdigest()}
    write_private(_upload_note(data_dir, slug), json.dumps(note))
    return count


def describe_setting(setting: str | None, rubric_default: str | None) -> str:
    """The base an assignment's setting names, in words (before anything is fetched);
    `rubric_default`: the rubric's `similarity: base:`."""
    if setting == UPLOAD:
        return "the starter zip staff gave"
    if setting:
        return setting
    if rubric_default:
        return f"the rubric's default, {rubric_default}"
    return "our kit's stripped starter (no starter given)"


def describe_assignment_base(setting: str | None, slug: str, search: Sequence[Path], data_dir: Path) -> str:
    """`describe_setting` with the default of the rubric named `slug`, if there is one (found
    along `search`, the settings' rubric_dirs, after rubrics/), and the zip staff gave by its
    name and sha256."""
    try:
        words = describe_setting(setting, load_rubric(slug, search=search).similarity_base)
    except RubricError:
        words = describe_setting(setting, None)
    origin = upload_origin(data_dir, slug) if setting == UPLOAD else ""
    return f"{words} ({origin})" if origin else words


def fetch_refusal(setting: str | None, rubric_default: str | None, rules: FetchRules) -> str | None:
    """Why the git base an assignment's setting (else its rubric's default) names may not be
    fetched, as far as is known without a connection (the URL and its host); None when it may,
    or when the base is no git ref."""
    spec = setting if setting and setting != UPLOAD else (None if setting else rubric_default)
    if not spec or not spec.startswith("git:"):
        return None
    try:
        check_host(parse_git_spec(spec)[0], rules)
    except BadArchive as exc:
        return str(exc)
    return None


def assignment_base(data_dir: Path, rubric: Rubric, limits: UnpackLimits, setting: str | None,
                    rules: FetchRules) -> Base:
    """The base `setting` (the assignment's `similarity_base`) names, with what it is in words;
    BadArchive when a base staff set cannot be read (or is no git ref: staff never name a path of
    this machine)."""
    label = describe_setting(setting, rubric.similarity_base)
    if setting == UPLOAD:
        stored = base_path(data_dir, rubric.slug)
        if not stored.is_file():
            raise BadArchive("the starter zip staff gave is no longer kept: upload it again")
        return named(label, zip_sources(stored, rubric, limits), upload_origin(data_dir, rubric.slug))
    if setting:
        parse_git_spec(setting)
        return given_base(setting, rubric, limits, rules, clone_dir(data_dir), label)
    if rubric.similarity_base:
        try:
            return given_base(rubric.similarity_base, rubric, limits, rules, clone_dir(data_dir), label)
        except BadArchive as exc:
            return named(f"our kit's stripped starter: the rubric's default {rubric.similarity_base} could not be "
                         f"read ({exc})", starter_sources(rubric), received=False)
    return named(label, starter_sources(rubric), received=False)
