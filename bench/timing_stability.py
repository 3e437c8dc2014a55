"""Re-grade stability of the speedups under two settings of one factor, side by side.

    bash tests/gpu/suite.sh --bench bench/timing_stability.py [--compare memory|pinning] [--grades 3]

(on a GPU machine; the suite script installs the carried wheels first). Builds the reference
kit once, then grades its four kernel problems `--grades` times under each setting,
alternating them grade by grade so both see the same machine drift, with the production
timing settings (TimingConfig's defaults; the GPU machine lacks pydantic for grader.settings).
Factors, everything else as in production: `memory`, the children's steady malloc settings
(worker.gpu.client) on or off; `pinning`, the timing phase on fixed cores or left to the
scheduler.
Prints, per problem and setting, the speedups (own baseline and reference baseline), their
max/min (the issue's goal: <= 1.05), the median wall seconds of each phase and the trials
timed, and the wall seconds per grade; writes the section to $OUT/timing_stability.md
(for docs/benchmarks/stability.md).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks_md import current_commit, publish_gpu_section  # noqa: E402
from hw4_speedups import build_kit  # noqa: E402

from rubrics.hw4.grade import KERNEL_PROBLEMS, GpuStageConfig, run_gpu_stage  # noqa: E402
from worker.affinity import choose_timing_cpus  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxLimits, SandboxPolicy  # noqa: E402
from worker.timing import spread  # noqa: E402

# factor -> {setting: what it changes in the production configuration}; production first
FACTORS = {"memory": {"steady malloc": {}, "default malloc": {"steady_memory": False}},
           "pinning": {"pinned": {}, "unpinned": {"timing_cpus": None}}}
PHASES = ("start", "abi_cases", "binding_cases", "kernel_profile", "timing")


def gpu_name() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown GPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=sorted(FACTORS), default="memory")
    parser.add_argument("--grades", type=int, default=3)
    parser.add_argument("--commit", default="")
    args = parser.parse_args()

    gib = 1024**3
    base = GpuStageConfig(
        limits=SandboxLimits(wall_s=600, cpu_s=1200, memory_bytes=48 * gib, max_processes=512, file_size_bytes=4 * gib),
        policy=SandboxPolicy(user=os.environ.get("KG_SANDBOX_USER", "nobody") or None, gpu_index=0),
        problems=KERNEL_PROBLEMS)
    cpus = choose_timing_cpus("auto", 0)
    if cpus is None:
        raise SystemExit("fewer than three usable cores: nothing to compare")
    configs = {name: replace(base, **{"timing_cpus": cpus, **change}) for name, change in FACTORS[args.compare].items()}
    modes = tuple(configs)
    rubric = load_rubric("hw4")
    speedups = {m: {p: {"own": [], "reference": []} for p in KERNEL_PROBLEMS} for m in modes}
    phases = {m: {p: {ph: [] for ph in (*PHASES, "trials")} for p in KERNEL_PROBLEMS} for m in modes}
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="kg-stability-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandbox user must reach the copies below
        kit = build_kit(work)
        for i in range(args.grades):
            for mode in (modes if i % 2 == 0 else modes[::-1]):
                started = time.monotonic()
                measurements = run_gpu_stage(rubric, kit, kit, work / f"grade-{i}", configs[mode])
                seconds[mode].append(time.monotonic() - started)
                shutil.rmtree(work / f"grade-{i}", ignore_errors=True)
                for m in measurements:
                    if m.figure("student") is None or m.figure("trusted") is None:
                        raise SystemExit(f"{mode} grade {i + 1}: {m.problem_id} not timed ({m.status}): {m.log_tail}")
                    speedups[mode][m.problem_id]["own"].append(m.figure("student").speedup)
                    speedups[mode][m.problem_id]["reference"].append(m.figure("trusted").speedup)
                    for ph in PHASES:
                        phases[mode][m.problem_id][ph].append(m.telemetry["seconds"].get(ph, 0.0))
                    phases[mode][m.problem_id]["trials"].append(m.figure("student").trials)
                print(f"{mode} grade {i + 1}: {seconds[mode][-1]:.0f} s", flush=True)

    on, off = modes
    lines = [f"### Speedup stability over {args.grades} re-grades, {on} vs {off} ({date.today().isoformat()})", "",
             f"Hardware: {gpu_name()}, {os.cpu_count()} CPU cores, {platform.machine()}; commit "
             f"{args.commit or current_commit() or 'unknown'}; pinned cores (parent, student, reference) = "
             f"{cpus.parent}, {cpus.timed}; settings alternate grade by grade.",
             "Command: `bash tests/gpu/suite.sh --bench bench/timing_stability.py --compare "
             f"{args.compare} --grades {args.grades}` (GPU machine, `.whl/` carried)", "",
             "| problem | setting | speedups, own baseline | max/min | speedups, reference baseline | max/min |",
             "| --- | --- | --- | --- | --- | --- |"]
    for pid in KERNEL_PROBLEMS:
        for mode in modes:
            own, ref = speedups[mode][pid]["own"], speedups[mode][pid]["reference"]
            lines.append(f"| {pid} | {mode} | {', '.join(f'{x:.2f}' for x in own)} | {spread(own)[2]:.3f} | "
                         f"{', '.join(f'{x:.2f}' for x in ref)} | {spread(ref)[2]:.3f} |")
    lines += ["", "Median wall seconds per phase (phases 1-4 of all problems run at once; timings one by one):", "",
              f"| problem | setting | {' | '.join(PHASES)} | trials |", "| --- | --- |" + " --- |" * (len(PHASES) + 1)]
    for pid in KERNEL_PROBLEMS:
        for mode in modes:
            cells = [f"{statistics.median(phases[mode][pid][ph]):.1f}" for ph in PHASES]
            lines.append(f"| {pid} | {mode} | {' | '.join(cells)} | "
                         f"{', '.join(str(t) for t in phases[mode][pid]['trials'])} |")
    lines += ["", "| setting | seconds per kernel-only grade (median, min-max) |", "| --- | --- |"]
    for mode in modes:
        lines.append(f"| {mode} | {statistics.median(seconds[mode]):.1f} ({min(seconds[mode]):.1f}-"
                     f"{max(seconds[mode]):.1f}) |")
    publish_gpu_section(lines, "timing_stability", "stability")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
