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
   the printed text of the first run (bench/fidelity_report.py): the harness exits 0 on an
   allclose failure. A file whose first run passed is run --repeat times in all (default 5),
   one after another; each passing run's printed per-case speedups are kept, and the course
   figure is the mean over runs of each run's mean. Speed figures are cleanest with --jobs 1
   or 2 (other test files share the GPU otherwise); meta records jobs and repeat.
2. kernelgrade: worker.pipeline.grade_submission on the same zip with the PipelineConfig and
   GPU stage built as production builds them (grader.runs.engine_config from the settings'
   defaults and KG_* variables), one zip after another, after every harness run has ended, so that no
   course test runs beside kernelgrade's timing. Targets are the rubric's (no calibration).
3. One row per submission and problem: course verdict and speedups, kernelgrade verdict,
   speedups and points, agreement; then the speed fidelity table (course mean beside
   kernelgrade's scored figure, ratio, within 15%, whether the printed shapes are
   worker.hw4.course_shapes'), a per-shape listing and each graded problem's flags.
   Printed, and written to $OUT (default .gpu-out/):
   fidelity.md (section for BENCHMARKS.md), fidelity.json (raw results, rewritten after every
   result, so a run cut short keeps what it had), fidelity-logs/ (test output tails, failed
   build logs).

--harness-only / --grader-only split the work over two device calls; --render merges their
fidelity.json files into one table afterwards (no GPU needed).
"""
from __future__ import annotations
import __future__

import argparse
import ast
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import fidelity_report as report  # noqa: E402
from benchmarks_md import current_commit  # noqa: E402

from worker.build import Toolchain, build_kernels, cuda_include_dirs, nvcc_version  # noqa: E402
from worker.rubric import Rubric, load_rubric  # noqa: E402
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip  # noqa: E402

# The course's compile_cuda.sh flags; -arch is added from --arch.
COURSE_NVCC_FLAGS = ("--shared", "-Xcompiler", "-fPIC")
OVERLAID = ("src", "minitorch")  # what a submission contributes to the harness tree
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".git")
LOG_TAIL_BYTES = 16 * 1024
GRADE_ESTIMATE_S = 90.0  # before the first grade has been timed, for --budget
MIN_TEST_S = 30.0  # --budget: a course test is not started with less time than this left
# The settings' unpack defaults, used only when a harness-only run cannot read the settings
FALLBACK_LIMITS = UnpackLimits(200 << 20, 50 << 20, 5000, 24, 100.0)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- results on disk


class ResultStore:
    """The results so far, rewritten to `path` (atomically) after every change."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {"meta": meta, "harness": {}, "grader": {}}
        self._lock = threading.Lock()
        self.write()

    def update(self, change: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            change(self.data)
            self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def save_tail(path: Path, text: str, limit: int = LOG_TAIL_BYTES) -> None:
    data = text.encode(errors="replace")
    if len(data) > limit:
        data = b"[... cut ...]\n" + data[-limit:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# --------------------------------------------------------------------------- the course harness


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
                    gc_off: bool = False) -> tuple[report.CourseVerdict, str]:
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
            verdict = report.CourseVerdict("crash", f"cannot start {python}: {exc}", expected=expected)
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
    verdict = report.parse_harness_output(output, returncode, timed_out, expected, timeout_s,
                                          round(time.monotonic() - started, 1))
    return verdict, output


def harness_env(args: argparse.Namespace) -> dict[str, str]:
    """--harness-env KEY=VALUE ... as a dict."""
    pairs = [item.partition("=") for item in args.harness_env]
    if bad := [k for k, sep, _ in pairs if not sep or not k]:
        raise SystemExit(f"--harness-env wants KEY=VALUE, got {bad}")
    return {k: v for k, _, v in pairs}


def repeat_course_test(verdict: report.CourseVerdict, tree: Path, test: str, args: argparse.Namespace,
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
    tests = list(report.COURSE_TESTS)
    for test in tests:
        if not (official / "kernel_tests" / f"{test}.py").is_file():
            raise SystemExit(f"the official starter at {official} has no kernel_tests/{test}.py")
    expected = {t: report.expected_cases((official / "kernel_tests" / f"{t}.py").read_text()) for t in tests}
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

    def one(name: str, test: str) -> tuple[str, str, report.CourseVerdict]:
        record = prepared[name]
        failed = {n: b["first_error"] or "did not build" for n, b in record["builds"].items() if not b["ok"]}
        blocked = report.build_failed(test, failed)
        if blocked is not None:
            blocked.expected = expected[test]
            return name, test, blocked
        timeout = args.timeout
        if deadline is not None:  # no test runs past the budget: the last ones get less time
            left = deadline - time.monotonic()
            if left < MIN_TEST_S:
                return name, test, report.CourseVerdict("not run", "skipped: --budget used up", expected=expected[test])
            timeout = min(timeout, left)
        verdict, output = run_course_test(Path(record["tree"]), test, args.python, timeout, expected[test],
                                          work / name / "logs" / f"{test}.log", harness_env(args),
                                          args.harness_gc == "off")
        verdict = report.blame_build(verdict, output, failed)
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
            speed = report.course_speed(verdict)
            mean = f"; course mean {speed.mean:.2f}x over {speed.runs} of {verdict.runs} runs" if speed else ""
            log(f"harness {name} {test}: {report.course_cell(verdict)}; speedups "
                f"{report.speedup_summary(verdict.speedups)}{took}{mean}")


# --------------------------------------------------------------------------- production configuration

# grader.runs.engine_config builds the PipelineConfig and the GPU stage's config from
# grader.settings.Settings. On the bare GPU machine pydantic (for Settings) may not be installed,
# nor what engine_config's imports need; the fallbacks read the same definitions from their source
# files.


def _field_default(default: Any = None, default_factory: Callable[[], Any] | None = None, **_: Any) -> Any:
    return default_factory() if default_factory is not None else default


def _alias(default_expr: ast.expr | None) -> str | None:
    """The `alias=` of a `Field(...)` default: pydantic reads the variable by it (KG_SMTP_FROM)."""
    call = default_expr
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Field":
        return next((kw.value.value for kw in call.keywords
                     if kw.arg == "alias" and isinstance(kw.value, ast.Constant)), None)
    return None


def _coerce(text: str, annotation: str, default: Any) -> Any:
    """An environment value as pydantic would read it for these simple annotations."""
    optional = "None" in annotation
    if optional and text.strip().lower() in ("null", "none"):
        return None
    if "bool" in annotation or isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if annotation.startswith("int") or (isinstance(default, int) and not isinstance(default, bool)):
        return None if optional and not text.strip() else int(text)
    if annotation.startswith("float") or isinstance(default, float):
        return None if optional and not text.strip() else float(text)
    if "Path" in annotation:
        return Path(text)
    return text


def settings_from_source(source: Path, data_dir: Path, environ: dict[str, str]) -> types.SimpleNamespace:
    """Settings' declared defaults read from grader/settings.py (with KG_<FIELD> overrides from
    `environ`), for a machine without pydantic. A group (a field whose default calls a model
    class of the file, as `build: BuildSettings = BuildSettings(cpu_s=300, ...)`) is a namespace
    of that class's fields (its bases' too) with the call's arguments over their defaults and
    KG_<GROUP>_<FIELD> (the field's alias in place of its name where it has one) over both.
    Fields whose default is not a plain expression are left out; data_dir is `data_dir` and
    build_cache_dir under it."""
    tree = ast.parse(source.read_text())
    scope: dict[str, Any] = {"Path": Path, "Field": _field_default, "__builtins__": {}}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            try:
                value = eval(compile(ast.Expression(node.value), str(source), "eval"), scope)
            except Exception:
                continue
            for t in node.targets:
                scope[t.id] = value  # module constants such as MiB
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
    if "Settings" not in classes:
        raise SystemExit(f"{source} has no class Settings: update bench/fidelity.py")

    def evaluate(expr: ast.expr) -> Any:
        return eval(compile(ast.Expression(expr), str(source), "eval"), scope)

    def fields(name: str, given: dict[str, Any], prefix: str) -> dict[str, Any]:
        node = classes[name]
        values: dict[str, Any] = {}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                values.update(fields(base.id, given, prefix))
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            field, default_expr = item.target.id, item.value
            if (isinstance(default_expr, ast.Call) and isinstance(default_expr.func, ast.Name)
                    and default_expr.func.id in classes):  # a group
                args = {kw.arg: evaluate(kw.value) for kw in default_expr.keywords if kw.arg}
                values[field] = types.SimpleNamespace(**fields(default_expr.func.id, args, f"{prefix}{field}_"))
                continue
            if field in given:
                default = given[field]
            elif default_expr is None:
                continue
            else:
                try:
                    default = evaluate(default_expr)
                except Exception:
                    continue
            variable = f"{prefix}{_alias(default_expr) or field}".upper()
            env = next((v for k, v in environ.items() if k.upper() == variable), None)
            values[field] = default if env is None else _coerce(env, ast.unparse(item.annotation), default)
        return values

    values = fields("Settings", {}, "KG_")
    values["data_dir"] = data_dir
    values["build_cache_dir"] = data_dir / "build-cache"
    return types.SimpleNamespace(**values)


def functions_from_source(source: Path, names: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """The module-level functions `names` of `source`, compiled in a namespace holding the
    names its own imports provide (imports that fail here are skipped) and every other
    function of the file (which they may call): the production code itself, without the
    imports this machine lacks."""
    tree = ast.parse(source.read_text())
    namespace: dict[str, Any] = {"__name__": f"fidelity_copy_of_{source.stem}"}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            try:
                exec(compile(ast.Module([node], []), str(source), "exec"), namespace)
            except Exception:  # ImportError, or a package present in an unusable version
                continue
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    missing = set(names) - {n.name for n in functions}
    if missing:
        raise SystemExit(f"{source} has no function(s) {sorted(missing)}: update bench/fidelity.py")
    code = compile(ast.Module(functions, []), str(source), "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return {n: namespace[n] for n in names}


def production_settings(data_dir: Path) -> tuple[Any, str]:
    try:
        from grader.settings import Settings
    except Exception:  # no pydantic (the bare GPU machine)
        return (settings_from_source(ROOT / "grader" / "settings.py", data_dir, dict(os.environ)),
                "grader/settings.py defaults + KG_* (no pydantic here)")
    return Settings(data_dir=data_dir), "grader.settings.Settings"


def production_builders() -> tuple[Callable[..., Any], Callable[..., Any], str]:
    try:
        from grader.runs.engine_config import gpu_stage_config, pipeline_config
    except Exception:  # an import this machine lacks (the bare GPU machine)
        found = functions_from_source(ROOT / "grader" / "runs" / "engine_config.py",
                                      ("pipeline_config", "build_policy", "gpu_stage_config"))
        return found["pipeline_config"], found["gpu_stage_config"], "grader/runs/engine_config.py functions"
    return pipeline_config, gpu_stage_config, "grader.runs.engine_config"


def _no_empty_user(policy: Any) -> Any:
    """KG_SANDBOX_USER="" (tests/gpu/suite.sh, when 'nobody' cannot use the GPU) means no uid
    drop, as the GPU tests read it."""
    return replace(policy, user=None) if policy.user == "" else policy


def production_configs(rubric: Rubric, data_dir: Path, problems: tuple[str, ...]) -> tuple[Any, Any, str]:
    settings, settings_source = production_settings(data_dir)
    pipeline_config, gpu_stage_config, builders_source = production_builders()
    config = pipeline_config(settings, rubric)
    config = replace(config, build_policy=_no_empty_user(config.build_policy))
    from worker.hw4.grade import GpuStageConfig  # the settings' StageConfig with hw4's own knobs

    stage = GpuStageConfig.of(gpu_stage_config(settings))
    stage = replace(stage, policy=_no_empty_user(stage.policy), problems=problems)
    return config, stage, f"{settings_source} through {builders_source}"


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
            "speedup_student": m.speedup_student.describe() if m is not None and m.speedup_student else None,
            "speedup_reference_ops": (m.speedup_reference_ops.describe()
                                      if m is not None and m.speedup_reference_ops else None),
            "speedup_trusted": m.speedup_trusted.describe() if m is not None and m.speedup_trusted else None,
            # the figure that scored, as a number, and the timing's own record (per shape)
            "scored_figure": ((p.details or {}).get("score") or {}).get("figure"),
            "scored_speedup": (((p.details or {}).get("score") or {}).get("speedup") or {}).get("speedup"),
            "flags": ((p.details or {}).get("score") or {}).get("flags", []),
            "timing": {k: m.telemetry.get(k) for k in ("timing_shapes", "timing_evidence", "timing_dropped", "seconds")}
            if m is not None else {},
            "log_tail": m.log_tail[-1500:] if m is not None and m.status != "ok" else "",
            # for diagnosis: every failed case (bounded) and the score's reasons
            "failed_cases": [c.describe() for c in m.failed_cases][:30] if m is not None else [],
            "reasons": ((p.details or {}).get("score") or {}).get("reasons", []),
        }
    return {"state": outcome.state.value, "error_class": outcome.error_class.value if outcome.error_class else None,
            "message": outcome.message, "score": outcome.score, "seconds": round(seconds, 1),
            "stages": {name: {"status": rec.status, "seconds": round(rec.seconds, 1)} for name, rec in outcome.stages.items()},
            "problems": problems, "error": None}


def run_grader(zips: list[Path], work: Path, store: ResultStore, args: argparse.Namespace, rubric: Rubric,
               config: Any, stage_config: Any, deadline: float | None) -> None:
    from worker.hw4.grade import run_gpu_stage
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
            return run_gpu_stage(r, staged, reference, work_dir, chosen, problem_cb)

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


def gpu_description() -> str:
    if shutil.which("nvidia-smi") is None:
        return "no GPU (no nvidia-smi)"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown GPU"
    first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if not first:
        return "no GPU (nvidia-smi found none)"
    name, _, driver = first.partition(",")
    return f"{name.strip()} (driver {driver.strip()})" if driver else name.strip()


def safe_commit() -> str:
    """benchmarks_md.current_commit, or "" where git is missing (a copy of the tree without it)."""
    try:
        return current_commit()
    except OSError:
        return ""


def command_line(argv: list[str]) -> str:
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(ROOT)
    except ValueError:
        pass
    return shlex.join(["python3", script.as_posix(), *argv[1:]])


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
