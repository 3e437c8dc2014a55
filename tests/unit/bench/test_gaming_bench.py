"""bench/gaming.py's verdicts: a gain in points, or a higher figure that still scores, is a
gain; a higher figure whose speed points the scorer withheld for review is not."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import gaming  # noqa: E402

from worker.scoring import WITHHELD_WORDS  # noqa: E402


def _results(cheat_speedup: float, cheat_points: float, flags: list[str]) -> dict:
    honest = {"problems": {"2.1": {"scored_speedup": 14.8, "points": 19.6, "flags": []}}}
    cheat = {"problems": {"2.1": {"scored_speedup": cheat_speedup, "points": cheat_points, "flags": flags}}}
    return {"alice": {"honest": honest, "mutants": {"m": cheat}}}


def test_verdicts() -> None:
    def verdict(*args: object) -> str:
        return gaming.verdict_rows(_results(*args))[0]["verdict"]  # type: ignore[arg-type]

    withheld = f"2.1: your composition spent 73% of its time off the CPU (the fused op 4%), as code that sleeps does: {WITHHELD_WORDS}"
    assert verdict(15.0, 19.7, []) == "gains nothing"  # within the noise
    assert verdict(22.9, 20.0, []) == "GAINS"  # a higher figure that scores
    assert verdict(14.0, 20.5, []) == "GAINS"  # more points
    assert verdict(22.9, 14.0, [withheld]) == "gains nothing: its speed points are withheld for review"
    assert verdict(4.3, 14.0, [withheld]) == "gains nothing"
