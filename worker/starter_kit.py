"""The student starter, derived from the trusted reference kit (starter/<slug>/).

Solution regions in the reference are delimited by marker lines:

    CUDA / C / C++ (.cu .cuh .h .hpp .c .cpp):
        // BEGIN SOLUTION: <label>
        ...
        // END SOLUTION
    Python (.py):
        # BEGIN SOLUTION: <label>
        ...
        # END SOLUTION

Each region (markers included) becomes one stub line at the BEGIN line's indentation:
`// TODO(<label>): your code here` or `raise NotImplementedError("<label>: your code here")`.
Unbalanced or nested markers raise `MarkerError` naming the file and line.

`render_starter` copies a reference tree with its marked files stripped (build outputs left
out); the service uses it both for the starter zip and as the trusted base tree onto which a
submission's own files are staged. Standard library only (plus the rubric and plug-in modules).
"""
from __future__ import annotations

import io
import os
import re
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from worker.assignment import assignment_of

if TYPE_CHECKING:  # pragma: no cover
    from worker.rubric import Rubric

# The top folder of a zip made of a tree that is not an assignment's starter (a starter zip's
# is the assignment's own: worker.assignment.Plugin.zip_folder).
ZIP_TOP_FOLDER = "submission"
# 1980-01-01 00:00:00, the earliest time a zip entry can carry: fixed for reproducible zips.
ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)

C_LIKE_SUFFIXES = frozenset({".cu", ".cuh", ".h", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".inl"})
PY_SUFFIXES = frozenset({".py"})

# Left out of a rendered tree: build outputs, caches, editor and OS junk.
SKIP_DIR_NAMES = frozenset(
    {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git", "build", ".ipynb_checkpoints"}
)
SKIP_FILE_SUFFIXES = frozenset({".so", ".o", ".obj", ".a", ".pyc", ".pyo", ".pyd", ".dll", ".dylib", ".swp"})
SKIP_FILE_NAMES = frozenset({".DS_Store", "Thumbs.db"})

MARKER_WORDS = ("BEGIN SOLUTION", "END SOLUTION")


class MarkerError(ValueError):
    """Solution markers are malformed (unbalanced, nested, unlabeled)."""


@dataclass(frozen=True)
class Region:
    """One solution region: 1-based line numbers of its BEGIN and END marker lines."""

    label: str
    begin: int
    end: int
    indent: str
    body: tuple[str, ...]  # the lines strictly between the markers, without line endings


def _comment_prefix(suffix: str) -> str | None:
    suffix = suffix.lower()
    if suffix in C_LIKE_SUFFIXES:
        return "//"
    if suffix in PY_SUFFIXES:
        return "#"
    return None


def _marker_patterns(prefix: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    p = re.escape(prefix)
    begin = re.compile(rf"^(?P<indent>[ \t]*){p}\s*BEGIN SOLUTION\b(?P<rest>.*)$")
    end = re.compile(rf"^(?P<indent>[ \t]*){p}\s*END SOLUTION\b(?P<rest>.*)$")
    return begin, end


def _where(filename: str | None, lineno: int) -> str:
    return f"{filename or '<text>'}:{lineno}"


def _parse_label(rest: str, filename: str | None, lineno: int) -> str:
    rest = rest.strip()
    if not rest.startswith(":"):
        raise MarkerError(f"{_where(filename, lineno)}: BEGIN SOLUTION needs a label ('BEGIN SOLUTION: <label>')")
    label = rest[1:].strip()
    if not label:
        raise MarkerError(f"{_where(filename, lineno)}: empty label after 'BEGIN SOLUTION:'")
    if any(c in label for c in '"\\\r\n'):
        raise MarkerError(f"{_where(filename, lineno)}: label {label!r} may not contain quotes or backslashes")
    return label


def find_regions(text: str, suffix: str, filename: str | None = None) -> list[Region]:
    """The solution regions of a file's text; [] for file kinds without markers."""
    prefix = _comment_prefix(suffix)
    if prefix is None:
        return []
    begin_re, end_re = _marker_patterns(prefix)
    regions: list[Region] = []
    open_at: tuple[int, str, str] | None = None  # (line, label, indent)
    body: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        b = begin_re.match(line)
        e = end_re.match(line) if b is None else None
        if b is not None:
            if open_at is not None:
                raise MarkerError(
                    f"{_where(filename, lineno)}: nested BEGIN SOLUTION "
                    f"(region {open_at[1]!r} opened at line {open_at[0]} is not closed)"
                )
            open_at = (lineno, _parse_label(b.group("rest"), filename, lineno), b.group("indent"))
            body = []
        elif e is not None:
            if open_at is None:
                raise MarkerError(f"{_where(filename, lineno)}: END SOLUTION without a BEGIN SOLUTION")
            if e.group("rest").strip():
                raise MarkerError(f"{_where(filename, lineno)}: unexpected text after END SOLUTION")
            regions.append(Region(open_at[1], open_at[0], lineno, open_at[2], tuple(body)))
            open_at = None
        else:
            if any(word in line for word in MARKER_WORDS):
                raise MarkerError(
                    f"{_where(filename, lineno)}: solution marker text in a line that is not a "
                    f"'{prefix} BEGIN SOLUTION: <label>' / '{prefix} END SOLUTION' marker line"
                )
            if open_at is not None:
                body.append(line)
    if open_at is not None:
        raise MarkerError(f"{_where(filename, open_at[0])}: BEGIN SOLUTION {open_at[1]!r} is never closed")
    return regions


def stub_line(label: str, suffix: str) -> str:
    """The line (without indentation) that replaces a region."""
    if _comment_prefix(suffix) == "#":
        return f'raise NotImplementedError("{label}: your code here")'
    return f"// TODO({label}): your code here"


def strip_solutions(text: str, suffix: str, filename: str | None = None) -> str:
    """Replace every solution region of `text` (a file with extension `suffix`) by its stub.

    Text of other file kinds comes back unchanged. Line endings are preserved.
    """
    regions = find_regions(text, suffix, filename)
    if not regions:
        return text
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    starts = {r.begin: r for r in regions}
    i = 0
    while i < len(lines):
        region = starts.get(i + 1)
        if region is None:
            out.append(lines[i])
            i += 1
            continue
        begin_line = lines[region.begin - 1]
        ending = begin_line[len(begin_line.rstrip("\r\n")):] or "\n"
        out.append(region.indent + stub_line(region.label, suffix) + ending)
        i = region.end  # skip through the END line (index end-1)
        if i == len(lines) and not lines[region.end - 1].endswith(("\n", "\r")):
            out[-1] = out[-1].rstrip("\r\n")
    return "".join(out)


def _skipped(rel: Path) -> bool:
    if any(part in SKIP_DIR_NAMES or part.endswith(".egg-info") for part in rel.parts[:-1]):
        return True
    name = rel.name
    return name in SKIP_FILE_NAMES or Path(name).suffix.lower() in SKIP_FILE_SUFFIXES or name.endswith("~")


def starter_files(reference_dir: Path) -> list[Path]:
    """Relative paths (sorted) of the regular files a render of `reference_dir` contains."""
    reference_dir = Path(reference_dir)
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(reference_dir):
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIR_NAMES and not d.endswith(".egg-info")
            and not os.path.islink(os.path.join(dirpath, d))
        )
        for name in filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(reference_dir)
            if full.is_symlink() or not full.is_file() or _skipped(rel):
                continue
            found.append(rel)
    return sorted(found, key=lambda p: p.as_posix())


def render_starter(reference_dir: Path, dest: Path) -> None:
    """Copy `reference_dir` to `dest` with every solution region replaced by its stub.

    Build outputs (*.so, object files), caches (__pycache__, ...) and symlinks are left out.
    File modes (the executable bit) are kept. `dest` must not exist or be an empty folder.
    Raises MarkerError for malformed markers, FileNotFoundError for a missing reference.
    """
    reference_dir = Path(reference_dir)
    dest = Path(dest)
    if not reference_dir.is_dir():
        raise FileNotFoundError(f"reference kit not found: {reference_dir}")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"destination exists and is not an empty folder: {dest}")
    rendered: dict[Path, bytes] = {}
    for rel in starter_files(reference_dir):  # strip everything first: fail before writing
        data = (reference_dir / rel).read_bytes()
        if _comment_prefix(rel.suffix) is not None:
            text = data.decode("utf-8")
            data = strip_solutions(text, rel.suffix, rel.as_posix()).encode("utf-8")
        rendered[rel] = data
    dest.mkdir(parents=True, exist_ok=True)
    for rel, data in rendered.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        mode = (reference_dir / rel).stat().st_mode
        os.chmod(target, 0o755 if mode & stat.S_IXUSR else 0o644)


