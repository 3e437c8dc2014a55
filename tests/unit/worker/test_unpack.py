"""worker.unpack against hostile and ordinary uploads built in code (see hostile_zips.py).

Every rejection must raise BadArchive with a message a student can act on, and must leave
nothing outside the job folder: the whole tmp folder around it is compared before and after.
"""
from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from tests.fixtures import hostile_zips as hz
from worker.unpack import BadArchive, Unpacked, UnpackLimits, check_entries, find_assignment_root, unpack_zip

LIMITS = UnpackLimits(
    max_total_bytes=20 * hz.MiB,
    max_file_bytes=4 * hz.MiB,
    max_files=50,
    max_depth=6,
    max_ratio=100,
)
ROOMY = UnpackLimits(  # big enough that only the ratio checks can fire
    max_total_bytes=500 * hz.MiB,
    max_file_bytes=200 * hz.MiB,
    max_files=1000,
    max_depth=6,
    max_ratio=100,
)


def _snapshot(top: Path, exclude: Path) -> dict[str, int]:
    """Every path under `top` (with its size) except those inside `exclude`."""
    seen = {}
    for p in top.rglob("*"):
        if p == exclude or exclude in p.parents:
            continue
        seen[str(p.relative_to(top))] = p.lstat().st_size if not p.is_dir() else -1
    return seen


class Upload:
    """An upload in a private tmp folder, with a job folder two levels down inside it."""

    def __init__(self, tmp_path: Path, data: bytes, name: str = "upload.zip") -> None:
        self.top = tmp_path
        self.archive = tmp_path / name
        self.archive.write_bytes(data)
        self.dest = tmp_path / "jobs" / "job-1"
        (tmp_path / "jobs").mkdir()

    def unpack(self, limits: UnpackLimits = LIMITS) -> Unpacked:
        return unpack_zip(self.archive, self.dest, limits)

    def rejected(self, limits: UnpackLimits = LIMITS) -> str:
        """Unpack, expect BadArchive, check nothing escaped the job folder; the message."""
        before = _snapshot(self.top, self.dest)
        with pytest.raises(BadArchive) as caught:
            self.unpack(limits)
        assert _snapshot(self.top, self.dest) == before, "something was written outside the job folder"
        message = str(caught.value)
        assert message and "Traceback" not in message
        assert str(self.top) not in message, "the message leaks a server path"
        return message

    def written(self) -> dict[str, bytes]:
        if not self.dest.exists():
            return {}
        return {str(p.relative_to(self.dest)): p.read_bytes() for p in self.dest.rglob("*") if p.is_file()}


# ---------------------------------------------------------------- path escapes


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("../evil.txt", "leaves its folder"),
        ("a/../../evil", "leaves its folder"),
        ("hw4/src/../../../evil.cu", "leaves its folder"),
        ("..\\evil", "leaves its folder"),
        ("hw4\\..\\..\\evil", "leaves its folder"),
        ("/tmp/evil", "absolute path"),
        ("C:/evil", "absolute path"),
        ("C:\\evil", "absolute path"),
        ("\\evil", "absolute path"),
    ],
)
def test_escaping_names_are_rejected(tmp_path: Path, name: str, phrase: str) -> None:
    data = hz.make_zip([("hw4/src/combine.cu", b"int ok;\n"), (name, b"pwned\n")])
    up = Upload(tmp_path, data)
    message = up.rejected()
    assert phrase in message
    assert name in message or repr(name) in message  # the student sees which entry
    assert up.written() == {}, "entries are checked before any byte is written"


def test_absolute_entry_does_not_reach_its_target(tmp_path: Path) -> None:
    target = hz.unique_absolute_target(str(tmp_path.parent))
    up = Upload(tmp_path, hz.make_zip([(target, b"pwned\n")]))
    assert "absolute path" in up.rejected()
    assert not Path(target).exists()


def test_escape_hidden_after_many_good_entries_still_writes_nothing(tmp_path: Path) -> None:
    entries = hz.assignment_entries("hw4/") + [("hw4/../../escape.txt", b"x")]
    up = Upload(tmp_path, hz.make_zip(entries))
    up.rejected()
    assert up.written() == {}


# ---------------------------------------------------------------- special entries


