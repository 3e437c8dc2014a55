"""What a stored submission's zip holds, read for the code view without writing a byte of it
to disk: every entry's name and size, whether the grader takes it (one of the rubric's student
files in the assignment folder), and one file's first bytes as text.

The engine's own checks (worker.unpack.check_entries: links, paths that leave the folder,
encryption, sizes, zip bombs) decide whether the zip can be unpacked at all; when they refuse
it, its entries are listed by name and none is read. Reading is capped whatever a header
declares, so a file that expands past the cap costs no more than the cap.
"""
from __future__ import annotations

import lzma
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from worker.rubric import Rubric
from worker.unpack import (
    CUT_SHORT,
    HEAD_BYTES,
    BadArchive,
    UnpackLimits,
    check_entries,
    damaged,
    looks_like_zip,
    not_a_zip,
)

SHOWN_MAX_BYTES = 256 * 1024  # of one file on the page; the download has every byte
LISTED_MAX_ENTRIES = 1000  # a zip refused for its entry count still lists this many
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, NotImplementedError, ValueError)


@dataclass(frozen=True)
class Entry:
    name: str  # as the zip spells it: only ever shown, and looked up in the zip, never a path on disk
    size: int  # the size the zip declares
    readable: bool  # a regular file the engine unpacks (the zip passed its checks)
    graded: bool  # the grader takes it: one of the rubric's student files in the assignment folder

    @property
    def label(self) -> str:
        return printable(self.name)


@dataclass(frozen=True)
class Listing:
    entries: list[Entry]
    left_out: int  # entries past LISTED_MAX_ENTRIES
    refusal: str | None  # why the grader takes nothing from this zip, as a sentence; None: it unpacks
    folder: str | None  # the assignment folder in the zip ("" for its top level), when there is one

    def entry(self, name: str) -> Entry | None:
        return next((e for e in self.entries if e.name == name and e.readable), None)

    def in_folder(self, path: str) -> Entry | None:
        """The graded entry at `path` inside the assignment folder (a path as a build log or
        the rubric names it, e.g. src/softmax_kernel.cu)."""
        if self.folder is None:
            return None
        want = PurePosixPath(self.folder) / _relative(path)
        return next((e for e in self.entries if e.graded and _relative(e.name) == want), None)

    @property
    def graded(self) -> list[Entry]:
        return [e for e in self.entries if e.graded]


@dataclass(frozen=True)
class Shown:
    """One file's first SHOWN_MAX_BYTES as text; `text` None: not shown, `problem` says why."""

    name: str
    size: int
    text: str | None
    cut: bool
    problem: str | None = None

    @property
    def label(self) -> str:
        return printable(self.name)


def printable(name: str, limit: int = 300) -> str:
    """A name from the zip as the page shows it: control and other unprintable characters
    (a right-to-left override, say) replaced, a very long one cut."""
    shown = "".join(ch if ch.isprintable() else "\ufffd" for ch in name)
    return shown if len(shown) <= limit else shown[:limit] + "…"


def sentence(message: str) -> str:
    """An engine message (they start in lower case) as a sentence."""
    return message[:1].upper() + message[1:]


def _relative(name: str) -> PurePosixPath:
    """An entry's path inside the unpacked folder, as the engine forms it (the names have
    passed its checks: no absolute paths, no `..`)."""
    return PurePosixPath(*[p for p in name.replace("\\", "/").split("/") if p not in ("", ".")])


def _assignment_folder(paths: list[PurePosixPath], required: tuple[str, ...]) -> PurePosixPath | None:
    """The folder the engine grades (worker.unpack.find_assignment_root's rule, on names): the
    one holding the most of the required files; None when none holds any or two hold as many."""
    holding: Counter[PurePosixPath] = Counter()
    for rel in required:
        want = PurePosixPath(rel).parts
        for path in paths:
            if path.parts[-len(want):] == want and "__MACOSX" not in path.parts:
                holding[PurePosixPath(*path.parts[:-len(want)])] += 1
    if not holding:
        return None
    most = max(holding.values())
    best = [folder for folder, count in holding.items() if count == most]
    return best[0] if len(best) == 1 else None


