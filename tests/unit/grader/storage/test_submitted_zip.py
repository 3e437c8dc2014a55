"""The code view's reading of a zip (grader.storage.submitted_zip) agrees with the engine: on every
layout, the assignment folder and the files marked graded are those the grading pipeline
finds after unpacking (worker.unpack.find_assignment_root, the rubric's globs), and a zip the
engine refuses has no readable entry. The highlighter escapes everything and keeps each line's
markup whole."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.pages.highlight import highlight
from grader.runs.engine_config import pipeline_config
from grader.settings import Settings
from grader.similarity.compare import tree_sources
from grader.storage.submitted_zip import list_zip, read_entry
from tests.fixtures.hostile_zips import assignment_entries, macos_junk, make_zip
from worker.rubric import load_rubric
from worker.unpack import BadArchive, find_assignment_root, unpack_zip

RUBRIC = load_rubric("hw4")
LIMITS = pipeline_config(Settings(), RUBRIC).limits
LAYOUTS = {
    "top level": assignment_entries(),
    "in a folder": assignment_entries("llmsys_hw4/"),
    "with Finder's junk": [*assignment_entries("hw4/"), *macos_junk("hw4/")],
    "a copy of src in a subfolder": [*assignment_entries("hw/"), ("hw/old/src/combine.cu", b"int old;\n")],
    "two whole folders": [*assignment_entries("a/"), *assignment_entries("b/")],
    "no assignment folder": [("notes.txt", b"nothing\n")],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_folder_and_the_graded_files_are_the_engines(layout: str, tmp_path: Path) -> None:
    archive = tmp_path / "upload.zip"
    archive.write_bytes(make_zip(LAYOUTS[layout]))
    listing = list_zip(archive, RUBRIC, LIMITS)
    unpack_zip(archive, tmp_path / "tree", LIMITS)
    try:
        root = find_assignment_root(tmp_path / "tree", RUBRIC.required_files)
    except BadArchive:
        assert listing.folder is None and listing.refusal and not listing.graded
        return
    where = root.relative_to(tmp_path / "tree").as_posix()
    assert listing.folder == ("" if where == "." else where) and listing.refusal is None
    prefix = "" if where == "." else where + "/"
    assert {e.name for e in listing.graded} == {prefix + rel for rel in tree_sources(root, RUBRIC.student_files)}


def test_a_refused_zip_lists_names_and_reads_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "upload.zip"
    archive.write_bytes(make_zip([*assignment_entries(), ("../outside.cu", b"int x;\n")]))
    listing = list_zip(archive, RUBRIC, LIMITS)
    assert listing.refusal and listing.refusal.startswith("The zip contains a path that leaves its folder")
    assert "../outside.cu" in [e.name for e in listing.entries] and not any(e.readable for e in listing.entries)
    assert listing.entry("src/combine.cu") is None


def test_reading_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("grader.storage.submitted_zip.SHOWN_MAX_BYTES", 10)
    archive = tmp_path / "upload.zip"
    archive.write_bytes(make_zip([*assignment_entries(), ("src/long.cu", b"0123456789abcdef")]))
    entry = list_zip(archive, RUBRIC, LIMITS).entry("src/long.cu")
    assert entry is not None and entry.graded
    shown = read_entry(archive, entry)
    assert shown.cut and shown.text == "0123456789"


def test_highlighting_escapes_and_closes_each_line() -> None:
    lines = highlight('/* a <b>\n still */ int x = 1; // "q"\nchar *s = "<script>";\n', "k.cu")
    assert lines == [
        '<span class="tok-c">/* a &lt;b&gt;</span>',
        '<span class="tok-c"> still */</span> <span class="tok-k">int</span> x = <span class="tok-n">1</span>; '
        '<span class="tok-c">// &#34;q&#34;</span>',
        '<span class="tok-k">char</span> *s = <span class="tok-s">&#34;&lt;script&gt;&#34;</span>;',
    ]
    assert highlight("def f():\n    '''<doc>\n    '''\n", "m.py")[1] == '    <span class="tok-s">&#39;&#39;&#39;&lt;doc&gt;</span>'
    assert highlight("<i>plain</i>", "README.md") == ["&lt;i&gt;plain&lt;/i&gt;"]
