"""bench/split_burst.py --whole-once: the whole schedule graded once per distinct zip and replayed
for the uploads again, as one slot would have run them back to back in arrival order."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from split_burst import first_of_each_zip, replayed_once, uploads  # noqa: E402


def _graded(spans: list[tuple[str, float, float] | tuple[str, None, None]]) -> dict[str, Any]:
    runs = []
    for i, (name, start, end) in enumerate(spans):
        pieces = {} if start is None else {"whole": {"start_s": start, "end_s": end, "gpu_turns": None}}
        runs.append({"index": i, "student": i, "zip": name, "verdict_s": end, "final_s": end, "timed": end is not None,
                     "state": "scored" if end is not None else "waiting", "points": {"1.1": float(i)}, "pieces": pieces})
    return {"name": "whole", "slots": 1, "wall_s": 60.0, "ended": sum(e is not None for _, _, e in spans),
            "uploads": len(spans), "grades_per_gpu_hour": None, "runs": runs}


def test_an_upload_again_ends_after_every_grade_before_it_plus_its_zips_own() -> None:
    burst = [(0, Path("a.zip")), (1, Path("b.zip")), (2, Path("kit.zip")), (1, Path("b.zip")), (0, Path("a.zip"))]
    result = replayed_once(_graded([("a", 0.0, 10.0), ("b", 10.0, 16.0), ("kit", 16.0, 40.0)]), burst)
    assert [(r["index"], r["zip"], r["final_s"], r["replayed"]) for r in result["runs"]] == [
        (0, "a", 10.0, False), (1, "b", 16.0, False), (2, "kit", 40.0, False), (3, "b", 46.0, True), (4, "a", 56.0, True)]
    assert result["runs"][3]["points"] == {"1.1": 1.0} and result["runs"][3]["student"] == 1
    assert (result["uploads"], result["ended"], result["replayed_from"]) == (5, 5, 3)
    assert result["grades_per_gpu_hour"] == round(5 / (56.0 / 3600), 1)


def test_the_limit_stops_the_slot_at_the_first_grade_it_cut_off() -> None:
    burst = [(0, Path("a.zip")), (1, Path("b.zip")), (0, Path("a.zip"))]
    result = replayed_once(_graded([("a", 0.0, 12.0), ("b", None, None)]), burst)
    assert [r["final_s"] for r in result["runs"]] == [12.0, None, None]  # a's second came after b
    assert result["ended"] == 1


def test_copies_upload_each_zip_as_several_students_and_the_baseline_grades_each_zip_once(tmp_path: Path) -> None:
    zips = tmp_path / "zips"
    zips.mkdir()
    for name in ("a", "b"):
        (zips / f"{name}.zip").write_bytes(b"PK")
    burst = uploads(zips, tmp_path, resubmit=2, copies=2)
    names = [(student, path.stem) for student, path in burst]
    assert names == [(0, "a"), (1, "b"), (2, "kit"), (3, "a"), (4, "b"), (5, "kit"), (0, "a"), (1, "b")]
    assert [(s, p.stem) for s, p in first_of_each_zip(burst)] == [(0, "a"), (1, "b"), (2, "kit")]
