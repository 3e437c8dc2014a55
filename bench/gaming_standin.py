"""Gaming on the CPU stand-in: how much of its would-be speed gain each Python gaming mutant
keeps once the guards have counted it.

    .venv/bin/python bench/gaming_standin.py [--repeats 3]

The CPU test (tests/unit/worker/test_grading_catches_mutants_cpu.py) asserts that each guard fires on
the evidence it reads; the figures are here, since on the stand-in, whose fused op and read
take tens of microseconds, they move with the machine's load. Per repeat: the unmutated
stand-in and each `kind: gaming` mutant that lives in minitorch/*.py are graded like the CPU
test grades them (short case list, small timing shapes; needs g++ and, for the sandbox user,
root). Printed as a markdown table: the honest scored speedup, the mutant's, the figure it
would have had without the guards (its raw composition time over its raw fused-op time), the
share of that gain it kept, its speed points and its flags.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fixtures")]

import cpu_standin  # noqa: E402
from benchmarks_md import add_smoke_flag, smoke  # noqa: E402
from gpu_stage_support import make_trusted, run_stage, sandbox_user, shorten_cases, stage_config  # noqa: E402

from worker.mutants import load_mutants, mutate_text  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.scoring import score_run  # noqa: E402


def gaming_python_mutants() -> list:
    return [m for m in load_mutants("hw4") if m.kind == "gaming"
            and all(e.file.startswith("minitorch/") and e.file.endswith(".py") for e in m.edits)]


def one_repeat(base: Path, trusted: Path, policy: SandboxPolicy, repeat: int) -> list[dict]:
    rubric = load_rubric("hw4")
    mutants = gaming_python_mutants()
    problems = tuple(sorted({pid for m in mutants for pid in m.must_fail}))
    honest = score_run(rubric, list(run_stage(base, f"honest-{repeat}", trusted,
                                              stage_config(policy, problems=problems)).values()))
    rows = []
    for mutant in mutants:
        by_id = run_stage(base, f"{mutant.id}-{repeat}", trusted, stage_config(policy, problems=mutant.must_fail),
                          files=mutate_text(trusted, mutant))
        score = score_run(rubric, list(by_id.values()))
        for pid in mutant.must_fail:
            s, before = score.problem(pid), honest.problem(pid)
            untreated = statistics.mean(sh["raw"]["reference_ops"]["compute_ms"] / sh["raw"]["custom"]["compute_ms"]
                                        for sh in by_id[pid].telemetry["timing_shapes"])
            honest_x = before.speedup.speedup if before.speedup else float("nan")
            scored_x = s.speedup.speedup if s.speedup else float("nan")
            kept = (scored_x - honest_x) / (untreated - honest_x) if untreated > honest_x else float("nan")
            rows.append({"repeat": repeat, "mutant": mutant.id, "problem": pid, "honest": honest_x,
                         "scored": scored_x, "untreated": untreated, "kept": kept,
                         "speed_points": f"{s.speed_points:g} of {before.speed_points:g}",
                         "flags": "; ".join(f.split(": ", 1)[-1][:70] for f in s.flags) or "none"})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| repeat | mutant | problem | honest | scored | without the guards | gain kept | speed points | flags |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['repeat']} | {r['mutant']} | {r['problem']} | {r['honest']:.2f}x | {r['scored']:.2f}x | "
              f"{r['untreated']:.2f}x | {r['kept']:.0%} | {r['speed_points']} | {r['flags']} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.repeats = 1
    if not cpu_standin.have_compiler():
        sys.exit("g++ is needed to build the CPU stand-in kernels")
    base = cpu_standin.sandbox_visible_dir("kg-gaming-standin-")
    user, why = sandbox_user(base)
    if user is None:
        print(f"children run as this user ({why})", file=sys.stderr)
    rows: list[dict] = []
    try:
        with pytest.MonkeyPatch.context() as mp:
            shorten_cases(mp)
            trusted = make_trusted(base)
            for repeat in range(1, args.repeats + 1):
                rows += one_repeat(base, trusted, SandboxPolicy(user=user), repeat)
                print(f"repeat {repeat} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(table(rows))


if __name__ == "__main__":
    main()
