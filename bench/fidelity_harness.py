"""The course-harness half of bench/fidelity.py: each submission's src/ and minitorch/ laid
over the official starter, built with compile_cuda.sh's flags, and the course's kernel tests
run on it (repeated for the speedup); their printed output read by bench/harness_output.py.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import fidelity_report as report
import harness_output as course
from bench_common import ResultStore, log

from worker.build import Toolchain, build_kernels, cuda_include_dirs, nvcc_version
from worker.rubric import Rubric
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip

# The course's compile_cuda.sh flags; -arch is added from --arch.
COURSE_NVCC_FLAGS = ("--shared", "-Xcompiler", "-fPIC")
OVERLAID = ("src", "minitorch")  # what a submission contributes to the harness tree
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".git")
LOG_TAIL_BYTES = 16 * 1024
MIN_TEST_S = 30.0  # --budget: a course test is not started with less time than this left


def save_tail(path: Path, text: str, limit: int = LOG_TAIL_BYTES) -> None:
    data = text.encode(errors="replace")
    if len(data) > limit:
        data = b"[... cut ...]\n" + data[-limit:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def submission_root(tree: Path, rubric: Rubric) -> Path:
    """The assignment folder inside an unpacked zip, found as the grader finds it; a tree
    without src/combine.cu (the untouched starter) by its src/softmax_kernel.cu alone."""
    try:
        return find_assignment_root(tree, rubric.required_files)
    except BadArchive:
        return find_assignment_root(tree, ("src/softmax_kernel.cu",))


def overlay_tree(official: Path, submission: Path, dest: Path) -> list[str]:
    """dest = a copy of the official starter whose src/ and minitorch/ are the submission's
    (each replaced whole; the starter's kept where the submission has none). Everything else,
    kernel_tests/ and test_utils.py included, is the starter's. No .so file or bytecode is
    copied. Returns the folders taken from the submission."""
    shutil.copytree(official, dest, ignore=_COPY_IGNORE)
    taken = []
    for part in OVERLAID:
        if (submission / part).is_dir():
            shutil.rmtree(dest / part, ignore_errors=True)
            shutil.copytree(submission / part, dest / part, ignore=_COPY_IGNORE)
            taken.append(part)
    return taken


def course_toolchain(nvcc: str, arch: str) -> Toolchain:
    return Toolchain(nvcc=nvcc, flags=(*COURSE_NVCC_FLAGS, f"-arch={arch}"), include_dirs=cuda_include_dirs())


def first_error_line(build_log: str) -> str:
    from worker.build_isolation import first_error_line as graders_summary  # of an nvcc log

    return graders_summary(build_log)


def prepare_submission(archive: Path, official: Path, work: Path, rubric: Rubric, toolchain: Toolchain,
                       limits: UnpackLimits, logs: Path) -> dict[str, Any]:
    """Unpack, overlay and build one submission for the harness; its record (with `tree`)."""
    name = archive.stem
    record: dict[str, Any] = {"zip": archive.name, "tests": {}, "builds": {}, "error": None}
    try:
        unpack_zip(archive, work / "upload", limits)
        root = submission_root(work / "upload", rubric)
    except BadArchive as exc:
        record["error"] = f"cannot unpack: {exc}"
        return record
    record["root"] = root.relative_to(work / "upload").as_posix() or "."
    tree = work / "tree"
    record["taken"] = overlay_tree(official, root, tree)
    record["tree"] = str(tree)
    targets = list(rubric.kernels)  # combine, softmax_kernel, layernorm_kernel: compile_cuda.sh's three
    for r in build_kernels(tree, targets, toolchain, None, len(targets)):
        record["builds"][r.name] = {"ok": r.ok, "seconds": round(r.seconds, 1),
                                    "first_error": "" if r.ok else first_error_line(r.log)}
        if not r.ok:
            save_tail(logs / name / f"build-{r.name}.log", r.log)
    return record


# `--harness-gc off`: the test file run as its own script would be, with the garbage collector
# off from the start (for measuring what collections inside the course's clock do to its figure).
NO_GC_RUNNER = ("import gc, runpy, sys; gc.disable(); script = sys.argv[1]; sys.argv = sys.argv[1:]; "
                "sys.path[0] = __import__('os').path.dirname(script); runpy.run_path(script, run_name='__main__')")


def run_course_test(tree: Path, test: str, python: str, timeout_s: float, expected: int,
                    log_path: Path, extra_env: dict[str, str] | None = None,
                    gc_off: bool = False) -> tuple[course.CourseVerdict, str]:
    """`python3 kernel_tests/<test>.py` in the tree, output to `log_path`; its verdict and output.
    `extra_env` / `gc_off`: the experiments of `--harness-env` / `--harness-gc off`."""
    env = dict(os.environ)
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleave as printed
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as out:
        try:
            script = f"kernel_tests/{test}.py"
            argv = [python, "-c", NO_GC_RUNNER, script] if gc_off else [python, script]
            proc = subprocess.Popen(argv, cwd=tree, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError as exc:
            verdict = course.CourseVerdict("crash", f"cannot start {python}: {exc}", expected=expected)
            return verdict, ""
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the test's own process group
            except ProcessLookupError:
                pass
            proc.wait()
            returncode = None
    output = log_path.read_bytes().decode(errors="replace")
    verdict = course.parse_harness_output(output, returncode, timed_out, expected, timeout_s,
                                          round(time.monotonic() - started, 1))
    return verdict, output


def harness_env(args: argparse.Namespace) -> dict[str, str]:
    """--harness-env KEY=VALUE ... as a dict."""
    pairs = [item.partition("=") for item in args.harness_env]
    if bad := [k for k, sep, _ in pairs if not sep or not k]:
        raise SystemExit(f"--harness-env wants KEY=VALUE, got {bad}")
    return {k: v for k, _, v in pairs}


def repeat_course_test(verdict: course.CourseVerdict, tree: Path, test: str, args: argparse.Namespace,
                       expected: int, log_dir: Path, deadline: float | None) -> None:
    """Runs 2..--repeat of a test file whose first run passed, one after another, for the
    course's speedup: the verdict stays the first run's; `repeat_speedups` gets the printed
    per-case speedups of every run that passed all its cases (the first included)."""
    verdict.runs = 1
    if verdict.verdict != "pass":
        return
    verdict.repeat_speedups = [list(verdict.speedups)]
    for run in range(2, max(1, args.repeat) + 1):
        timeout = args.timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < MIN_TEST_S:
                return
            timeout = min(timeout, left)
        again, _ = run_course_test(tree, test, args.python, timeout, expected, log_dir / f"{test}.run{run}.log",
                                   harness_env(args), args.harness_gc == "off")
        verdict.runs = run
        if again.verdict == "pass":
            verdict.repeat_speedups.append(list(again.speedups))


def run_harness(zips: list[Path], official: Path, work: Path, store: ResultStore, args: argparse.Namespace,
                rubric: Rubric, limits: UnpackLimits, deadline: float | None) -> None:
    tests = list(course.COURSE_TESTS)
    for test in tests:
        if not (official / "kernel_tests" / f"{test}.py").is_file():
            raise SystemExit(f"the official starter at {official} has no kernel_tests/{test}.py")
    expected = {t: course.expected_cases((official / "kernel_tests" / f"{t}.py").read_text()) for t in tests}
    toolchain = course_toolchain(args.nvcc, args.arch)
    logs = args.out / "fidelity-logs"
    log(f"harness: {len(zips)} submissions; nvcc {nvcc_version(args.nvcc)}; flags {' '.join(toolchain.flags)}"
        f"{'; includes ' + ' '.join(toolchain.include_dirs) if toolchain.include_dirs else ''}")

    builders = max(1, min(len(zips), (os.cpu_count() or 2) // 3))  # three nvcc per submission
    prepared: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=builders) as pool:
        futures = {pool.submit(prepare_submission, z, official, work / z.stem, rubric, toolchain, limits, logs): z
                   for z in zips}
        for future in as_completed(futures):
            z = futures[future]
            try:
                record = future.result()
            except Exception as exc:  # an infrastructure fault in one submission: keep going
                record = {"zip": z.name, "tests": {}, "builds": {}, "error": f"{type(exc).__name__}: {exc}"}
            prepared[z.stem] = record
            store.update(lambda d, n=z.stem, r=record: d["harness"].__setitem__(n, {k: v for k, v in r.items() if k != "tree"}))
            builds = ", ".join(f"{n} {'ok' if b['ok'] else 'FAILED: ' + b['first_error']}" for n, b in record["builds"].items())
            log(f"harness {z.stem}: {record['error'] or 'built'}{'; ' + builds if builds else ''}")

    def one(name: str, test: str) -> tuple[str, str, course.CourseVerdict]:
        record = prepared[name]
        failed = {n: b["first_error"] or "did not build" for n, b in record["builds"].items() if not b["ok"]}
        blocked = course.build_failed(test, failed)
        if blocked is not None:
            blocked.expected = expected[test]
            return name, test, blocked
        timeout = args.timeout
        if deadline is not None:  # no test runs past the budget: the last ones get less time
            left = deadline - time.monotonic()
            if left < MIN_TEST_S:
                return name, test, course.CourseVerdict("not run", "skipped: --budget used up", expected=expected[test])
            timeout = min(timeout, left)
        verdict, output = run_course_test(Path(record["tree"]), test, args.python, timeout, expected[test],
                                          work / name / "logs" / f"{test}.log", harness_env(args),
                                          args.harness_gc == "off")
        verdict = course.blame_build(verdict, output, failed)
        if verdict.timed_out and timeout < args.timeout:  # cut by the bench, not the test's own fault
            verdict.verdict = "not run"
            verdict.reason = f"cut at {timeout:.0f} s by --budget ({verdict.passes}/{verdict.expected} passed by then)"
        save_tail(logs / name / f"{test}.log", output)
        repeat_course_test(verdict, Path(record["tree"]), test, args, expected[test], work / name / "logs", deadline)
        return name, test, verdict

    # The softmax tests (largest inputs) first, so the long ones do not start last.
    order = [(name, test) for test in tests for name in sorted(prepared) if not prepared[name].get("error")]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(one, name, test) for name, test in order]
        for future in as_completed(futures):
            try:
                name, test, verdict = future.result()
            except Exception as exc:  # never lose the others' results over one
                log(f"harness: a test run failed in the bench itself: {type(exc).__name__}: {exc}")
                continue
            store.update(lambda d, n=name, t=test, v=verdict: d["harness"][n]["tests"].__setitem__(t, v.to_dict()))
            took = f" ({verdict.seconds:g} s)" if verdict.seconds is not None else ""
            speed = course.course_speed(verdict)
            mean = f"; course mean {speed.mean:.2f}x over {speed.runs} of {verdict.runs} runs" if speed else ""
            log(f"harness {name} {test}: {report.course_cell(verdict)}; speedups "
                f"{report.speedup_summary(verdict.speedups)}{took}{mean}")