def test_symlink_entry_is_rejected(tmp_path: Path) -> None:
    link = hz.unix_entry("hw4/src/combine.cu", stat.S_IFLNK, 0o777)
    up = Upload(tmp_path, hz.make_zip([(link, b"/etc/passwd")]))
    message = up.rejected()
    assert "symbolic link" in message and "hw4/src/combine.cu" in message
    assert not (up.dest / "hw4" / "src" / "combine.cu").is_symlink()


@pytest.mark.parametrize("kind", [stat.S_IFCHR, stat.S_IFIFO, stat.S_IFBLK, stat.S_IFSOCK])
def test_device_fifo_and_socket_entries_are_rejected(tmp_path: Path, kind: int) -> None:
    up = Upload(tmp_path, hz.make_zip([(hz.unix_entry("hw4/dev", kind), b"")]))
    assert "special file" in up.rejected()
    assert up.written() == {}


def test_regular_unix_file_entry_is_fine(tmp_path: Path) -> None:
    entry = hz.unix_entry("hw4/src/combine.cu", stat.S_IFREG, 0o755)
    up = Upload(tmp_path, hz.make_zip([(entry, b"int ok;\n")]))
    assert up.unpack() == Unpacked(1, 8)
    assert up.written() == {"hw4/src/combine.cu": b"int ok;\n"}


def test_encrypted_entry_is_rejected(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.encrypted_zip())
    with zipfile.ZipFile(up.archive) as zf:
        assert zf.infolist()[0].flag_bits & 0x1  # the premise: the patch took
    message = up.rejected()
    assert "encrypted" in message and "password" in message
    assert up.written() == {}


def test_nul_in_entry_name_is_rejected(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.nul_name_zip())
    message = up.rejected()
    assert "NUL" in message
    assert up.written() == {}


# ---------------------------------------------------------------- sizes and bombs


@pytest.fixture(scope="module")
def big_bomb() -> bytes:
    return hz.zeros_bomb(60 * hz.MiB)


def test_single_entry_bomb_is_caught_by_ratio(tmp_path: Path, big_bomb: bytes) -> None:
    assert len(big_bomb) < hz.MiB  # the premise: tiny archive, huge content
    up = Upload(tmp_path, big_bomb)
    message = up.rejected(ROOMY)
    assert "zip bomb" in message and "bomb.bin" in message
    assert up.written() == {}


def test_bomb_split_into_small_entries_is_caught_by_total_ratio(tmp_path: Path) -> None:
    data = hz.many_small_bombs(count=40, each=hz.MiB)  # each entry is at the per-entry floor
    up = Upload(tmp_path, data)
    message = up.rejected(ROOMY)
    assert "zip bomb" in message
    assert up.written() == {}


def test_compressible_but_ordinary_source_is_not_a_bomb(tmp_path: Path) -> None:
    # under 1 MiB, a highly repetitive file is allowed whatever its ratio
    source = b"    out[i] = in[i] * 2.0f;\n" * 30000
    up = Upload(tmp_path, hz.make_zip([("hw4/src/combine.cu", source)]))
    assert up.unpack().total_bytes == len(source)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_declared_size_that_lies_is_caught_while_decompressing(tmp_path: Path, compression: int) -> None:
    actual = hz.random_bytes(3 * hz.MiB)  # incompressible: the ratio checks cannot see it
    data = hz.lying_size_zip(actual, declared=1000, compression=compression)
    up = Upload(tmp_path, data)
    up.rejected()
    # whatever reached the disk is bounded by the declared size, not the real one
    assert sum(len(v) for v in up.written().values()) <= 1000


def test_too_many_entries(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.make_zip([(f"f{i}.txt", b"x") for i in range(LIMITS.max_files + 1)]))
    message = up.rejected()
    assert f"{LIMITS.max_files + 1} entries" in message and f"limit is {LIMITS.max_files}" in message
    assert up.written() == {}


def test_entry_count_at_the_limit_is_fine(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.make_zip([(f"f{i}.txt", b"x") for i in range(LIMITS.max_files)]))
    assert up.unpack() == Unpacked(LIMITS.max_files, LIMITS.max_files)


def test_too_deep_nesting(tmp_path: Path) -> None:
    deep = "/".join(["d"] * LIMITS.max_depth) + "/x.cu"
    up = Upload(tmp_path, hz.make_zip([(deep, b"x")]))
    message = up.rejected()
    # The reason first; the (possibly very long) path after it.
    assert message.startswith(f"the zip nests files deeper than {LIMITS.max_depth} folders; ")
    assert message.endswith(f"(the first such file: {deep})")


