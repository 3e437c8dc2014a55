"""Safe extraction of an untrusted zip into a fresh job folder.

Every entry is checked before a byte is written: no absolute paths, no `..`, no links or
device files, no encrypted entries, caps on entry count, depth, per-file and total size
(counted while decompressing: declared sizes can lie) and on the compression ratio.
Problems raise BadArchive with a message written for the student.
"""
from __future__ import annotations

import errno
import lzma
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NoReturn

CHUNK = 1024 * 1024
MAX_NAME_PART_BYTES = 255  # NAME_MAX of Linux file systems
MAX_NAME_BYTES = 1024  # a whole entry name; real submissions stay far below
# Errors of a file system call that the entry's name causes (the student's to fix); any other
# OSError, such as a full disk, is the grader's and propagates.
_NAME_ERRNOS = (errno.ENAMETOOLONG, errno.EILSEQ, errno.EINVAL)
# Other formats a student may upload under a .zip name, by their first bytes: (offset, magic, what it is).
FOREIGN_FORMATS = (
    (0, b"\x1f\x8b", "a gzip file (a .tar.gz, say)"),
    (0, b"BZh", "a bzip2 file (a .tar.bz2, say)"),
    (0, b"\xfd7zXZ\x00", "an xz file (a .tar.xz, say)"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd file (a .tar.zst, say)"),
    (0, b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (0, b"Rar!\x1a\x07", "a RAR archive"),
    (257, b"ustar", "a tar archive"),
)
HEAD_BYTES = 262  # enough for every magic above (tar's is at 257)
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or an empty archive's end record
DAMAGED = "the zip is damaged or incomplete: upload it again"
# Why a file that starts like a zip cannot be opened (zipfile reads the list of entries first).
CUT_SHORT = ("it starts like a zip file, but the list of its files, kept at its end, is missing or unreadable: "
             "the file was cut short, by an interrupted upload, copy or download or before zipping finished")
IGNORED_PREFIXES = ("__MACOSX/",)
IGNORED_NAMES = {".DS_Store", "Thumbs.db"}


class BadArchive(Exception):
    """The upload cannot be unpacked; the message tells the student what to fix."""


@dataclass(frozen=True)
class UnpackLimits:
    max_total_bytes: int
    max_file_bytes: int
    max_files: int
    max_depth: int
    max_ratio: float


@dataclass(frozen=True)
class Unpacked:
    files: int
    total_bytes: int


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"


def _entry_kind(info: zipfile.ZipInfo) -> int:
    """The file-type bits of an entry made on Unix (0 when the zip carries none)."""
    return stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0


def _safe_relative(name: str) -> PurePosixPath | None:
    """The entry's path inside the job folder, or None for a directory entry; raises on escape."""
    if "\x00" in name:
        raise BadArchive(f"the zip has an entry with a NUL byte in its name ({name!r})")
    normalized = name.replace("\\", "/")
    if normalized.startswith("/") or (len(normalized) > 1 and normalized[1] == ":"):
        raise BadArchive(f"the zip contains an absolute path ({name!r}); zip the folder with relative paths")
    parts = [p for p in normalized.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise BadArchive(f"the zip contains a path that leaves its folder ({name!r})")
    if len(normalized.encode()) > MAX_NAME_BYTES or any(len(p.encode()) > MAX_NAME_PART_BYTES for p in parts):
        raise BadArchive(f"the zip has an entry whose name is too long ({name[:60]!r}...); use short file names")
    if not parts or normalized.endswith("/"):
        return None
    return PurePosixPath(*parts)


def _is_ignored(name: str) -> bool:
    return name.startswith(IGNORED_PREFIXES) or PurePosixPath(name).name in IGNORED_NAMES


def check_entries(archive: zipfile.ZipFile, limits: UnpackLimits, archive_bytes: int) -> list[zipfile.ZipInfo]:
    """Validate every entry's metadata; return the file entries to extract."""
    infos = archive.infolist()
    if not infos:
        raise BadArchive("the zip is empty")
    if len(infos) > limits.max_files:
        raise BadArchive(
            f"the zip has {len(infos)} entries; the limit is {limits.max_files}. "
            "Remove build outputs, data sets and virtual environments before zipping."
        )
    declared_total = 0
    files: list[zipfile.ZipInfo] = []
    for info in infos:
        _safe_relative(info.orig_filename)  # zipfile cuts `filename` at a NUL; the raw name keeps it
        rel = _safe_relative(info.filename)
        kind = _entry_kind(info)
        if kind == stat.S_IFLNK:
            raise BadArchive(f"the zip contains a symbolic link ({info.filename}); zip real files only")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise BadArchive(f"the zip contains a special file ({info.filename}); zip regular files only")
        if info.flag_bits & 0x1:
            raise BadArchive(f"the zip is encrypted ({info.filename}); upload it without a password")
        if rel is None or info.is_dir() or _is_ignored(info.filename):
            continue
        if len(rel.parts) > limits.max_depth:
            raise BadArchive(f"the zip nests files deeper than {limits.max_depth} folders; keep the assignment's "
                             f"layout, without extra folders around it (the first such file: {info.filename})")
        if info.file_size > limits.max_file_bytes:
            raise BadArchive(f"{info.filename} is larger than the per-file limit of {_mib(limits.max_file_bytes)}")
        if info.compress_size and info.file_size / info.compress_size > limits.max_ratio and info.file_size > CHUNK:
            raise BadArchive(f"{info.filename} expands suspiciously ({info.file_size} bytes from {info.compress_size}); "
                             "this looks like a zip bomb")
        declared_total += info.file_size
        files.append(info)
    if declared_total > limits.max_total_bytes:
        raise BadArchive(f"the zip expands to more than {_mib(limits.max_total_bytes)}")
    if archive_bytes and declared_total > CHUNK and declared_total / archive_bytes > limits.max_ratio:
        raise BadArchive("the zip expands more than a real submission could; this looks like a zip bomb")
    return files


def unpack_zip(archive_path: Path, dest: Path, limits: UnpackLimits) -> Unpacked:
    """Extract `archive_path` into the empty folder `dest` (created) under `limits`."""
    archive = _open_zip(archive_path)
    written_total = 0
    with archive:
        dest.mkdir(parents=True, exist_ok=False)
        root = dest.resolve()
        files = check_entries(archive, limits, archive_path.stat().st_size)
        for info in files:
            rel = _safe_relative(info.filename)
            assert rel is not None
            target = (root / rel).resolve()
            if not target.is_relative_to(root):  # defence in depth after the name checks
                raise BadArchive(f"the zip contains a path that leaves its folder ({info.filename!r})")
            if target.exists():
                raise BadArchive(f"the zip contains {info.filename} twice")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:
                raise BadArchive(f"the zip contains {info.filename} inside a path that is also a file") from exc
            except OSError as exc:
                _raise_for_name(info.filename, exc)
            written = 0
            try:
                with archive.open(info) as src, open(target, "xb") as out:
                    while chunk := src.read(CHUNK):
                        written += len(chunk)
                        written_total += len(chunk)
                        if written > limits.max_file_bytes or written > info.file_size:
                            raise BadArchive(f"{info.filename} expands beyond its declared size; "
                                             "this looks like a zip bomb")
                        if written_total > limits.max_total_bytes:
                            raise BadArchive(f"the zip expands to more than {_mib(limits.max_total_bytes)}")
                        out.write(chunk)
            except NotImplementedError as exc:  # e.g. Deflate64, which some Windows tools write
                raise BadArchive(f"{info.filename} could not be read from the zip ({exc}); create the zip again "
                                 "with `zip -r` or another tool's ordinary (deflate) compression") from exc
            except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, ValueError) as exc:
                raise BadArchive(damaged(f"{info.filename} cannot be read from it: {exc}")) from exc
            except OSError as exc:
                _raise_for_name(info.filename, exc)
    return Unpacked(len(files), written_total)


def damaged(why: str) -> str:
    """The words for a zip that cannot be read whole, with `why`."""
    return f"{DAMAGED} ({why}). If it happens again, zip the folder anew (`zip -r`)"


def looks_like_zip(head: bytes) -> bool:
    """Whether a file starts as a zip does (its first bytes), whatever follows."""
    return head[:4] in ZIP_MAGIC


def not_a_zip(head: bytes) -> str:
    """What a file that is not a zip is, from its first HEAD_BYTES: "is a gzip file (a .tar.gz,
    say), not a zip file", or "is not a zip file" when they name no format we know."""
    kind = next((what for at, magic, what in FOREIGN_FORMATS if head[at:at + len(magic)] == magic), None)
    return f"is {kind}, not a zip file" if kind else "is not a zip file"


def _open_zip(archive_path: Path) -> zipfile.ZipFile:
    """The archive opened for reading; a damaged or foreign file raises BadArchive (a missing
    one raises OSError: that is the grader's fault, not the student's)."""
    try:
        return zipfile.ZipFile(archive_path)
    except UnicodeDecodeError as exc:  # the UTF-8 flag is set on a name that is not UTF-8
        raise BadArchive("the zip has an entry name that is not valid UTF-8 although the zip says it is; "
                         "create the zip again with plain file names") from exc
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        with archive_path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        if looks_like_zip(head):
            raise BadArchive(damaged(CUT_SHORT)) from exc
        raise BadArchive(f"the upload {not_a_zip(head)}; create it with `zip -r` or your file manager's "
                         "'compress' action") from exc


def _raise_for_name(name: str, exc: OSError) -> NoReturn:
    """BadArchive when the file system refused the entry's name; any other OSError (a full
    disk, say) is raised again as it is."""
    if exc.errno in _NAME_ERRNOS:
        raise BadArchive(f"the zip has an entry that cannot be written under its name ({name[:60]!r}): "
                         f"{exc.strerror}; use plain, short file names") from exc
    raise exc


def find_assignment_root(tree: Path, required_files: tuple[str, ...]) -> Path:
    """The folder holding the assignment: of the folders (the zip's top level or any below it:
    students zip with and without an enclosing folder) holding some of `required_files`, the
    one holding the most. Some may be missing (the pipeline names them per problem); a zip
    with none of them, or with two folders holding as many, is a bad archive."""
    holding: dict[Path, int] = {}
    for rel in required_files:
        parts = PurePosixPath(rel).parts
        for found in tree.rglob(parts[-1]):
            inside = found.relative_to(tree).parts
            if found.is_file() and inside[-len(parts):] == parts and "__MACOSX" not in inside:
                folder = tree.joinpath(*inside[: -len(parts)])
                holding[folder] = holding.get(folder, 0) + 1
    if not holding:
        seen = sorted({f.relative_to(tree).as_posix() for rel in required_files
                       for f in tree.rglob(PurePosixPath(rel).name) if f.is_file()})
        hint = f" Found {', '.join(seen[:5])}, but not in the assignment's layout." if seen else ""
        raise BadArchive(
            "could not find the assignment folder in the zip: it needs " + ", ".join(required_files)
            + f" side by side. Missing: {', '.join(required_files)}.{hint} Zip your whole assignment folder."
        )
    most = max(holding.values())
    best = sorted(folder for folder, count in holding.items() if count == most)
    if len(best) == 1:
        return best[0]
    names = ", ".join(f.relative_to(tree).as_posix() if f != tree else "the top level" for f in best)
    if most == len(required_files):
        raise BadArchive(f"the zip holds more than one assignment folder ({names}); upload one")
    raise BadArchive(
        f"the assignment's files are spread over several folders ({names}): keep "
        + ", ".join(required_files) + " side by side in one folder and zip that folder."
    )
