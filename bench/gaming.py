"""Gaming: do the speed-gaming mutants gain anything on real submissions?

    bash tests/gpu/suite.sh --bench bench/gaming.py [--only c0derzer0,buffett0323] [--mutants ID,...]

For every zip (default .corpus/zips, --only to choose) the production pipeline grades the
submission as it is, then once per `kind: gaming` mutant of rubrics/hw4/mutants.yaml with that
mutant's edits applied to the submission's own files (they insert code at the start or end of
a file, so they apply to any llmsys_hw4 submission), each on the problems the mutant names.
Printed and written to $OUT (default .gpu-out/): gaming.md (a table for docs/benchmarks/gaming.md) and
gaming.json. A mutant gains nothing on a problem when its points are at most the honest
grade's + 0.5 and its scored speedup at most 1.15x the honest one (the noise between two
grades), or when a higher figure has its speed points withheld for staff review; the course's own figure (the composition on the submission's own basic ops) is shown
beside it: that is what the cheat would have earned where that figure scores.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import fidelity  # noqa: E402
from bench_common import command_line, gpu_description, log, safe_commit  # noqa: E402
from production_config import production_configs  # noqa: E402

from worker.mutants import Mutant, load_mutants, mutate_text  # noqa: E402
from worker.rubric import Rubric, load_rubric  # noqa: E402
from worker.scoring import WITHHELD_WORDS  # noqa: E402
from worker.starter_kit import zip_tree  # noqa: E402
from worker.unpack import find_assignment_root, unpack_zip  # noqa: E402

MAX_POINT_GAIN = 0.5
MAX_SPEEDUP_GAIN = 1.15


def mutated_zip(archive: Path, mutant: Mutant | None, rubric: Rubric, limits: Any, work: Path) -> Path:
    """`archive` as a student would zip it, with the mutant's edits applied to its own files."""
    if mutant is None:
        return archive
    tree = work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    unpack_zip(archive, tree, limits)
    root = find_assignment_root(tree, rubric.required_files)
    for rel, text in mutate_text(root, mutant).items():
        (root / rel).write_text(text)
    return zip_tree(root, work / f"{archive.stem}-{mutant.id}.zip")


def grade(archive: Path, rubric: Rubric, config: Any, stage_config: Any, problems: tuple[str, ...],
          work: Path) -> dict[str, Any]:
    from rubrics.hw4.grade import run_gpu_stage
    from worker.pipeline import grade_submission

    chosen = replace(stage_config, problems=problems)

    def gpu_stage(r: Rubric, staged: Path, reference: Path, work_dir: Path, gradable: tuple[str, ...]) -> list[Any]:
        return run_gpu_stage(r, staged, reference, work_dir,
                             replace(chosen, problems=tuple(p for p in problems if p in gradable)))

    started = time.monotonic()
    try:
        outcome = grade_submission(archive, rubric, work, config, lambda _s: None, gpu_stage, None)
        return fidelity.outcome_record(outcome, time.monotonic() - started, problems)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _speedup(record: dict[str, Any], pid: str) -> float | None:
    value = (record.get("problems", {}).get(pid) or {}).get("scored_speedup")
    return None if value is None else float(value)


def _course_figure(record: dict[str, Any], pid: str) -> str:
    return (record.get("problems", {}).get(pid) or {}).get("speedup_student") or "-"


def verdict_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """One row per zip, mutant and problem: honest and cheat figures, points, the verdict."""
    rows = []
    for name, entry in sorted(results.items()):
        honest = entry["honest"]
        for mid, cheat in sorted(entry["mutants"].items()):
            for pid, got in cheat.get("problems", {}).items():
                base = honest.get("problems", {}).get(pid) or {}
                h, c = _speedup(honest, pid), _speedup(cheat, pid)
                more_points = got.get("points", 0) > base.get("points", 0) + MAX_POINT_GAIN
                higher = h is not None and c is not None and c > h * MAX_SPEEDUP_GAIN
                withheld = any(WITHHELD_WORDS in f for f in got.get("flags", []))
                rows.append({
                    "submission": name, "mutant": mid, "problem": pid,
                    "honest": f"{h:.3g}x, {base.get('points', 0):g} pts" if h is not None else "-",
                    "cheat": f"{c:.3g}x ({got.get('scored_figure') or '-'}), {got.get('points', 0):g} pts"
                             if c is not None else f"- ({got.get('status')}), {got.get('points', 0):g} pts",
                    "course_figure": f"{_course_figure(honest, pid)} -> {_course_figure(cheat, pid)}",
                    "flags": "; ".join(got.get("flags", [])) or "-",
                    "verdict": ("GAINS" if more_points or (higher and not withheld)
                                else "gains nothing: its speed points are withheld for review" if higher
                                else "gains nothing"),
                })
    return rows


