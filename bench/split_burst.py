"""A burst of uploads on one GPU, graded as a whole-grade worker does (one slot, whole runs in
arrival order) and as the split does (N slots sharing the GPU for builds and checks, each run's
timing queued behind every waiting check and holding the GPU alone): grades per GPU-hour, the
wait for correctness verdicts and for the final score, and the points of every upload under both.

    bash tests/gpu/suite.sh --bench bench/split_burst.py --slots 3 [--schedules split,whole]
        [--problems 1.1,1.2,2.1,2.2] [--resubmit 2] [--limit-s 560] [--whole-once]

(on a GPU machine, `.whl/` and `.corpus/` carried). The uploads: every zip of .corpus/zips and
our kit (starter/hw4) zipped, `--copies` students each (1), all arriving at once; then `--resubmit` of those
students upload the same zip again (also at once): under the service's rule (grader.runs.
timing_piece) a first upload whose student uploaded again before its timing began is not timed.
Each job runs as a Celery task would, in a process of its own (`--job`), through
worker.pipeline.grade_submission / time_submission with production's configuration
(bench/production_config.py) and, for the split, the GPU's lock (worker.gpu.gpu_lock). A
schedule stops taking jobs at `--limit-s` (the device's call limit): what ended is reported.
`--whole-once`: the whole schedule grades each distinct zip once and replays the uploads again
with their zip's seconds (one slot runs whole grades back to back), for half the device time.
Writes $OUT/split_burst.json and the section $OUT/split_burst.md for docs/benchmarks/burst.md
(`python3 bench/benchmarks_md.py burst FILE`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_common import log  # noqa: E402
from benchmarks_md import current_commit, publish_gpu_section  # noqa: E402
from split_model import comparison  # noqa: E402
from timing_stability import gpu_name  # noqa: E402

OUT = Path(os.environ.get("OUT", ROOT / ".gpu-out"))


# ----------------------------------------------------------------------------- one job (a task)

def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    """One task of a schedule, in this process: `whole`, `checks` or `timing` of one upload."""
    from production_config import production_configs

    from rubrics.hw4.grade import run_gpu_stage
    from worker.assignment import StageProgress
    from worker.gpu.gpu_lock import GpuLock
    from worker.measurements import ProblemMeasurement
    from worker.pipeline import grade_submission, time_submission
    from worker.rubric import load_rubric
    from worker.states import Piece

    rubric, piece = load_rubric("hw4"), Piece(spec["piece"])
    work = Path(spec["work"])
    config, stage_config, _ = production_configs(rubric, work / "data", tuple(spec["problems"]))
    config = replace(config, build_cache_dir=Path(spec["cache"]),
                     gpu_lock=GpuLock(Path(spec["locks"]), 0) if spec["split"] else None)
    stage_config = replace(stage_config, piece=piece, gpu_lock=config.gpu_lock if piece is Piece.timing else None)

    def gpu_stage(r: Any, staged: Path, reference: Path, work_dir: Path, problems: tuple[str, ...]) -> list[Any]:
        chosen = replace(stage_config, problems=tuple(p for p in stage_config.problems if p in problems))
        return run_gpu_stage(r, staged, reference, work_dir, chosen, StageProgress())

    archive, job_dir = Path(spec["zip"]), work / "job"
    if piece is Piece.timing:
        checked = [ProblemMeasurement.from_dict(m) for m in spec["checked"]]
        outcome = time_submission(archive, rubric, job_dir, config, gpu_stage, checked, not_timed=spec.get("not_timed"))
    else:
        outcome = grade_submission(archive, rubric, job_dir, config, gpu_stage=gpu_stage, piece=piece)
    measured = [p.details["measurement"] for p in outcome.problems if p.details and p.details.get("measurement")]
    turns = next((m["telemetry"]["gpu_turns"] for m in measured if "gpu_turns" in m.get("telemetry", {})), None)
    # how long each part took to load (the minitorch import among them): what a load timeout must allow
    loads = next((m["telemetry"]["load"] for m in measured if "load" in m.get("telemetry", {})), None)
    return {"state": outcome.state.value, "score": outcome.score, "message": outcome.message[:300],
            "points": {p.problem_id: p.points for p in outcome.problems}, "gpu_turns": turns, "loads": loads,
            "measurements": [p.details["measurement"] for p in outcome.problems
                             if p.details and p.details.get("measurement")]}


# ----------------------------------------------------------------------------- the schedules

@dataclass
class Upload:
    index: int
    student: int
    zip: Path
    verdict_s: float | None = None  # when its correctness verdicts were known
    final_s: float | None = None  # when its final score was
    timed: bool | None = None
    points: dict[str, float] = field(default_factory=dict)
    state: str = "waiting"
    pieces: dict[str, dict[str, Any]] = field(default_factory=dict)  # piece -> its start, end and lock turns


@dataclass
class Schedule:
    """A queue of jobs with the service's order: re-sent first (none here), checks (or whole runs)
    in arrival order, then timings in the order their checks ended."""

    name: str
    split: bool
    uploads: list[Upload]
    checks: list[Upload] = field(default_factory=list)
    timings: list[tuple[Upload, list[dict[str, Any]]]] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)
    running: int = 0
    started: float = 0.0

    def take(self, deadline: float) -> tuple[str, Upload, list[dict[str, Any]] | None] | None:
        with self.lock:
            while True:
                if time.monotonic() > deadline:
                    return None
                if self.checks:
                    self.running += 1
                    return ("checks" if self.split else "whole"), self.checks.pop(0), None
                if self.timings:
                    self.running += 1
                    upload, checked = self.timings.pop(0)
                    return "timing", upload, checked
                if self.running == 0:
                    return None
                self.lock.wait(1.0)

    def passed_over(self, upload: Upload) -> bool:
        """The service's rule: a later upload of the same student arrived before this timing began."""
        return any(u.student == upload.student and u.index > upload.index for u in self.uploads)