def test_nesting_at_the_limit_is_fine(tmp_path: Path) -> None:
    name = "/".join(["d"] * (LIMITS.max_depth - 1)) + "/x.cu"
    up = Upload(tmp_path, hz.make_zip([(name, b"x")]))
    assert up.unpack().files == 1


def test_single_file_over_the_per_file_limit(tmp_path: Path) -> None:
    big = hz.random_bytes(LIMITS.max_file_bytes + 1)
    up = Upload(tmp_path, hz.make_zip([("hw4/data.bin", big)], zipfile.ZIP_STORED))
    message = up.rejected()
    assert "hw4/data.bin" in message and "per-file limit of 4 MiB" in message
    assert up.written() == {}


def test_total_over_the_limit(tmp_path: Path) -> None:
    limits = UnpackLimits(max_total_bytes=3 * hz.MiB, max_file_bytes=2 * hz.MiB, max_files=50,
                          max_depth=6, max_ratio=100)
    chunk = hz.random_bytes(hz.MiB + 1)
    up = Upload(tmp_path, hz.make_zip([(f"p{i}.bin", chunk) for i in range(3)], zipfile.ZIP_STORED))
    assert "expands to more than 3 MiB" in up.rejected(limits)
    assert up.written() == {}


# ---------------------------------------------------------------- duplicates and conflicts


@pytest.mark.parametrize(
    "second",
    ["hw4/src/combine.cu", "hw4/./src/combine.cu", "hw4//src/combine.cu", "hw4\\src\\combine.cu"],
)
def test_duplicate_entry_names(tmp_path: Path, second: str) -> None:
    data = hz.make_zip([("hw4/src/combine.cu", b"first\n"), (second, b"second\n")])
    up = Upload(tmp_path, data)
    assert "twice" in up.rejected()
    assert up.written() == {"hw4/src/combine.cu": b"first\n"}  # never overwritten


@pytest.mark.parametrize(
    "entries",
    [
        [("hw4/src", b"a file"), ("hw4/src/combine.cu", b"x")],
        [("hw4/src/combine.cu", b"x"), ("hw4/src", b"a file")],
    ],
    ids=["file-then-folder", "folder-then-file"],
)
def test_same_name_as_file_and_folder(tmp_path: Path, entries: list[hz.Entry]) -> None:
    up = Upload(tmp_path, hz.make_zip(entries))
    assert "hw4/src" in up.rejected()


# ---------------------------------------------------------------- not a usable zip


def test_empty_zip(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.make_zip([]))
    assert "empty" in up.rejected()


@pytest.mark.parametrize(
    ("data", "what"),
    [(hz.random_bytes(), "is not a zip file"), (b"", "is not a zip file"),
     (hz.tar_gz(), "is a gzip file (a .tar.gz, say), not a zip file"),
     (hz.tar_gz(mode="w"), "is a tar archive, not a zip file"),
     (b"BZh91AY&SY" + hz.random_bytes(64), "is a bzip2 file (a .tar.bz2, say), not a zip file")],
    ids=["random-bytes", "zero-bytes", "tar-gz-renamed", "tar-renamed", "bzip2-renamed"],
)
def test_not_a_zip_says_what_it_is(tmp_path: Path, data: bytes, what: str) -> None:
    up = Upload(tmp_path, data)
    message = up.rejected()
    assert message.startswith(f"the upload {what}; ") and "zip -r" in message
    assert not up.dest.exists()


def test_corrupt_entry_data(tmp_path: Path) -> None:
    data = bytearray(hz.make_zip([("hw4/src/combine.cu", b"int x;\n" * 200)], zipfile.ZIP_DEFLATED))
    start = 30 + len("hw4/src/combine.cu")  # first byte of the compressed stream
    data[start:start + 8] = b"\xff" * 8
    up = Upload(tmp_path, bytes(data))
    message = up.rejected()
    assert message.startswith("the zip is damaged or incomplete: upload it again (hw4/src/combine.cu cannot be "
                              "read from it: "), message
    assert "zip -r" in message


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_a_zip_cut_short_is_damaged_not_foreign(tmp_path: Path, keep: float) -> None:
    """A real zip's first bytes (an interrupted upload or copy): named as a damaged zip, to send
    again, never as "not a zip"."""
    whole = hz.make_zip(hz.assignment_entries(), zipfile.ZIP_DEFLATED)
    up = Upload(tmp_path, whole[:int(len(whole) * keep)])
    message = up.rejected()
    assert message.startswith("the zip is damaged or incomplete: upload it again (it starts like a zip file, "
                              "but the list of its files"), message
    assert "not a zip" not in message and not up.dest.exists()


