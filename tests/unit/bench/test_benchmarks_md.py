"""bench/benchmarks_md.py: a recorded section lands at the top of its metric's history under
docs/benchmarks/, never on the front page (BENCHMARKS.md, one entry of current figures per
metric), and every bench names a metric that has a history."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import benchmarks_md  # noqa: E402

HISTORY = ROOT / "docs" / "benchmarks"
FRONT = ROOT / "BENCHMARKS.md"
ROW_HEADER = "| what | value | date | machine | commit | command |"


@pytest.fixture
def histories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of docs/benchmarks/ that the module writes to instead of the real one."""
    copy = tmp_path / "benchmarks"
    shutil.copytree(HISTORY, copy)
    monkeypatch.setattr(benchmarks_md, "HISTORY_DIR", copy)
    return copy


def test_a_recorded_section_goes_on_top_of_its_history(histories: Path) -> None:
    path = histories / "gradebook.md"
    before = path.read_text()
    intro, older = before.split("\n### ", 1)
    benchmarks_md.record_section("### Gradebook load, newer (2027-01-02)\n\n| a | b |\n", "gradebook")
    benchmarks_md.record_section("### Gradebook load, newest (2027-01-03)\n\n| c | d |\n", "gradebook")
    after = path.read_text()
    assert after.startswith(intro.rstrip("\n") + "\n\n### Gradebook load, newest (2027-01-03)\n\n| c | d |\n\n"
                            "### Gradebook load, newer (2027-01-02)\n\n| a | b |\n\n### ")
    assert after.endswith("### " + older)  # the older sections kept byte for byte


def test_a_new_history_file_gets_its_title(tmp_path: Path) -> None:
    path = benchmarks_md.record_section("## First (2027-01-01)\n\ntext\n", "setup", directory=tmp_path)
    assert path.read_text() == f"# {benchmarks_md.METRICS['setup']}\n\n## First (2027-01-01)\n\ntext\n"


def test_publish_records_in_the_history_and_leaves_the_front_page(histories: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    front = FRONT.read_text()
    text = benchmarks_md.publish(["### Upload memory (2027-01-01)", "", "| 1 | 2 |"], record=True, metric="uploads")
    assert text == "### Upload memory (2027-01-01)\n\n| 1 | 2 |\n"
    assert "### Upload memory (2027-01-01)\n\n| 1 | 2 |\n" in (histories / "uploads.md").read_text()
    assert FRONT.read_text() == front
    assert "edited by hand" in capsys.readouterr().out
    benchmarks_md.publish(["### Not kept"], record=False, metric="uploads")
    assert "Not kept" not in (histories / "uploads.md").read_text()


def test_an_unknown_metric_is_refused_before_anything_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="unknown metric 'gradebok'"):
        benchmarks_md.publish(["a measured table"], record=True, metric="gradebok")
    assert capsys.readouterr().out == ""


def test_a_gpu_section_is_left_in_out_and_filed_from_the_command_line(
        histories: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))
    benchmarks_md.publish_gpu_section(["## A burst (2027-01-01)", "", "| split | 2x |"], "split_burst", "burst")
    assert "bench/benchmarks_md.py burst" in capsys.readouterr().out
    assert not (histories / "burst.md").read_text().count("## A burst (2027-01-01)")
    benchmarks_md.main(["burst", str(out / "split_burst.md")])
    history = (histories / "burst.md").read_text()
    assert history.index("## A burst (2027-01-01)") < history.index("## The burst with Problem 3")


def test_every_metric_has_a_history_linked_from_the_front_page_and_the_index() -> None:
    files = {p.stem for p in HISTORY.glob("*.md")} - {"README"}
    assert files == set(benchmarks_md.METRICS)
    front, index = FRONT.read_text(), (HISTORY / "README.md").read_text()
    for metric in benchmarks_md.METRICS:
        assert f"(docs/benchmarks/{metric}.md)" in front, metric
        assert f"]({metric}.md)" in index, metric


def test_the_front_page_is_one_entry_of_current_figures_per_metric() -> None:
    sections = FRONT.read_text().split("\n## ")[1:]
    assert len(sections) == len(benchmarks_md.METRICS)
    for section in sections:
        title = section.split("\n", 1)[0]
        assert ROW_HEADER in section, title
        rows = [line for line in section.split("\n") if line.startswith("| ") and line != ROW_HEADER]
        assert 2 <= len(rows) <= 8, title  # the separator and one to seven rows: current figures only
        for row in rows[1:]:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
            assert len(cells) == 6 and all(cells), (title, row)  # what, value, date, machine, commit, command
            assert re.fullmatch(r"20\d\d-\d\d-\d\d", cells[2]), (title, row)
        assert re.search(r"History:\s+\[docs/benchmarks/", section), title
        assert section.count("\n") < 30, title  # fits a screen


def test_every_bench_names_a_known_metric() -> None:
    calls = re.compile(r"\b(?:publish|publish_gpu_section|record_section)\((.*)\)")
    named = 0
    for script in sorted((ROOT / "bench").glob("*.py")):
        if script.name == "benchmarks_md.py":
            continue
        for line in script.read_text().split("\n"):
            if (call := calls.search(line)) is None:
                continue
            metric = re.findall(r"""["']([a-z-]+)["']""", call.group(1))[-1:]
            assert metric and metric[0] in benchmarks_md.METRICS, (script.name, line)
            named += 1
    assert named >= 10  # every recording bench: services', GPU sections and the rush
