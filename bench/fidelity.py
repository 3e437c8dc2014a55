"""Fidelity: the course's own harness and kernelgrade on the same real submissions.

    bash tests/gpu/suite.sh --bench bench/fidelity.py [options]     (GPU machine)
    python3 bench/fidelity.py --render A.json [B.json ...]           (any machine: merge, table)

For every zip in --zips (default .corpus/zips):
1. The course harness: a fresh tree = the official starter (--official, default
   .corpus/official) with the submission's own src/ and minitorch/ in place of the starter's
   (the submission's kernel_tests/, test_utils.py and prebuilt .so files are not used), the
   three libraries built as compile_cuda.sh does (`nvcc -o minitorch/cuda_kernels/X.so
   --shared src/X.cu -Xcompiler -fPIC`, plus -arch and the cuBLAS/cuRAND header folders the
   grader adds), then `python3 kernel_tests/test_X.py` for the four kernel tests, cwd = the
   tree, each under a timeout, --jobs of them at once across submissions. Verdicts come from
   the printed text of the first run (bench/harness_output.py): the harness exits 0 on an
   allclose failure. A file whose first run passed is run --repeat times in all (default 5),
   one after another; each passing run's printed per-case speedups are kept, and the course
   figure is the mean over runs of each run's mean. Speed figures are cleanest with --jobs 1
   or 2 (other test files share the GPU otherwise); meta records jobs and repeat.
2. kernelgrade: worker.pipeline.grade_submission on the same zip with the PipelineConfig and
   GPU stage built as production builds them (grader.runs.engine_config from the settings'
   defaults and KG_* variables: bench/production_config.py), one zip after another, after
   every harness run has ended, so that no course test runs beside kernelgrade's timing.
   Targets are the rubric's (no calibration).
3. One row per submission and problem: course verdict and speedups, kernelgrade verdict,
   speedups and points, agreement; then the speed fidelity table (course mean beside
   kernelgrade's scored figure, ratio, within 15%, whether the printed shapes are
   rubrics.hw4.course_shapes'), a per-shape listing and each graded problem's flags.
   Printed, and written to $OUT (default .gpu-out/):
   fidelity.md (section for docs/benchmarks/fidelity.md), fidelity.json (raw results, rewritten after every
   result, so a run cut short keeps what it had), fidelity-logs/ (test output tails, failed
   build logs).

--harness-only / --grader-only split the work over two device calls; --render merges their
fidelity.json files into one table afterwards (no GPU needed).

This script is the command line and the kernelgrade half; the course harness is
bench/fidelity_harness.py, the tables bench/fidelity_report.py, and the log and results file
bench/bench_common.py.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import fidelity_report as report  # noqa: E402
from bench_common import ResultStore, command_line, gpu_description, log, safe_commit  # noqa: E402
from fidelity_harness import harness_env, run_harness  # noqa: E402
from production_config import production_configs  # noqa: E402

from worker.build import nvcc_version  # noqa: E402
from worker.rubric import Rubric, load_rubric  # noqa: E402
from worker.unpack import UnpackLimits  # noqa: E402

GRADE_ESTIMATE_S = 90.0  # before the first grade has been timed, for --budget
# The settings' unpack defaults, used only when a harness-only run cannot read the settings
FALLBACK_LIMITS = UnpackLimits(200 << 20, 50 << 20, 5000, 24, 100.0)


# --------------------------------------------------------------------------- kernelgrade


def gpu_present() -> bool:
    """A GPU the driver reports (production's test is NVML's count; nvidia-smi when pynvml is absent)."""
    from worker.telemetry import gpu_count

    if gpu_count() > 0:
        return True
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU " in out.stdout


def _last_log_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _problem3_time(info: dict[str, Any]) -> dict[str, Any] | None:
    if not info:
        return None
    timing = info.get("timing") or {}
    first = info.get("first_steps") or {}
    return {"setup_s": info.get("setup_s"), "elapsed_s": info.get("elapsed_s"), "pairs": timing.get("pairs"),
            "stop": timing.get("stop"), "timing_ended_s": timing.get("timing_ended_s"),
            "checked_step_s": {model: f.get("seconds") for model, f in first.items()},
            "unfused_ms": timing.get("unfused_ms"), "fused_ms": timing.get("fused_ms")}


def outcome_record(outcome: Any, seconds: float, wanted: tuple[str, ...]) -> dict[str, Any]:
    """What the table and the JSON keep of a pipeline Outcome, for the problems `wanted`
    (the score lists the others as not run)."""
    from worker.measurements import ProblemMeasurement

    problems: dict[str, Any] = {}
    for p in outcome.problems:
        if p.problem_id not in wanted:
            continue
        raw = (p.details or {}).get("measurement")
        m = ProblemMeasurement.from_dict(raw) if raw else None
        first = ""
        if m is not None:
            failed = m.first_failure or (m.failed_cases[0] if m.failed_cases else None)
            if failed is not None:
                first = failed.describe()
            elif m.status != "ok":
                first = f"{m.status}: {_last_log_line(m.log_tail)}"
        elif p.status == "not_run":
            first = p.message  # names the reason (a build error's first line, a bad archive)
        problems[p.problem_id] = {
            "status": p.status,
            # False: the pipeline stopped after a good build (no GPU stage): no verdict at all
            "graded": outcome.state.value != "built",
            "correct": bool(m is not None and m.status == "ok" and m.all_passed),
            "cases": f"{sum(c.ok for c in m.cases)}/{len(m.cases)}" if m is not None else "-",
            "points": p.points,
            "max_points": p.max_points,
            "message": p.message,
            "first_failure": first,
            "measurement_status": m.status if m is not None else None,
            "speedup_student": m.figure("student").describe() if m is not None and m.figure("student") else None,
            "speedup_reference_ops": (m.figure("reference_ops").describe()
                                      if m is not None and m.figure("reference_ops") else None),
            "speedup_trusted": m.figure("trusted").describe() if m is not None and m.figure("trusted") else None,
            # the figure that scored, as a number, and the timing's own record (per shape)
            "scored_figure": ((p.details or {}).get("score") or {}).get("figure"),
            "scored_speedup": (((p.details or {}).get("score") or {}).get("speedup") or {}).get("speedup"),
            "flags": ((p.details or {}).get("score") or {}).get("flags", []),
            "timing": {k: m.telemetry.get(k) for k in ("timing_shapes", "timing_evidence", "timing_dropped", "seconds")}
            if m is not None else {},
            # where a timed call's time goes: the kernels' own GPU time (CUPTI, on the largest
            # timed shape; its timed call is in "timing") and the bandwidth that makes
            "kernel_ms": m.kernel_ms if m is not None else None,
            "bandwidth": m.telemetry.get("bandwidth") if m is not None else None,
            # Problem 3: per model, the peak host and device memory of its steps (MiB), and where
            # its time went (set-up, the whole problem, the timed pairs and why they stopped)
            "step_memory": (m.telemetry.get("problem3") or {}).get("memory") if m is not None else None,
            "problem3_time": _problem3_time(m.telemetry.get("problem3") or {}) if m is not None else None,
            "log_tail": m.log_tail[-1500:] if m is not None and m.status != "ok" else "",
            # for diagnosis: every failed case (bounded) and the score's reasons
            "failed_cases": [c.describe() for c in m.failed_cases][:30] if m is not None else [],
            "reasons": ((p.details or {}).get("score") or {}).get("reasons", []),
            # compute-sanitizer on a failed case (rubrics/hw4/sanitize.py): tools, findings, seconds
            "sanitizer": m.telemetry.get("sanitizer") if m is not None else None,
        }
    return {"state": outcome.state.value, "error_class": outcome.error_class.value if outcome.error_class else None,
            "message": outcome.message, "score": outcome.score, "seconds": round(seconds, 1),
            "stages": {name: {"status": rec.status, "seconds": round(rec.seconds, 1)} for name, rec in outcome.stages.items()},
            "problems": problems, "error": None}


def run_grader(zips: list[Path], work: Path, store: ResultStore, args: argparse.Namespace, rubric: Rubric,
               config: Any, stage_config: Any, deadline: float | None) -> None:
    from rubrics.hw4.grade import run_gpu_stage
    from worker.assignment import StageProgress
    from worker.pipeline import grade_submission

    has_gpu = gpu_present()
    if not has_gpu:
        log("grader: no GPU here: the pipeline ends at the build (state built), as production's without a GPU stage")
    last_seconds = GRADE_ESTIMATE_S
    for z in zips:
        name = z.stem
        if deadline is not None and time.monotonic() + last_seconds > deadline:
            store.update(lambda d, n=name: d["grader"].__setitem__(n, {"problems": {}, "error": "skipped: --budget used up"}))
            log(f"grader {name}: skipped (budget)")
            continue
        job_dir = work / f"job-{name}"
        stage_started = [time.monotonic()]

        def on_stage(stage: str, n: str = name, started: list[float] = stage_started) -> None:
            log(f"grader {n}: {stage} ({time.monotonic() - started[0]:.0f} s in)")

        def on_problem(pid: str, n: str = name) -> None:
            log(f"grader {n}: problem {pid}")

        def gpu_stage(r: Rubric, staged: Path, reference: Path, work_dir: Path, *gradable: tuple[str, ...],
                      problem_cb: Callable[[str], None] = on_problem) -> list[Any]:
            # As production's stage (grader.runs.engine_config.gpu_stage_for): a pipeline that passes the
            # problems whose kernels built gets only those measured.
            chosen = stage_config
            if gradable:
                chosen = replace(stage_config, problems=tuple(p for p in stage_config.problems if p in gradable[0]))
            return run_gpu_stage(r, staged, reference, work_dir, chosen, StageProgress(problem=problem_cb))

        started = time.monotonic()
        try:
            outcome = grade_submission(z, rubric, job_dir, config, on_stage, gpu_stage if has_gpu else None, None)
            record = outcome_record(outcome, time.monotonic() - started, stage_config.problems)
        except Exception as exc:  # an infrastructure fault: recorded, the next zip still graded
            record = {"problems": {}, "error": f"{type(exc).__name__}: {exc}", "seconds": round(time.monotonic() - started, 1)}
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        last_seconds = max(30.0, time.monotonic() - started)
        store.update(lambda d, n=name, r=record: d["grader"].__setitem__(n, r))
        verdicts = ", ".join(f"{pid} {p['status']} {round(p['points'], 2):g}/{p['max_points']:g}"
                             for pid, p in record.get("problems", {}).items())
        log(f"grader {name}: {record.get('state', 'error')} in {last_seconds:.0f} s; "
            f"{verdicts or record.get('error') or record.get('message')}")


# --------------------------------------------------------------------------- output


def header_lines(metas: list[dict[str, Any]]) -> list[str]:
    day = next((m.get("date") for m in metas if m.get("date")), date.today().isoformat())
    lines = [f"### Fidelity: the course's harness and kernelgrade on the development corpus ({day})", ""]
    for m in metas:
        part = {"harness": "Course harness", "grader": "kernelgrade", "both": "Course harness + kernelgrade"}.get(
            m.get("mode", ""), "Run")
        lines.append(f"{part}: {m.get('gpu')}, {m.get('cpus')} CPU cores; {m.get('nvcc')}; Python "
                     f"{m.get('python')}; commit {m.get('commit') or 'unknown'}.")
        if m.get("mode") in ("harness", "both"):
            lines.append(f"Course harness: official starter (kernel_tests/, test_utils.py) with each submission's "
                         f"src/ and minitorch/; built with compile_cuda.sh's flags + {m.get('arch')}; "
                         f"{m.get('jobs')} test files at once, {m.get('timeout_s') or 0:g} s each; verdicts from the "
                         f"printed output of the first run; each passing file run {m.get('repeat') or 1} times "
                         "for the course's mean speedup.")
            if m.get("harness_env") or m.get("harness_gc") == "off":
                lines.append(f"Course harness EXPERIMENT (not the course's conditions): environment "
                             f"{m.get('harness_env') or {}}, garbage collector {m.get('harness_gc')}.")
        if m.get("mode") in ("grader", "both"):
            lines.append(f"kernelgrade: grade_submission with production settings ({m.get('settings')}); "
                         f"problems {', '.join(m.get('problems') or [])}; targets: the rubric's (no calibration).")
        lines.append(f"Command: `{m.get('command')}`")
    return lines


def build_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, h in sorted(results.get("harness", {}).items()):
        if h.get("error"):
            lines.append(f"- {name}: {h['error']}")
            continue
        parts = [f"{n} ok ({b['seconds']:g} s)" if b["ok"] else f"{n} FAILED: {b['first_error']}"
                 for n, b in h.get("builds", {}).items()]
        lines.append(f"- {name} (folder {h.get('root', '?')}): {'; '.join(parts)}")
    return lines


SPEED_TITLE = ("Speed fidelity: the course harness's speedup (mean over its repeated runs of each run's mean "
               "of the printed per-case speedups) beside kernelgrade's scored figure")


def speed_section(results: dict[str, Any]) -> str:
    """The speed fidelity table, the per-shape listing and the graded problems' flags, as
    markdown (printed as text beside it)."""
    rows = report.speed_rows(results)
    shapes, flags = report.shape_lines(results), report.flag_lines(results)
    print(f"\n{SPEED_TITLE}:")
    print(report.render_speed_text(rows) if rows else "(no submission and problem with both figures)")
    md = f"\n{SPEED_TITLE}:\n\n" + (report.render_speed_markdown(rows) if rows else
                                    "(no submission and problem with both figures)\n")
    if shapes:
        print("per shape, course per-case mean over runs vs kernelgrade's per-shape speedup:")
        print("\n".join(shapes))
        md += ("\nPer shape, course per-case mean over runs vs kernelgrade's per-shape speedup:\n\n"
               + "\n".join(shapes) + "\n")
    if flags:
        print("kernelgrade's flags and timing seconds per graded problem:")
        print("\n".join(flags))
        md += "\nkernelgrade's flags and timing seconds per graded problem:\n\n" + "\n".join(flags) + "\n"
    return md


def render(results: dict[str, Any], out: Path) -> None:
    metas = results["meta"] if isinstance(results.get("meta"), list) else [results.get("meta") or {}]
    rows = report.table_rows(results)
    counts = report.summary_counts(rows)
    print()
    print(report.render_text(rows))
    print(f"\nagree {counts['agree']}, DISAGREE {counts['disagree']}, not compared {counts['not compared']}")
    builds = build_lines(results)
    if builds:
        print("nvcc builds for the harness (course flags):")
        print("\n".join(builds))
    md = report.render_markdown(rows, header_lines(metas))
    md += (f"\nAgreement: {counts['agree']} agree, {counts['disagree']} disagree, "
           f"{counts['not compared']} not compared.\n")
    if builds:
        md += "\nnvcc builds for the harness (course flags):\n\n" + "\n".join(builds) + "\n"
    md += speed_section(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.md").write_text(md)
    print(f"\nwrote {out / 'fidelity.md'} and {out / 'fidelity.json'}")


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--zips", type=Path, default=ROOT / ".corpus" / "zips", help="folder of submission zips")
    parser.add_argument("--official", type=Path, default=ROOT / ".corpus" / "official",
                        help="the official starter tree (kernel_tests/, test_utils.py, ...)")
    parser.add_argument("--only", default="", help="comma-separated zip names (without .zip) to include")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".gpu-out")))
    parser.add_argument("--jobs", type=int, default=8,
                        help="course test files run at once (speed figures are cleanest with 1 or 2)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each course test file, one after another, for the course's mean speedup")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per course test file")
    parser.add_argument("--arch", default="sm_90", help="nvcc -arch for the harness builds")
    parser.add_argument("--nvcc", default=os.environ.get("KG_NVCC", "nvcc"))
    parser.add_argument("--python", default="python3", help="the interpreter that runs the course tests")
    parser.add_argument("--harness-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an experiment: set this in the course tests' environment (repeatable), e.g. "
                             "the GLIBC_TUNABLES of kernelgrade's children")
    parser.add_argument("--harness-gc", choices=("on", "off"), default="on",
                        help="an experiment: 'off' runs the course tests with Python's garbage collector off")
    parser.add_argument("--problems", default="", help="kernelgrade problems, e.g. 1.1,1.2,2.1,2.2 (default: all)")
    half = parser.add_mutually_exclusive_group()
    half.add_argument("--harness-only", action="store_true")
    half.add_argument("--grader-only", action="store_true")
    half.add_argument("--render", nargs="+", type=Path, metavar="JSON",
                      help="merge fidelity.json files of earlier runs and print/write the table only")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="seconds: start no test or grade that would end past this (0: no limit)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary trees")
    parser.add_argument("--commit", default="", help="the commit to name in the header (default: git's HEAD)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = args.out.absolute()
    if args.render:
        results = report.merge_results(json.loads(p.read_text()) for p in args.render)
        (args.out / "fidelity.json").parent.mkdir(parents=True, exist_ok=True)
        (args.out / "fidelity.json").write_text(json.dumps(results, indent=1, default=str))
        render(results, args.out)
        return 0

    started = time.monotonic()
    deadline = started + args.budget if args.budget > 0 else None
    rubric = load_rubric("hw4")
    problems = tuple(p.strip() for p in args.problems.split(",") if p.strip()) or tuple(p.id for p in rubric.problems)
    unknown = set(problems) - {p.id for p in rubric.problems}
    if unknown:
        raise SystemExit(f"unknown problem(s) {sorted(unknown)}; the rubric has {[p.id for p in rubric.problems]}")
    zips = sorted(args.zips.glob("*.zip"))
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    if only:
        zips = [z for z in zips if z.stem in only]
        if missing := only - {z.stem for z in zips}:
            raise SystemExit(f"no zip(s) named {sorted(missing)} in {args.zips}")
    if not zips:
        raise SystemExit(f"no zips in {args.zips}")
    mode = "harness" if args.harness_only else "grader" if args.grader_only else "both"

    work = Path(tempfile.mkdtemp(prefix="kg-fidelity-"))
    work.chmod(0o711)  # the sandbox user must reach the grader's job folders
    try:
        config, stage_config, settings_source = production_configs(rubric, work / "data", problems)
        limits = config.limits
    except Exception as exc:
        if mode != "harness":
            raise
        config = stage_config = None  # the harness needs only the unpack limits
        limits, settings_source = FALLBACK_LIMITS, f"production settings unreadable ({type(exc).__name__}: {exc})"
    meta = {"date": date.today().isoformat(), "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "mode": mode, "gpu": gpu_description(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "nvcc": nvcc_version(args.nvcc), "python": sys.version.split()[0], "commit": args.commit or safe_commit(),
            "command": command_line(sys.argv if argv is None else ["bench/fidelity.py", *argv]),
            "zips": [z.name for z in zips], "jobs": args.jobs, "repeat": args.repeat,
            "timeout_s": args.timeout, "arch": f"-arch={args.arch}",
            "harness_python": args.python, "harness_env": harness_env(args), "harness_gc": args.harness_gc,
            "problems": list(problems), "settings": settings_source}
    store = ResultStore(args.out / "fidelity.json", meta)
    log(f"fidelity: {len(zips)} zips, mode {mode}; work folder {work}; results -> {store.path}")
    try:
        if mode in ("harness", "both"):
            run_harness(zips, args.official.absolute(), work / "harness", store, args, rubric, limits, deadline)
            log(f"harness done in {time.monotonic() - started:.0f} s")
        if mode in ("grader", "both"):
            grader_started = time.monotonic()
            log(f"grader: {settings_source}; problems {', '.join(problems)}; timing cores {stage_config.timing_cpus}; "
                f"sandbox user {stage_config.policy.user!r}")
            run_grader(zips, work / "grader", store, args, rubric, config, stage_config, deadline)
            log(f"grader done in {time.monotonic() - grader_started:.0f} s")
    finally:
        store.update(lambda d: d["meta"].__setitem__("seconds", round(time.monotonic() - started, 1)))
        render(store.data, args.out)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