def test_dest_must_not_exist_yet(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.make_zip(hz.assignment_entries()))
    up.dest.mkdir()
    (up.dest / "old").write_text("x")
    with pytest.raises(FileExistsError):
        up.unpack()
    assert (up.dest / "old").read_text() == "x"


# ---------------------------------------------------------------- ordinary submissions


def test_assignment_with_top_folder(tmp_path: Path) -> None:
    entries = hz.assignment_entries("hw4/")
    up = Upload(tmp_path, hz.make_zip(entries))
    result = up.unpack()
    files = {name: data for name, data in entries if not name.endswith("/")}
    assert result == Unpacked(len(files), sum(len(d) for d in files.values()))
    assert up.written() == files
    assert find_assignment_root(up.dest, hz.REQUIRED) == up.dest / "hw4"


def test_assignment_without_top_folder(tmp_path: Path) -> None:
    entries = hz.assignment_entries()
    up = Upload(tmp_path, hz.make_zip(entries))
    assert up.unpack().files == len(entries)
    assert up.written() == dict(entries)
    assert find_assignment_root(up.dest, hz.REQUIRED) == up.dest


def test_macos_junk_is_skipped(tmp_path: Path) -> None:
    entries = hz.assignment_entries("hw4/") + hz.macos_junk("hw4/")
    up = Upload(tmp_path, hz.make_zip(entries))
    result = up.unpack()
    written = up.written()
    assert not any("__MACOSX" in n or n.endswith(".DS_Store") for n in written)
    assert result.files == len(written) == len(hz.assignment_entries("hw4/")) - 1
    assert find_assignment_root(up.dest, hz.REQUIRED) == up.dest / "hw4"


def test_names_with_dots_that_do_not_escape(tmp_path: Path) -> None:
    names = ["hw4/a..b.cu", "hw4/..hidden", "hw4/./src/x.cu", "hw4/...", ".../y"]
    up = Upload(tmp_path, hz.make_zip([(n, n.encode()) for n in names]))
    assert up.unpack().files == len(names)
    assert set(up.written()) == {"hw4/a..b.cu", "hw4/..hidden", "hw4/src/x.cu", "hw4/...", ".../y"}


def test_check_entries_lists_files_only(tmp_path: Path) -> None:
    entries = hz.assignment_entries("hw4/") + hz.macos_junk("hw4/") + [("hw4/empty_dir/", b"")]
    archive = tmp_path / "a.zip"
    archive.write_bytes(hz.make_zip(entries))
    with zipfile.ZipFile(archive) as zf:
        infos = check_entries(zf, LIMITS, archive.stat().st_size)
    names = [i.filename for i in infos]
    assert names == [n for n, _ in hz.assignment_entries("hw4/") if not n.endswith("/")]
    assert list(tmp_path.iterdir()) == [archive]  # checking writes nothing


# ---------------------------------------------------------------- find_assignment_root


def _tree(root: Path, files: list[str]) -> Path:
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("x")
    return root


