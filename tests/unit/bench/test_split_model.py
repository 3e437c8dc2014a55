"""bench/split_model.py: the capacity model fed a burst's measured pieces. On a burst that went
exactly as the model's rules say (no contention between the checks), it gives back the burst's
own waits; a reading the burst did not record is said, not guessed."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from split_model import comparison, measured, modelled  # noqa: E402


def _run(index: int, student: int, checks: tuple[float, float], timing: tuple[float, float] | None,
         alone: float | None, timed: bool = True) -> dict[str, Any]:
    pieces = {"checks": {"start_s": checks[0], "end_s": checks[1], "gpu_turns": None}}
    if timing is not None:
        pieces["timing"] = {"start_s": timing[0], "end_s": timing[1],
                            "gpu_turns": None if alone is None else {"alone": alone, "shared": 1.0}}
    final = checks[1] if timing is None or not timed else timing[1]
    return {"index": index, "student": student, "verdict_s": checks[1], "final_s": final, "timed": timed,
            "state": "scored", "points": {}, "pieces": pieces}


def _burst(alone: bool = True) -> dict[str, Any]:
    """Two slots: A checks 0-10, B 0-20, C 10-40 (A's slot); D's checks fail (nothing to time),
    20-25. The GPU is free of checks at 40: A times 40-45, B 45-52, C 52-55."""
    return {"slots": 2, "runs": [
        _run(0, 0, (0, 10), (40, 45), 5.0 if alone else None),
        _run(1, 1, (0, 20), (45, 52), 7.0 if alone else None),
        _run(2, 2, (10, 40), (52, 55), 3.0 if alone else None),
        _run(3, 3, (20, 25), None, None, timed=False),
    ]}


def test_a_burst_that_followed_the_models_rules_is_given_back_exactly() -> None:
    burst = _burst()
    real = measured(burst)
    assert real == {"verdict p50": 22.5, "verdict max": 40.0, "final p50": 48.5, "final max": 55.0}
    assert modelled(burst, "alone") == real
    assert modelled(burst, "wall") == real  # each timing held the GPU alone for its whole piece here
    assert "(+0%)" in comparison(burst)[-1] and "(-" not in comparison(burst)[-1]


def test_timings_that_overlapped_their_walls_are_read_by_their_alone_seconds() -> None:
    burst = _burst()
    burst["runs"][1]["pieces"]["timing"]["start_s"] = 30.0  # its piece began early, beside C's checks
    assert modelled(burst, "alone") == measured(burst)
    wall = modelled(burst, "wall")
    assert wall is not None and wall["final max"] > measured(burst)["final max"]  # the wall overstates it


def test_a_reading_the_burst_did_not_record_is_said() -> None:
    burst = _burst(alone=False)
    assert modelled(burst, "alone") is None and modelled(burst, "held") is None
    assert comparison(burst)[-2].startswith("| model, timing alone | not recorded |")
    assert comparison(burst)[-1].startswith("| model, timing held | not recorded |")


def test_an_upload_the_limit_left_untimed_counts_in_the_model_but_not_in_the_final_waits() -> None:
    """A burst stopped at its limit before E's timing (its checks ended at 30, nothing after): the
    final waits of both sides are read over the uploads that ended (no NaN), while the model
    still gives E's timing its place in the queue (the median timing), as the service would."""
    burst = _burst()
    burst["runs"].append({**_run(4, 4, (25, 30), None, None, timed=False), "final_s": None, "timed": None,
                          "state": "checked"})
    real = measured(burst)
    assert real["final max"] == 55.0 and real["verdict max"] == 40.0
    model = modelled(burst, "alone")
    # E's verdict (30) came before C's (40): the model times E (the median, 5 s) before C, so C ends at 60
    assert model is not None and model["final max"] == 60.0
    assert comparison(burst)[0] == "Final waits over the 4 of 5 uploads that ended before the limit."
    assert "nan" not in "\n".join(comparison(burst))


def test_the_held_reading_runs_a_timings_shared_seconds_beside_the_others() -> None:
    """Read as held (shared, then alone), timings whose set-ups ran beside each other give the
    burst back; read as alone only, the model leaves their shared seconds out and ends early."""
    burst = {"slots": 2, "runs": [
        _run(0, 0, (0, 0), (0, 10), 6.0), _run(1, 1, (0, 0), (0, 16), 6.0), _run(2, 2, (0, 0), (4, 26), 6.0)]}
    for r in burst["runs"]:
        r["pieces"]["timing"]["gpu_turns"]["shared"] = 4.0
        r["pieces"]["checks"]["end_s"] = 0.0
    burst["runs"][2]["pieces"]["checks"]["start_s"] = 0.0
    assert measured(burst)["final max"] == 26.0
    assert modelled(burst, "held") == measured(burst)
    alone = modelled(burst, "alone")
    assert alone is not None and alone["final max"] == 18.0
