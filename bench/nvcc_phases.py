"""Where a cold nvcc build of the reference kit spends its time, and what the sandbox adds.

    bash tests/gpu/suite.sh --bench bench/nvcc_phases.py [--rounds 3]      (GPU machine)
    .venv/bin/python bench/nvcc_phases.py --rounds 1                        (any machine with nvcc)

Per round, with the rubric's flags and -arch=$KG_CUDA_ARCH (default sm_90, the service's):
each of the three .cu files alone, with nvcc's own per-phase timing (`--time`); the three at
once, as worker.build runs them, directly and sandboxed as a submission's build (the
sandbox user from $KG_SANDBOX_USER, default nobody); and the three at once with `-t 0`, and
with -arch=native (what the GPU test suite uses: nvcc then asks the driver for the GPU). No
build cache anywhere. Prints medians over the rounds, and writes the section to
$OUT/nvcc_phases.md for docs/benchmarks/builds.md (`python3 bench/benchmarks_md.py builds FILE`).
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks_md import current_commit, publish_gpu_section  # noqa: E402

from worker.build import Confinement, KernelTarget, Toolchain, build_kernels, cuda_include_dirs, nvcc_version  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy  # noqa: E402

GIB = 1024**3


def fresh_kit(work: Path, label: str) -> Path:
    root = work / label / "llmsys_hw4"
    shutil.copytree(load_rubric("hw4").starter_dir, root, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return root


def timed_nvcc(root: Path, target: KernelTarget, toolchain: Toolchain, extra: tuple[str, ...] = ()) -> float:
    command = toolchain.command(Path(target.source), Path(target.output))
    command[1:1] = extra
    (root / target.output).parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed on {target.source}:\n{done.stdout}{done.stderr}")
    return time.monotonic() - started


def phases_of(csv_path: Path) -> dict[str, float]:
    """nvcc --time's CSV: milliseconds per phase (the two gcc compiles and fatbinaries summed)."""
    totals: dict[str, float] = {}
    with open(csv_path, newline="") as fh:
        for row in csv.DictReader(fh, skipinitialspace=True):
            name = (row.get("phase name ") or row.get("phase name") or "").strip()
            value = list(row.values())[-2]
            if name and name != "nvcc (driver)":
                totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rubric = load_rubric("hw4")
    targets = list(rubric.kernels)
    arch = os.environ.get("KG_CUDA_ARCH", "sm_90")
    toolchain = Toolchain(nvcc=os.environ.get("KG_NVCC", "nvcc"), flags=(*rubric.nvcc_flags, f"-arch={arch}"),
                          include_dirs=cuda_include_dirs())
    sandbox = Sandbox(SandboxLimits(wall_s=300, cpu_s=300, memory_bytes=4 * GIB, max_processes=64,
                                    file_size_bytes=GIB // 2),
                      SandboxPolicy(user=os.environ.get("KG_SANDBOX_USER", "nobody") or None))
    alone: dict[str, list[float]] = {t.name: [] for t in targets}
    phases: dict[str, dict[str, list[float]]] = {t.name: {} for t in targets}
    native = Toolchain(nvcc=toolchain.nvcc, flags=(*rubric.nvcc_flags, "-arch=native"),
                       include_dirs=toolchain.include_dirs)
    # kind -> (toolchain, extra nvcc arguments); "sandboxed" goes through worker.build as a submission's
    kinds = {"direct": (toolchain, ()), "sandboxed": (toolchain, ()), "direct -t 0": (toolchain, ("-t", "0")),
             "direct -arch=native": (native, ())}
    together: dict[str, dict[str, list[float]]] = {k: {t.name: [] for t in targets} for k in kinds}
    walls: dict[str, list[float]] = {k: [] for k in together}
    with tempfile.TemporaryDirectory(prefix="kg-nvcc-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandbox user must reach the confined build folders
        for r in range(args.rounds):
            root = fresh_kit(work, f"alone-{r}")
            for t in targets:
                csv_path = work / f"{t.name}-{r}.csv"
                alone[t.name].append(timed_nvcc(root, t, toolchain, ("--time", str(csv_path))))
                for name, ms in phases_of(csv_path).items():
                    phases[t.name].setdefault(name, []).append(ms / 1000.0)
            for kind in together:
                root = fresh_kit(work, f"{kind.replace(' ', '')}-{r}")
                started = time.monotonic()
                if kind == "sandboxed":
                    results = build_kernels(root, targets, toolchain,
                                            confine=Confinement(sandbox, work / f"scratch-{r}"))
                    failed = [x for x in results if not x.ok]
                    if failed:
                        raise SystemExit(f"sandboxed build failed: {failed[0].log}")
                    seconds = {x.name: x.seconds for x in results}
                else:
                    chain, extra = kinds[kind]
                    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                        seconds = dict(zip((t.name for t in targets),
                                           pool.map(partial(timed_nvcc, root, toolchain=chain, extra=extra), targets)))
                walls[kind].append(time.monotonic() - started)
                for name, s in seconds.items():
                    together[kind][name].append(s)
            print(f"round {r + 1}: alone {[round(alone[t.name][-1], 1) for t in targets]}, "
                  f"together {({k: round(v[-1], 1) for k, v in walls.items()})}", flush=True)

    med = statistics.median
    phase_names = sorted({p for t in targets for p in phases[t.name]},
                         key=lambda p: -max(med(phases[t.name].get(p, [0.0])) for t in targets))
    lines = [f"### Cold nvcc builds of the reference kit, by phase ({date.today().isoformat()})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores; {nvcc_version(toolchain.nvcc)}; "
             f"commit {current_commit() or 'unknown'}; flags {' '.join(toolchain.flags)}; no build cache; "
             f"median of {args.rounds} round(s).",
             f"Command: `bash tests/gpu/suite.sh --bench bench/nvcc_phases.py --rounds {args.rounds}`", "",
             "| file | alone s | " + " | ".join(phase_names) + " | "
             + " | ".join(f"three at once, {k} s" for k in together) + " |",
             "| --- | --- |" + " --- |" * (len(phase_names) + len(together))]
    for t in targets:
        cells = [f"{med(phases[t.name].get(p, [0.0])):.2f}" for p in phase_names]
        lines.append(f"| {t.name} | {med(alone[t.name]):.2f} | {' | '.join(cells)} | "
                     + " | ".join(f"{med(together[k][t.name]):.2f}" for k in together) + " |")
    lines.append("| whole build (wall) | " + f"{sum(med(alone[t.name]) for t in targets):.2f} (one after another) | "
                 + " | ".join("" for _ in phase_names) + " | "
                 + " | ".join(f"{med(walls[k]):.2f} ({min(walls[k]):.2f}-{max(walls[k]):.2f})" for k in together)
                 + " |")
    publish_gpu_section(lines, "nvcc_phases", "builds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