def test_root_at_top(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", list(hz.REQUIRED))
    assert find_assignment_root(tree, hz.REQUIRED) == tree


def test_root_one_level_down(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", [f"llmsys_hw4/{f}" for f in hz.REQUIRED] + ["notes.txt"])
    assert find_assignment_root(tree, hz.REQUIRED) == tree / "llmsys_hw4"


def test_root_two_levels_down(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", [f"andrew/hw4/{f}" for f in hz.REQUIRED])
    assert find_assignment_root(tree, hz.REQUIRED) == tree / "andrew" / "hw4"


def test_incomplete_copy_next_to_the_real_one_is_ignored(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", [f"hw4/{f}" for f in hz.REQUIRED] + ["backup/src/softmax_kernel.cu"])
    assert find_assignment_root(tree, hz.REQUIRED) == tree / "hw4"


def test_two_candidate_folders_are_both_named(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", [f"{d}/{f}" for d in ("hw4_old", "hw4_new") for f in hz.REQUIRED])
    with pytest.raises(BadArchive) as caught:
        find_assignment_root(tree, hz.REQUIRED)
    message = str(caught.value)
    assert "more than one assignment folder" in message
    assert "hw4_old" in message and "hw4_new" in message
    assert str(tmp_path) not in message


def test_a_folder_lacking_a_required_file_is_still_the_root(tmp_path: Path) -> None:
    """The course's starter has no src/combine.cu: the pipeline names it per problem, so the
    root is found with or without an enclosing folder."""
    partial = [f for f in hz.REQUIRED if not f.endswith("combine.cu")]
    tree = _tree(tmp_path / "t", [f"hw4/{f}" for f in partial] + ["hw4/README.md"])
    assert find_assignment_root(tree, hz.REQUIRED) == tree / "hw4"
    flat = _tree(tmp_path / "flat", ["src/layernorm_kernel.cu"])
    assert find_assignment_root(flat, hz.REQUIRED) == flat


def test_the_folder_holding_the_most_required_files_wins(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", ["hw4/src/softmax_kernel.cu", "hw4/src/layernorm_kernel.cu",
                                  "old/src/softmax_kernel.cu", "hw4/backup/src/combine.cu"])
    assert find_assignment_root(tree, hz.REQUIRED) == tree / "hw4"


def test_two_partial_folders_holding_as_many_are_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", ["src/combine.cu", "hw4/src/softmax_kernel.cu"])
    with pytest.raises(BadArchive, match=r"spread over several folders \(the top level, hw4\): keep src/softmax"):
        find_assignment_root(tree, hz.REQUIRED)


def test_a_zip_without_any_required_file_is_refused_naming_them(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", ["hw4/README.md", "hw4/minitorch/__init__.py"])
    with pytest.raises(BadArchive) as caught:
        find_assignment_root(tree, hz.REQUIRED)
    message = str(caught.value)
    assert "could not find the assignment folder" in message
    assert "Missing: " + ", ".join(hz.REQUIRED) in message
    assert "Found" not in message and str(tmp_path) not in message


def test_kernel_files_outside_src_are_refused_with_what_was_found(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", ["hw4/softmax_kernel.cu", "hw4/combine.cu"])
    with pytest.raises(BadArchive) as caught:
        find_assignment_root(tree, hz.REQUIRED)
    message = str(caught.value)
    assert "Found hw4/combine.cu, hw4/softmax_kernel.cu, but not in the assignment's layout" in message
    assert str(tmp_path) not in message


def test_required_files_scattered_in_different_folders(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", ["a/src/softmax_kernel.cu", "b/src/layernorm_kernel.cu", "c/src/combine.cu"])
    with pytest.raises(BadArchive) as caught:
        find_assignment_root(tree, hz.REQUIRED)
    assert "side by side" in str(caught.value)


def test_empty_tree(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    with pytest.raises(BadArchive) as caught:
        find_assignment_root(tree, hz.REQUIRED)
    assert "Missing: " + ", ".join(hz.REQUIRED) in str(caught.value)


# ---------------------------------------------------------------- names the file system refuses


def test_name_flagged_utf8_but_not_utf8_is_a_bad_archive(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.invalid_utf8_name_zip())
    assert "not valid UTF-8" in up.rejected()
    assert not up.dest.exists()


@pytest.mark.parametrize("name", ["hw4/" + "n" * 256 + ".cu", "/".join(["d" * 200] * 6) + "/x.cu"],
                         ids=["long-part", "long-path"])
def test_overlong_names_are_rejected_before_writing(tmp_path: Path, name: str) -> None:
    up = Upload(tmp_path, hz.make_zip([("hw4/src/combine.cu", b"int ok;\n"), (name, b"x")]))
    assert "name is too long" in up.rejected(ROOMY)
    assert up.written() == {}


def test_unsupported_compression_method(tmp_path: Path) -> None:
    assert "could not be read" in Upload(tmp_path, hz.unsupported_method_zip()).rejected()


def test_entries_sharing_one_local_header_are_a_bomb(tmp_path: Path) -> None:
    up = Upload(tmp_path, hz.overlapping_entries_zip(copies=300, each=hz.MiB))
    with zipfile.ZipFile(up.archive) as zf:  # the premise: 300 names, one stored entry
        assert len({i.header_offset for i in zf.infolist()}) == 1 and len(zf.infolist()) == 300
    message = up.rejected(ROOMY)
    assert "zip bomb" in message or "expands to more than" in message
    assert up.written() == {}

