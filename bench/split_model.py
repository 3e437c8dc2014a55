"""The capacity model (grader/capacity/split.py) against a measured burst (bench/split_burst.py's
split schedule): fed each upload's measured piece seconds, as the service feeds it recent runs'
(grader.reads.grade_times), does the model give the burst's verdict and final waits?

    python3 bench/split_model.py $OUT/split_burst.json
    python3 bench/split_model.py --smoke       (a two-upload burst made up here: does it still run?)

Three readings of a timing piece: its wall seconds (what the service records today), the
seconds it held the GPU alone (worker.gpu.gpu_lock.GpuTurns, where the burst recorded them), and
what it held at all, its shared seconds then its alone ones (the model's `timing_shared`). A
passed-over upload's timing is never run, so it gets the median of the timed ones (the model
passes it over itself when its student's next upload came first). Pure: no GPU, no service.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks_md import add_smoke_flag, smoke  # noqa: E402

from grader.capacity.split import Job, simulate_split  # noqa: E402

FIGURES = ("verdict p50", "verdict max", "final p50", "final max")


def _span(piece: dict[str, Any] | None) -> float | None:
    return None if piece is None else float(piece["end_s"]) - float(piece["start_s"])


def _turns(piece: dict[str, Any] | None, kind: str) -> float | None:
    turns = (piece or {}).get("gpu_turns")
    return None if not turns else float(turns[kind])


def _timing(piece: dict[str, Any] | None, reading: str) -> tuple[float, float] | None:
    """A timing piece read as (its timing seconds, of which held shared first); None: not recorded."""
    if reading == "wall":
        span = _span(piece)
        return None if span is None else (span, 0.0)
    alone, shared = _turns(piece, "alone"), _turns(piece, "shared")
    if alone is None or shared is None:
        return None
    return (alone, 0.0) if reading == "alone" else (alone + shared, shared)


def _figures(verdicts: np.ndarray, finals: np.ndarray) -> dict[str, float]:
    return {"verdict p50": float(np.median(verdicts)), "verdict max": float(verdicts.max()),
            "final p50": float(np.median(finals)), "final max": float(finals.max())}


def _ended(runs: list[dict[str, Any]]) -> list[int]:
    """Positions of the uploads whose final score came before the burst's limit: the final waits
    of both the measurement and the model are read over these."""
    return [i for i, r in enumerate(runs) if r["final_s"] is not None]


def measured(split: dict[str, Any]) -> dict[str, float]:
    runs = split["runs"]
    finals = np.array([r["final_s"] for r in runs], float)[_ended(runs)]
    return _figures(np.array([r["verdict_s"] for r in runs], float), finals)


def modelled(split: dict[str, Any], reading: str) -> dict[str, float] | None:
    """The model's figures for the burst, its timings read as `reading`: "wall" (a piece's span),
    "alone" (the seconds it held the GPU alone) or "held" (its shared seconds, then its alone
    ones: what it held at all, waits left out); None where the burst did not record that reading
    for every timed upload."""
    runs = split["runs"]
    read_off = {r["index"]: _timing(r["pieces"]["timing"], reading) for r in runs
                if r["timed"] and "timing" in r["pieces"]}
    timed = {i: t for i, t in read_off.items() if t is not None}
    if not timed or len(timed) < len(read_off):
        return None
    fill = (statistics.median(t for t, _ in timed.values()), statistics.median(s for _, s in timed.values()))
    jobs = []
    for r in runs:
        checks = _span(r["pieces"].get("checks")) or 0.0
        # timed: as read; passed over, or left untimed by the burst's limit: the median; no
        # timing to do (failed its checks): final at its verdict
        to_time = "timing" in r["pieces"] or r["state"] == "checked"
        timing, shared = timed[r["index"]] if r["index"] in timed else fill if to_time else (0.0, 0.0)
        jobs.append(Job(0.0, int(r["student"]), checks + timing, timing, shared))
    out = simulate_split(jobs, gpus=1, check_slots=int(split["slots"]), fair_share=False)
    return _figures(out.verdicts, np.asarray(out.finals, float)[_ended(runs)])


def comparison(split: dict[str, Any]) -> list[str]:
    """The model's figures beside the measured ones, with the model's error in %."""
    real, ended = measured(split), len(_ended(split["runs"]))
    lines = [f"Final waits over the {ended} of {len(split['runs'])} uploads that ended before the limit.", "",
             "| reading of a timing | " + " | ".join(FIGURES) + " |", "| --- |" + " --- |" * len(FIGURES),
             "| measured | " + " | ".join(f"{real[f]:.0f} s" for f in FIGURES) + " |"]
    for reading in ("wall", "alone", "held"):
        model = modelled(split, reading)
        if model is None:
            lines.append(f"| model, timing {reading} | not recorded |" + " |" * (len(FIGURES) - 1))
            continue
        cells = [f"{model[f]:.0f} s ({100 * (model[f] - real[f]) / real[f]:+.0f}%)" for f in FIGURES]
        lines.append(f"| model, timing {reading} | " + " | ".join(cells) + " |")
    return lines


def smoke_burst() -> dict[str, Any]:
    """split_burst.json of a made-up burst on two slots: A checked 0-10 s and B 0-12 s, then each
    timed alone on the GPU (A 12-17 s, B 17-22 s)."""
    def run(index: int, checks_end: float, timing: tuple[float, float]) -> dict[str, Any]:
        pieces = {"checks": {"start_s": 0.0, "end_s": checks_end, "gpu_turns": None},
                  "timing": {"start_s": timing[0], "end_s": timing[1],
                             "gpu_turns": {"alone": timing[1] - timing[0], "shared": 0.0}}}
        return {"index": index, "student": index, "verdict_s": checks_end, "final_s": timing[1], "timed": True,
                "state": "scored", "points": {}, "pieces": pieces}
    return {"split": {"slots": 2, "runs": [run(0, 10.0, (12.0, 17.0)), run(1, 12.0, (17.0, 22.0))]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, help="bench/split_burst.py's split_burst.json")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):  # through a file, as a burst's results come
        with tempfile.TemporaryDirectory(prefix="kg-split-model-") as tmp:
            args.results = Path(tmp) / "split_burst.json"
            args.results.write_text(json.dumps(smoke_burst()))
            return compare_file(args.results)
    if args.results is None:
        parser.error("name the burst's split_burst.json (or --smoke)")
    return compare_file(args.results)


def compare_file(path: Path) -> int:
    results = json.loads(path.read_text())
    print("\n".join(comparison(results["split"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