def _is_student_file(path: PurePosixPath, patterns: tuple[str, ...]) -> bool:
    """Whether `path` (relative to the assignment folder) matches one of the rubric's globs as
    Path.glob does: part by part, the same number of parts."""
    return any(len(path.parts) == len(PurePosixPath(g).parts)
               and all(fnmatchcase(p, q) for p, q in zip(path.parts, PurePosixPath(g).parts, strict=True))
               for g in patterns)


def _open(archive: Path) -> zipfile.ZipFile:
    """The stored zip; BadArchive (a sentence) when it is not a zip that can be read."""
    try:
        return zipfile.ZipFile(archive)
    except UnicodeDecodeError as exc:
        raise BadArchive("The zip has an entry name that is not valid UTF-8 although the zip says it is.") from exc
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        with archive.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        what = damaged(CUT_SHORT) if looks_like_zip(head) else f"the upload {not_a_zip(head)}"
        raise BadArchive(f"{what[0].upper()}{what[1:]}.") from exc


def list_zip(archive: Path, rubric: Rubric, limits: UnpackLimits) -> Listing:
    """Every entry of the zip stored at `archive` (FileNotFoundError when it is gone)."""
    try:
        zf = _open(archive)
    except BadArchive as exc:
        return Listing([], 0, str(exc), None)
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        try:
            files = check_entries(zf, limits, archive.stat().st_size)
        except BadArchive as exc:
            shown = [Entry(i.filename, i.file_size, False, False) for i in infos[:LISTED_MAX_ENTRIES]]
            return Listing(shown, max(0, len(infos) - LISTED_MAX_ENTRIES), sentence(str(exc)), None)
    paths = {info.filename: _relative(info.filename) for info in files}
    twice = next((name for name, n in Counter(paths.values()).items() if n > 1), None)
    folder = _assignment_folder(list(paths.values()), rubric.required_files)
    refusal = None
    if twice is not None:
        refusal = f"The zip contains {twice} twice."
    elif folder is None:
        refusal = ("The grader finds no single assignment folder in this zip (one holding "
                   + ", ".join(rubric.required_files) + " side by side), so it takes none of its files.")
    entries = []
    for info in infos[:LISTED_MAX_ENTRIES]:
        path = paths.get(info.filename)
        graded = (refusal is None and path is not None and folder is not None and path.is_relative_to(folder)
                  and _is_student_file(path.relative_to(folder), rubric.student_files))
        entries.append(Entry(info.filename, info.file_size, path is not None, graded))
    where = None if folder is None else "" if folder == PurePosixPath() else folder.as_posix()
    return Listing(entries, max(0, len(infos) - LISTED_MAX_ENTRIES), refusal, where)


def read_entry(archive: Path, entry: Entry) -> Shown:
    """The first SHOWN_MAX_BYTES of a readable entry of `list_zip`, decompressed in memory."""
    assert entry.readable
    data = b""
    try:
        with zipfile.ZipFile(archive) as zf, zf.open(entry.name) as src:
            while len(data) <= SHOWN_MAX_BYTES and (chunk := src.read(SHOWN_MAX_BYTES + 1 - len(data))):
                data += chunk
    except _READ_ERRORS as exc:
        return Shown(entry.name, entry.size, None, False, f"This file cannot be read from the zip ({exc}).")
    cut = len(data) > SHOWN_MAX_BYTES
    data = data[:SHOWN_MAX_BYTES]
    if b"\x00" in data[:8192]:
        return Shown(entry.name, entry.size, None, cut, "This is a binary file; download the zip to look at it.")
    return Shown(entry.name, entry.size, data.decode("utf-8", errors="replace"), cut)
