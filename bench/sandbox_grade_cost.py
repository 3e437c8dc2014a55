"""What the sandbox costs a whole grade, side by side: this tree's GPU stage against an earlier
tree's (e.g. before the default-deny view), on the same built reference kit.

    bash tests/gpu/suite.sh --bench bench/sandbox_grade_cost.py --old-tree .oldtree [--grades 3]

(on a GPU machine, as root; `.oldtree` is `git archive REV worker rubrics starter | tar -x -C
.oldtree`, carried). Each grade is hw4's four kernel problems with production's timing settings,
run in a process of its own whose `worker` package is one tree's (two trees' modules cannot share
one process); the trees alternate grade by grade so both see the same machine drift. Prints per
tree the wall seconds per grade (median, min-max), the ratio of medians and the reference-baseline
speedups (a check that both graded alike); writes the section to $OUT/sandbox_grade_cost.md
(for docs/benchmarks/sandbox.md).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks_md import current_commit, publish_gpu_section  # noqa: E402
from hw4_speedups import build_kit  # noqa: E402
from timing_stability import gpu_name  # noqa: E402

# One kernel-only grade through the `worker` package found first on sys.path; only names that
# both trees have.
ONE_GRADE = """
import json, os, sys, time
from pathlib import Path
from worker.affinity import choose_timing_cpus
from rubrics.hw4.grade import KERNEL_PROBLEMS, GpuStageConfig, run_gpu_stage
from worker.rubric import load_rubric
from worker.sandbox import SandboxLimits, SandboxPolicy
gib = 1 << 30
config = GpuStageConfig(
    limits=SandboxLimits(wall_s=600, cpu_s=1200, memory_bytes=48 * gib, max_processes=512, file_size_bytes=4 * gib),
    policy=SandboxPolicy(user=os.environ.get("KG_SANDBOX_USER", "nobody") or None, gpu_index=0),
    problems=KERNEL_PROBLEMS, timing_cpus=choose_timing_cpus("auto", 0))
kit = Path(sys.argv[1])
started = time.monotonic()
measurements = run_gpu_stage(load_rubric("hw4"), kit, kit, Path(sys.argv[2]), config)
seconds = time.monotonic() - started
speedups = {m.problem_id: m.figure("trusted").speedup for m in measurements if m.figure("trusted")}
print(json.dumps({"seconds": seconds, "speedups": speedups,
                  "failed": [f"{m.problem_id}: {m.status}" for m in measurements if not m.figure("trusted")]}))
"""


def one_grade(tree: Path, kit: Path, work: Path) -> dict:
    """A kernel-only grade of `kit` by `tree`'s worker package, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", ONE_GRADE, str(kit), str(work)], env=env, cwd=tree,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"grade by {tree} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["failed"]:
        raise SystemExit(f"grade by {tree}: not timed: {result['failed']}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--grades", type=int, default=3)
    args = parser.parse_args()
    old = args.old_tree.resolve()
    old_commit = (old / "COMMIT").read_text().strip() if (old / "COMMIT").exists() else str(args.old_tree)
    trees = {"this tree": ROOT, f"old tree ({old_commit})": old}
    grades: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="kg-grade-cost-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandbox user must reach the kit
        kit = build_kit(work)
        for i in range(args.grades):
            for name in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
                folder = work / f"grade-{len(grades[name])}-{list(trees).index(name)}"
                grades[name].append(one_grade(trees[name], kit, folder))
                shutil.rmtree(folder, ignore_errors=True)
                print(f"{name} grade {i + 1}: {grades[name][-1]['seconds']:.1f} s", flush=True)

    medians = {name: statistics.median(g["seconds"] for g in gs) for name, gs in grades.items()}
    this, before = medians.values()
    lines = [f"### Whole-grade GPU time, this tree vs an earlier tree, {args.grades} grades each", "",
             f"Hardware: {gpu_name()}, {os.cpu_count()} CPU cores; commit {current_commit() or 'unknown'} "
             f"against {old_commit}; the trees alternate grade by grade; a grade is hw4's four kernel "
             "problems of the reference kit with production's timing settings.",
             f"Command: `bash tests/gpu/suite.sh --bench bench/sandbox_grade_cost.py --old-tree .oldtree "
             f"--grades {args.grades}` (GPU machine, `.whl/` and `.oldtree/` carried)", "",
             "| tree | seconds per grade (median, min-max) | each grade | speedups, reference baseline (median) |",
             "| --- | --- | --- | --- |"]
    for name, gs in grades.items():
        seconds = [g["seconds"] for g in gs]
        problems = sorted(gs[0]["speedups"])
        speedups = ", ".join(f"{p}: {statistics.median(g['speedups'][p] for g in gs):.2f}" for p in problems)
        lines.append(f"| {name} | {medians[name]:.1f} ({min(seconds):.1f}-{max(seconds):.1f}) | "
                     f"{', '.join(f'{s:.1f}' for s in seconds)} | {speedups} |")
    lines += ["", f"Ratio of medians, this tree / old tree: {this / before:.3f} ({100 * (this / before - 1):+.1f}%)."]
    publish_gpu_section(lines, "sandbox_grade_cost", "sandbox")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