COLUMNS = (("submission", "submission"), ("mutant", "mutant"), ("problem", "problem"),
           ("honest", "honest: scored speedup, points"), ("cheat", "mutant: scored speedup (figure), points"),
           ("course_figure", "own basic ops figure, honest -> mutant"), ("flags", "flags"), ("verdict", "verdict"))


def render(results: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
    rows = verdict_rows(results)
    cells = [[r[k].replace("|", "\\|") for k, _ in COLUMNS] for r in rows]
    md = [f"Machine: {meta.get('gpu')}; date {meta.get('date')}; commit {meta.get('commit')}; "
          f"command `{meta.get('command')}`.", "",
          "| " + " | ".join(t for _, t in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    md += ["| " + " | ".join(c) + " |" for c in cells]
    text = "\n".join(md) + "\n"
    print(text)
    (out / "gaming.md").write_text(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--zips", type=Path, default=ROOT / ".corpus" / "zips")
    parser.add_argument("--only", default="c0derzer0,buffett0323", help="comma-separated zip names")
    parser.add_argument("--mutants", default="", help="comma-separated gaming mutant ids (default: all)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".gpu-out")))
    parser.add_argument("--render", type=Path, metavar="JSON", help="re-render a gaming.json of an earlier run")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    if args.render:
        saved = json.loads(args.render.read_text())
        render(saved["results"], saved["meta"], out)
        return 0
    rubric = load_rubric("hw4")
    wanted = {m.strip() for m in args.mutants.split(",") if m.strip()}
    mutants = [m for m in load_mutants("hw4") if m.kind == "gaming" and (not wanted or m.id in wanted)]
    problems = tuple(sorted({p for m in mutants for p in m.must_fail}))
    work = Path(tempfile.mkdtemp(prefix="kg-gaming-"))
    work.chmod(0o711)  # the sandbox user must reach the grader's job folders
    config, stage_config, _ = production_configs(rubric, work / "data", problems)
    meta = {"date": date.today().isoformat(), "gpu": gpu_description(), "commit": safe_commit(),
            "command": command_line(sys.argv if argv is None else ["bench/gaming.py", *argv])}
    results: dict[str, Any] = {}
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        archive = args.zips / f"{name}.zip"
        entry: dict[str, Any] = {"honest": {}, "mutants": {}}
        results[name] = entry
        entry["honest"] = grade(archive, rubric, config, stage_config, problems, work / f"{name}-honest")
        log(f"gaming {name} honest: " + ", ".join(
            f"{pid} {_speedup(entry['honest'], pid)}" for pid in problems))
        for mutant in mutants:
            try:
                cheat_zip = mutated_zip(archive, mutant, rubric, config.limits, work / f"{name}-{mutant.id}-src")
                entry["mutants"][mutant.id] = grade(cheat_zip, rubric, config, stage_config, mutant.must_fail,
                                                    work / f"{name}-{mutant.id}")
            except Exception as exc:  # a mutant that does not apply or an infrastructure fault: recorded
                entry["mutants"][mutant.id] = {"problems": {}, "error": f"{type(exc).__name__}: {exc}"}
            log(f"gaming {name} {mutant.id}: " + ", ".join(
                f"{pid} {_speedup(entry['mutants'][mutant.id], pid)}" for pid in mutant.must_fail))
            (out / "gaming.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    render(results, meta, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