def zip_tree(root: Path, dest_zip: Path, top_folder: str = ZIP_TOP_FOLDER) -> Path:
    """Zip every file under `root` as `<top_folder>/<relative path>`, reproducibly:
    sorted entries, fixed timestamps and modes, fixed compression level."""
    root = Path(root)
    dest_zip = Path(dest_zip)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for rel in starter_files(root):
            full = root / rel
            info = zipfile.ZipInfo(f"{top_folder}/{rel.as_posix()}", date_time=ZIP_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so external_attr carries the mode
            mode = 0o755 if full.stat().st_mode & stat.S_IXUSR else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, full.read_bytes(), compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    dest_zip.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest_zip.parent, prefix=".tmp-", suffix=".zip")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(buf.getvalue())
        os.replace(tmp, dest_zip)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest_zip


def write_starter_zip(rubric: Rubric, dest_zip: Path) -> Path:
    """Render the rubric's reference kit as the student starter and zip it under the
    assignment's folder name (llmsys_hw4/ for hw4). Deterministic: the same reference gives
    the same bytes. Returns dest_zip."""
    with tempfile.TemporaryDirectory(prefix="starter-") as tmp:
        tree = Path(tmp) / "tree"
        render_starter(rubric.starter_dir, tree)
        return zip_tree(tree, Path(dest_zip), assignment_of(rubric).zip_folder)


def main(argv: list[str] | None = None) -> int:
    """`python -m worker.starter_kit slug [--out PATH] [--rubric-dir DIR]...` (the CLI proper is
    `grader starter build`, which searches the settings' KG_RUBRIC_DIRS)."""
    import argparse

    from worker.rubric import load_rubric

    parser = argparse.ArgumentParser(description="Write the student starter zip of an assignment.")
    parser.add_argument("slug")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rubric-dir", type=Path, action="append", default=[],
                        help="a folder searched for <slug>.yaml after rubrics/ (repeat the option)")
    args = parser.parse_args(argv)
    rubric = load_rubric(args.slug, search=args.rubric_dir)
    out = args.out or Path(f"{rubric.slug}-starter.zip")
    print(write_starter_zip(rubric, out))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