def _spawn(spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--job", json.dumps(spec)], capture_output=True, text=True)
    if out.returncode != 0:
        return {"state": "error", "error": out.stderr[-2000:], "points": {}, "measurements": []}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _slot(schedule: Schedule, base: dict[str, Any], deadline: float, slot: int) -> None:
    while (job := schedule.take(deadline)) is not None:
        piece, upload, checked = job
        now = time.monotonic() - schedule.started
        log(f"{schedule.name} slot {slot}: {piece} of upload {upload.index} ({upload.zip.stem}) at {now:.0f} s")
        spec = {**base, "piece": piece, "zip": str(upload.zip), "work": f"{base['work']}/{schedule.name}-{upload.index}-{piece}"}
        if piece == "timing":
            spec["checked"] = checked
            if schedule.passed_over(upload):
                spec["not_timed"] = "not timed: a newer upload of the same student counts"
        result = _spawn(spec)
        shutil.rmtree(spec["work"], ignore_errors=True)
        with schedule.lock:
            at = time.monotonic() - schedule.started
            upload.pieces[piece] = {"start_s": round(now, 1), "end_s": round(at, 1), "gpu_turns": result.get("gpu_turns"),
                                    "loads": result.get("loads")}
            _record(schedule, upload, piece, result, at, "not_timed" in spec)
            schedule.running -= 1
            schedule.lock.notify_all()


def _record(schedule: Schedule, upload: Upload, piece: str, result: dict[str, Any], at: float, passed: bool) -> None:
    upload.state, upload.points = result["state"], result["points"]
    if piece != "timing":
        upload.verdict_s = at
    if result["state"] == "checked":
        schedule.timings.append((upload, result["measurements"]))
        return
    upload.final_s = at
    upload.timed = piece == "whole" or (piece == "timing" and not passed)
    log(f"{schedule.name}: upload {upload.index} ({upload.zip.stem}) {result['state']} {result.get('score')} "
        f"at {at:.0f} s {result.get('error', '')[-300:]}")


def run_schedule(name: str, split: bool, slots: int, zips: list[tuple[int, Path]], base: dict[str, Any],
                 limit_s: float) -> dict[str, Any]:
    uploads = [Upload(i, student, z) for i, (student, z) in enumerate(zips)]
    schedule = Schedule(name, split, uploads, checks=list(uploads))
    schedule.started = time.monotonic()
    threads = [threading.Thread(target=_slot, args=(schedule, base, schedule.started + limit_s, s))
               for s in range(slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - schedule.started
    ended = [u for u in uploads if u.final_s is not None]
    return {"name": name, "slots": slots, "wall_s": round(wall, 1), "ended": len(ended), "uploads": len(uploads),
            "grades_per_gpu_hour": round(len(ended) / (max(u.final_s for u in ended) / 3600), 1) if ended else None,
            "runs": [{"index": u.index, "student": u.student, "zip": u.zip.stem, "verdict_s": u.verdict_s,
                      "final_s": u.final_s, "timed": u.timed, "state": u.state, "points": u.points,
                      "pieces": u.pieces} for u in uploads]}


def first_of_each_zip(burst: list[tuple[int, Path]]) -> list[tuple[int, Path]]:
    """Each zip's first upload, in arrival order: what --whole-once grades."""
    first: dict[Path, tuple[int, Path]] = {}
    for student, path in burst:
        first.setdefault(path, (student, path))
    return list(first.values())


def replayed_once(graded: dict[str, Any], burst: list[tuple[int, Path]]) -> dict[str, Any]:
    """The whole schedule of `burst` from `graded`, a whole schedule of its distinct zips: one
    slot runs whole grades back to back in arrival order, so an upload ends once its grade and
    every grade before it have; a zip uploaded again takes its first grade's seconds (its
    build cache and the GPU's state then differ a little: said beside the figure)."""
    seconds = {r["zip"]: r["pieces"]["whole"]["end_s"] - r["pieces"]["whole"]["start_s"]
               for r in graded["runs"] if r["final_s"] is not None}
    by_zip = {r["zip"]: r for r in graded["runs"]}
    runs, at = [], 0.0
    for index, (student, path) in enumerate(burst):
        if path.stem not in seconds or runs and runs[-1]["final_s"] is None:  # the limit stopped the slot here
            runs.append({**by_zip[path.stem], "index": index, "student": student, "verdict_s": None, "final_s": None})
            continue
        at += seconds[path.stem]
        runs.append({**by_zip[path.stem], "index": index, "student": student, "verdict_s": round(at, 1),
                     "final_s": round(at, 1), "replayed": index >= len(graded["runs"])})
    ended = [r for r in runs if r["final_s"] is not None]
    return {**graded, "uploads": len(runs), "ended": len(ended), "runs": runs, "replayed_from": len(graded["runs"]),
            "grades_per_gpu_hour": round(len(ended) / (ended[-1]["final_s"] / 3600), 1) if ended else None}


# ----------------------------------------------------------------------------- report

def _waits(result: dict[str, Any], key: str) -> str:
    values = sorted(r[key] for r in result["runs"] if r[key] is not None)
    if not values:
        return "none"
    return f"p50 {statistics.median(values):.0f} s, max {values[-1]:.0f} s ({len(values)} of {result['uploads']})"


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[str]:
    lines = [f"### A burst on one GPU: whole grades on one slot vs the split on {args.slots} slots", "",
             f"Hardware: {gpu_name()}, {os.cpu_count()} CPU cores; commit {current_commit() or 'unknown'}; "
             f"problems {args.problems}; {len(next(iter(results.values()))['runs'])} uploads at once "
             f"(every corpus zip and the kit, {args.copies} student(s) each, then {args.resubmit} students uploading the same zip again).",
             f"Command: `bash tests/gpu/suite.sh --bench bench/split_burst.py --slots {args.slots} "
             f"--schedules {args.schedules} --problems {args.problems} --resubmit {args.resubmit} "
             f"--limit-s {args.limit_s:g} --copies {args.copies}{' --whole-once' if args.whole_once else ''}`", "",
             "| schedule | ended / uploads | last final (s) | grades per GPU-hour | verdict wait | final wait |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results.values():
        last = max((x["final_s"] for x in r["runs"] if x["final_s"] is not None), default=None)
        lines.append(f"| {r['name']} ({r['slots']} slot(s)) | {r['ended']} / {r['uploads']} | "
                     f"{'-' if last is None else f'{last:.0f}'} | {r['grades_per_gpu_hour']} | "
                     f"{_waits(r, 'verdict_s')} | {_waits(r, 'final_s')} |")
    if "replayed_from" in results.get("whole", {}):
        lines += ["", f"The whole schedule graded each of its {results['whole']['replayed_from']} distinct zips once; "
                  "an upload again is replayed with its zip's seconds (its build then cached: a little shorter)."]
    imports = _import_seconds(next(iter(results.values())))
    if imports:
        lines += ["", "The minitorch import's seconds (load probe, first piece): " + imports]
    if "split" in results:
        lines += ["", "The capacity model (bench/split_model.py) fed each upload's measured piece seconds:", "",
                  *comparison(results["split"])]
    if len(results) == 2:
        lines += ["", "Points per upload (timed runs of both schedules):", "",
                  "| upload | whole | split |", "| --- | --- | --- |"]
        whole, split = results.get("whole"), results.get("split")
        for a, b in zip(whole["runs"], split["runs"]) if whole and split else ():
            if a["timed"] and b["timed"]:
                lines.append(f"| {a['index']} {a['zip']} | {_pts(a['points'])} | {_pts(b['points'])} |")
    return lines


def _import_seconds(result: dict[str, Any]) -> str:
    """Each upload's minitorch import, in seconds, from its first piece's load record."""
    said = []
    for run in result["runs"]:
        first = run["pieces"].get("checks") or run["pieces"].get("whole") or {}
        minitorch = (first.get("loads") or {}).get("minitorch") or {}
        if minitorch.get("seconds") is not None:
            said.append(f"{run['zip']} {minitorch['seconds']:.1f}" + ("" if minitorch.get("loaded") else " (failed)"))
    return ", ".join(said)


def _pts(points: dict[str, float]) -> str:
    return ", ".join(f"{pid} {p:.2f}" for pid, p in points.items())


def uploads(zips_dir: Path, work: Path, resubmit: int, copies: int = 1) -> list[tuple[int, Path]]:
    """(student, zip) in arrival order: every zip and the kit, each uploaded by `copies` students
    at once, then the first `resubmit` of those students uploading the same zip again."""
    from worker.rubric import load_rubric

    kit = work / "kit.zip"
    starter = load_rubric("hw4").starter_dir
    with zipfile.ZipFile(kit, "w") as zf:
        for path in sorted(starter.rglob("*")):
            if path.is_file() and path.suffix != ".so" and "__pycache__" not in path.parts:
                zf.write(path, Path("llmsys_hw4", path.relative_to(starter)).as_posix())
    first = [*sorted(zips_dir.resolve().glob("*.zip")), kit]
    wave = [(c * len(first) + i, path) for c in range(copies) for i, path in enumerate(first)]
    return [*wave, *wave[:resubmit]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--schedules", default="split,whole")
    parser.add_argument("--problems", default="1.1,1.2,2.1,2.2,3")
    parser.add_argument("--resubmit", type=int, default=2)
    parser.add_argument("--limit-s", type=float, default=560.0, help="each schedule's wall limit")
    parser.add_argument("--zips", type=Path, default=ROOT / ".corpus" / "zips")
    parser.add_argument("--copies", type=int, default=1,
                        help="students uploading each zip at once (each graded in full: the bench reuses no "
                             "measurements, where the service would reuse an identical zip's)")
    parser.add_argument("--whole-once", action="store_true",
                        help="grade each distinct zip whole once and replay the one-slot schedule from those "
                             "seconds (half the device time with as many uploads again)")
    args = parser.parse_args()
    if args.job:
        print(json.dumps(run_job(json.loads(args.job))))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kg-burst-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)
        burst = uploads(args.zips, work, args.resubmit, args.copies)
        for name in args.schedules.split(","):
            split = name == "split"
            base = {"problems": args.problems.split(","), "split": split, "work": str(work / name),
                    "cache": str(work / f"{name}-cache"), "locks": str(work / "locks")}  # no schedule builds for another
            if name == "whole" and args.whole_once:
                results[name] = replayed_once(run_schedule(name, False, 1, first_of_each_zip(burst), base, args.limit_s),
                                              burst)
            else:
                results[name] = run_schedule(name, split, args.slots if split else 1, burst, base, args.limit_s)
            (OUT / "split_burst.json").write_text(json.dumps(results, indent=1))
            log(f"{name}: {results[name]['ended']} of {results[name]['uploads']} ended in {results[name]['wall_s']} s")
    publish_gpu_section(report(results, args), "split_burst", "burst")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
