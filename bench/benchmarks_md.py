"""Recording a measured section in its metric's history, docs/benchmarks/<metric>.md (shared by
the bench scripts).

BENCHMARKS.md is one page of current figures per metric, edited by hand; every measured section
goes into the history of its metric, newest first, so a recording never grows the front page.
A section measured on a GPU machine comes back as $OUT/<name>.md and is filed the same way:
`python3 bench/benchmarks_md.py METRIC FILE...`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
HISTORY_DIR = ROOT / "docs" / "benchmarks"

# metric -> what its history holds (the file is HISTORY_DIR/<metric>.md)
METRICS: dict[str, str] = {
    "grade-time": "Grade time on the GPU: the kit and corpus zips, kernel problems and Problem 3",
    "burst": "A burst on one GPU: the two-piece schedule against whole grades",
    "capacity": "The capacity model against measured waits, and the control plane's throughput",
    "fidelity": "Fidelity against the course's harness: verdicts, speed figures, targets",
    "stability": "Timing stability: re-grades of one zip, timing conditions",
    "speedups": "Speedups and bandwidth of the reference kit, and the second assignment",
    "hostile": "Hostile, hanging and broken submissions: what each costs and scores",
    "gaming": "Gaming mutants: what the guards keep of a would-be gain",
    "sandbox": "The sandbox's cost: a child's start and a whole grade",
    "sanitizer": "compute-sanitizer on failed cases: what it names and what it costs",
    "gpu-suite": "The GPU test suite, part by part",
    "builds": "nvcc builds: cold, cached and by phase",
    "cpu-suite": "The CPU test suite's duration, and what it spends",
    "setup": "Set-up weight: `make dev` on a fresh clone",
    "gradebook": "Gradebook load: 500 students x 3 scored runs",
    "uploads": "Uploads: memory, latency, and the deadline rush",
    "similarity": "Similarity: fidelity on the corpus, scale, report size",
}


# Set by --smoke (and by the suites that run the benches so): nothing is recorded, anywhere.
SMOKE_VARIABLE = "KG_BENCH_SMOKE"


def add_smoke_flag(parser: argparse.ArgumentParser) -> None:
    """--smoke: the smallest sizes, seconds, nothing recorded (the test suites run every bench so,
    to notice one that no longer runs: tests/service/test_bench_smoke.py, tests/gpu/)."""
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest sizes, seconds, nothing recorded: does the bench still run?")


def smoke(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bool:
    """Whether this is a smoke run (--smoke or $KG_BENCH_SMOKE); from here on nothing records."""
    if getattr(args, "record", False) and (args.smoke or os.environ.get(SMOKE_VARIABLE)):
        parser.error("--smoke records nothing: leave out --record")
    if args.smoke:
        os.environ[SMOKE_VARIABLE] = "1"
    return smoke_run()


def smoke_run() -> bool:
    return bool(os.environ.get(SMOKE_VARIABLE))


def history_path(metric: str) -> Path:
    """docs/benchmarks/<metric>.md; a metric not in METRICS is refused (no stray history file)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}: one of {', '.join(sorted(METRICS))}")
    return HISTORY_DIR / f"{metric}.md"


def record_section(text: str, metric: str, directory: Path | None = None) -> Path:
    """Insert a measured section at the top of its metric's history (after the file's title and
    intro, before the newest section there); the history file."""
    if smoke_run():
        raise RuntimeError("a smoke run records nothing")
    path = history_path(metric) if directory is None else directory / f"{metric}.md"
    existing = path.read_text() if path.exists() else f"# {METRICS[metric]}\n"
    lines = existing.rstrip("\n").split("\n")
    first = next((i for i, line in enumerate(lines) if i and line.startswith(("## ", "### "))), len(lines))
    head = "\n".join(lines[:first]).rstrip("\n")
    rest = "\n".join(lines[first:]).strip("\n")
    section = text.strip("\n")
    path.write_text(head + "\n\n" + section + "\n" + ("\n" + rest + "\n" if rest else ""))
    return path


def publish(lines: list[str], record: bool, metric: str) -> str:
    """Print a measured section and, with --record, file it in docs/benchmarks/<metric>.md; the
    text. BENCHMARKS.md's current figures are edited by hand when the new figures supersede them."""
    history_path(metric)  # a wrong metric fails before the measurement is printed, not after
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        path = record_section(text, metric)
        print(f"recorded in {_shown(path)}; BENCHMARKS.md's '{metric}' entry is edited by hand")
    return text


def publish_gpu_section(lines: list[str], name: str, metric: str) -> None:
    """Print a section measured on a GPU machine and leave it as $OUT/<name>.md (the device
    tool's output folder, or .gpu-out/), to be filed with `bench/benchmarks_md.py METRIC FILE`."""
    text = publish(lines, record=False, metric=metric)
    if smoke_run():  # a smoke run's figures are for nobody
        return
    out = Path(os.environ.get("OUT", ".gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    print(f"file it with: python3 bench/benchmarks_md.py {metric} <fetched {name}.md>")


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def current_commit() -> str:
    """The short hash of HEAD, for the 'commit' of a recorded table; "+ uncommitted changes"
    when the tree differs from it (as on a GPU machine, which gets the working tree)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    return f"{head} + uncommitted changes" if head and git("status", "--porcelain", "--untracked-files=no") else head


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="File measured sections (e.g. a GPU bench's $OUT/<name>.md) "
                                                 "at the top of docs/benchmarks/<metric>.md.")
    parser.add_argument("metric", choices=sorted(METRICS))
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for file in args.files:
        print(f"{file} -> {_shown(record_section(file.read_text(), args.metric))}")


if __name__ == "__main__":
    main()
