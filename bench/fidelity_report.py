"""The pure half of bench/fidelity.py: read what the course's harness printed, compare it
with kernelgrade's verdict, and render the table (text and markdown) and merged results.

Standard library and numpy only (worker.measurements), so the unit tests (and a merge of GPU calls' JSON on a CPU
machine) need neither torch nor a GPU.

The course harness (kernel_tests/test_*.py with test_utils.py's TestDecorator) prints, per
case, a `>>>>...<name>, ntest [i], dtype [...]:` header, then `Run baseline...`,
`Run custom...`, `Compare the results of custom and baseline...` and, when the case passes,
`Test passed. Time of custom/baseline (ms): C / B, speedup: S`. On a mismatch it prints
`torch.allclose failed, ...` and details, then calls exit(0): a failing kernel exits with
status 0, so verdicts are read from the printed text, never from the exit status alone.
Before each case it prints the case's shape, `(batch_size, nhead, from_len, to_len): (1, 8, 115, 282)`
(parse_shapes keeps the leading integers). The course speedup of a test file run several times
(course_speed) is the mean over runs of each run's mean of its printed per-case speedups;
speed_rows sets it beside kernelgrade's scored figure.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from worker.hw4.course_shapes import course_shapes
from worker.measurements import salient_lines

# Course test file -> the rubric problem it checks. Problem 3 has no course kernel test.
COURSE_TESTS: dict[str, str] = {
    "test_softmax_fw": "1.1",
    "test_softmax_bw": "1.2",
    "test_layernorm_fw": "2.1",
    "test_layernorm_bw": "2.2",
}
# The shared libraries each test cannot run without (combine.so: every MiniTorch CUDA op).
TEST_NEEDS: dict[str, tuple[str, ...]] = {
    "test_softmax_fw": ("combine", "softmax_kernel"),
    "test_softmax_bw": ("combine", "softmax_kernel"),
    "test_layernorm_fw": ("combine", "layernorm_kernel"),
    "test_layernorm_bw": ("combine", "layernorm_kernel"),
}
DEFAULT_CASES = 5  # every course kernel test is declared with ntest=5

PASSED_RE = re.compile(
    r"Test passed\. Time of custom/baseline \(ms\):\s*(?P<custom>[-+0-9.eE]+|nan|inf)\s*/\s*"
    r"(?P<baseline>[-+0-9.eE]+|nan|inf),\s*speedup:\s*(?P<speedup>[-+0-9.eE]+|nan|inf)"
)
# The shape line each case prints first: `(batch_size, nhead, from_len, to_len): (1, 8, 115, 282)`.
SHAPE_RE = re.compile(r"^\((?P<names>[A-Za-z_]\w*(?:,\s*[A-Za-z_]\w*)*)\):\s*\((?P<values>[^()]*)\)\s*$", re.M)
CASE_RE = re.compile(r"^>{5,}\s*(?P<name>\w+), ntest \[(?P<index>\d+)\]", re.M)
ALLCLOSE = "torch.allclose failed"
TRACEBACK = "Traceback (most recent call last)"
UNMATCHED_TENSOR_RE = re.compile(r"Unmatches in the (\d+)-th tensor")
NOT_IMPLEMENTED_RE = re.compile(r"NotImplementedError|Not implemented")
EXCEPTION_LINE_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b.*$")
PHASES = (("Run baseline...", "in the baseline's repeat runs"),
          ("Run custom...", "custom differs from its own first run"),
          ("Compare the results of custom and baseline...", "custom vs baseline"))
REASON_CHARS = 160

VERDICTS = ("pass", "fail", "crash", "not implemented", "build failed", "not run")


@dataclass
class CourseVerdict:
    """One course test file's result, as read from its output."""

    verdict: str  # one of VERDICTS
    reason: str = ""
    passes: int = 0
    expected: int = DEFAULT_CASES
    cases_started: int = 0
    speedups: list[float] = field(default_factory=list)
    custom_ms: list[float] = field(default_factory=list)
    baseline_ms: list[float] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    seconds: float | None = None
    shapes: list[list[int]] = field(default_factory=list)  # per case, from the first run's shape lines
    repeat_speedups: list[list[float]] = field(default_factory=list)  # per run that passed every case
    runs: int = 0  # how many times the test file was run (0: a record from before --repeat)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CourseVerdict:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def parse_shapes(output: str) -> list[list[int]]:
    """The leading integers of every printed shape line, in order (one line per case):
    `(batch_size, nhead, from_len, to_len, is_dec_self_attn, ...): (1, 8, 115, 282, False, ...)`
    gives [1, 8, 115, 282]."""
    shapes = []
    for m in SHAPE_RE.finditer(output):
        ints: list[int] = []
        for item in m.group("values").split(","):
            item = item.strip()
            if not re.fullmatch(r"[-+]?\d+", item):
                break
            ints.append(int(item))
        shapes.append(ints)
    return shapes


def expected_cases(test_source: str) -> int:
    """The `ntest=` of the test's `@kt.case(...)` declaration (the course's own count)."""
    found = re.search(r"@kt\.case\([^)]*\bntest\s*=\s*(\d+)", test_source)
    return int(found.group(1)) if found else DEFAULT_CASES


def _short(text: str, limit: int = REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _exception_line(output: str) -> str:
    """The exception a traceback ended with (`ModuleNotFoundError: No module named 'torch'`)."""
    tail = output[output.rfind(TRACEBACK):] if TRACEBACK in output else output
    found = [ln.strip() for ln in tail.splitlines() if EXCEPTION_LINE_RE.match(ln.strip())]
    return found[-1] if found else ""


def _last_line(output: str) -> str:
    """The last line that names the error (PyCUDA's exit notice after a crash does not)."""
    lines = salient_lines(output, 1)
    return lines[-1] if lines else ""


def _failure_reason(output: str) -> str:
    """Where the first allclose failure happened: its case and phase, and the tensor index."""
    at = output.find(ALLCLOSE)
    before = output[:at]
    cases = list(CASE_RE.finditer(before))
    case = f"case {int(cases[-1].group('index')) + 1}" if cases else "a case"
    phase = ""
    positions = [(before.rfind(marker), words) for marker, words in PHASES]
    pos, words = max(positions)
    if pos >= 0:
        phase = f" ({words})"
    tensor = UNMATCHED_TENSOR_RE.search(output, at)
    which = f", tensor {tensor.group(1)}" if tensor else ""
    return f"torch.allclose failed in {case}{phase}{which}"


def parse_harness_output(output: str, returncode: int | None, timed_out: bool = False,
                         expected: int = DEFAULT_CASES, timeout_s: float | None = None,
                         seconds: float | None = None) -> CourseVerdict:
    """The verdict of one course test file from its combined stdout+stderr and exit status
    (None: it did not exit, e.g. killed at the timeout).

    fail: an allclose failure was printed (whatever the exit status: the harness exits 0);
    pass: `expected` "Test passed" lines, exit status 0, no traceback, not timed out;
    not implemented: the starter's NotImplementedError / "Not implemented" stopped it;
    crash: anything else (a traceback, a non-zero exit, a timeout, too few passes)."""
    matches = list(PASSED_RE.finditer(output))
    result = CourseVerdict(
        verdict="crash",
        passes=len(matches),
        expected=expected,
        cases_started=len(CASE_RE.findall(output)),
        speedups=[_float(m.group("speedup")) for m in matches],
        custom_ms=[_float(m.group("custom")) for m in matches],
        baseline_ms=[_float(m.group("baseline")) for m in matches],
        returncode=returncode,
        timed_out=timed_out,
        seconds=seconds,
        shapes=parse_shapes(output),
    )
    progress = f"{result.passes}/{expected} passed"
    if ALLCLOSE in output:
        result.verdict = "fail"
        result.reason = _short(f"{_failure_reason(output)}; {progress} before it"
                               + ("; exit status 0" if returncode == 0 else ""))
        return result
    has_traceback = TRACEBACK in output
    if not timed_out and returncode == 0 and not has_traceback and result.passes >= expected:
        result.verdict = "pass"
        return result
    if not timed_out and NOT_IMPLEMENTED_RE.search(output):
        result.verdict = "not implemented"
        result.reason = _short(_exception_line(output) or "Not implemented")
        return result
    if timed_out:
        limit = f" after {timeout_s:.0f} s" if timeout_s is not None else ""
        result.reason = f"timed out{limit} ({progress})"
    elif has_traceback:
        result.reason = _short(f"{_exception_line(output) or _last_line(output)} ({progress})")
    elif returncode is not None and returncode < 0:
        result.reason = _short(f"killed by signal {-returncode} ({progress}); last output: {_last_line(output)}")
    elif returncode not in (0, None):
        result.reason = _short(f"exit status {returncode} ({progress}); last output: {_last_line(output)}")
    else:
        result.reason = _short(f"exit status {returncode} with only {progress}; last output: {_last_line(output)}")
    return result


def build_failed(test: str, failed: dict[str, str]) -> CourseVerdict | None:
    """`build failed` when a library the test needs did not build (`failed`: name -> first
    error line), else None (the test is run)."""
    missing = [name for name in TEST_NEEDS[test] if name in failed]
    if not missing:
        return None
    reason = "; ".join(f"{name}.so: {failed[name]}" for name in missing)
    return CourseVerdict(verdict="build failed", reason=_short(reason), passes=0)


def blame_build(verdict: CourseVerdict, output: str, failed: dict[str, str]) -> CourseVerdict:
    """A test that crashed while loading a library that failed to build (the student's
    MiniTorch loads every .so at import) is a build failure, not a crash of its own."""
    if verdict.verdict not in ("crash", "not implemented"):
        return verdict
    blamed = [name for name in failed if f"{name}.so" in output]
    if blamed:
        verdict.verdict = "build failed"
        verdict.reason = _short("; ".join(f"{name}.so: {failed[name]}" for name in blamed))
    return verdict


def speedup_summary(values: Iterable[float]) -> str:
    """`10.6x (10.1-11.2)`: median and range of the printed speedups; `-` when none."""
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return f"{med:.2f}x"
    return f"{med:.2f}x ({min(vals):.2f}-{max(vals):.2f})"


def course_cell(v: CourseVerdict | None) -> str:
    if v is None:
        return "not run"
    if v.verdict == "pass":
        return f"pass {v.passes}/{v.expected}"
    if v.verdict == "build failed":
        return f"build failed: {v.reason}"
    return f"{v.verdict}: {v.reason}" if v.reason else v.verdict


def kernelgrade_passed(record: dict[str, Any] | None) -> bool | None:
    """Did kernelgrade find the problem correct (every case passed)? None: not graded."""
    if record is None or record.get("graded") is False:  # built, but no GPU stage measured it
        return None
    return record.get("status") == "passed"


def kernelgrade_cell(record: dict[str, Any] | None) -> str:
    if record is None:
        return "not graded"
    if record.get("graded") is False:
        why = str(record.get("message") or "")
        return why if why.startswith("not graded") else f"not graded: {why}" if why else "not graded"
    status = record.get("status", "?")
    if status == "passed":
        return "pass"
    detail = record.get("first_failure") or record.get("message") or ""
    word = {"failed": "fail", "not_run": "not run"}.get(status, status)
    return f"{word}: {_short(detail, 120)}" if detail else word


def agreement(problem: str, course: CourseVerdict | None, kernelgrade: dict[str, Any] | None) -> str:
    """agree when both pass or both do not; `course n/a` for Problem 3 (no course test)."""
    if problem not in COURSE_TESTS.values():
        return "course n/a"
    if course is None or course.verdict == "not run":
        return "no course run"
    kg = kernelgrade_passed(kernelgrade)
    if kg is None:
        return "no grade"
    course_pass = course.verdict == "pass"
    if course_pass == kg:
        return "agree (both pass)" if kg else "agree (both fail)"
    return "DISAGREE (course pass, kernelgrade fail)" if course_pass else "DISAGREE (course fail, kernelgrade pass)"


def _points(record: dict[str, Any] | None) -> str:
    if record is None or record.get("points") is None or record.get("graded") is False:
        return "-"
    return f"{round(float(record['points']), 2):g}/{float(record['max_points']):g}"


def _kg_speedups(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    own, ref = record.get("speedup_student"), record.get("speedup_trusted")
    if not own and not ref:
        return "-"
    return f"{own or '-'} own; {ref or '-'} ref"


def table_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """One row per submission and problem from merged results
    ({"harness": {zip: {"tests": {test: verdict dict}}}, "grader": {zip: {"problems": {pid: record}}}})."""
    harness = results.get("harness", {})
    grader = results.get("grader", {})
    course_tests = {pid: test for test, pid in COURSE_TESTS.items()}
    rows = []
    for name in sorted(set(harness) | set(grader)):
        h, g = harness.get(name, {}), grader.get(name, {})
        problems = list(COURSE_TESTS.values())
        for pid in (g.get("problems") or {}):
            if pid not in problems:
                problems.append(pid)
        for pid in problems:
            test = course_tests.get(pid)
            raw = (h.get("tests") or {}).get(test) if test else None
            if test and raw is None and h.get("error"):
                raw = {"verdict": "not run", "reason": h["error"]}
            course = CourseVerdict.from_dict(raw) if raw else None
            record = (g.get("problems") or {}).get(pid)
            if record is None and g.get("error"):  # the bench could not grade it: no verdict
                record = {"status": "error", "message": g["error"], "graded": False}
            rows.append({
                "submission": name,
                "problem": pid,
                "course": "n/a (no course test)" if test is None else course_cell(course),
                "course_speedup": speedup_summary(course.speedups) if course else "-",
                "kernelgrade": kernelgrade_cell(record),
                "kg_speedup": _kg_speedups(record),
                "points": _points(record),
                "agreement": agreement(pid, course, record),
            })
    return rows


COLUMNS = (("submission", "submission"), ("problem", "problem"), ("course", "course harness"),
           ("course_speedup", "course speedup, median (min-max)"), ("kernelgrade", "kernelgrade"),
           ("kg_speedup", "kernelgrade speedup"), ("points", "points"), ("agreement", "agreement"))


def render_text(rows: list[dict[str, str]], width: int = 48) -> str:
    """An aligned plain-text table; long cells cut to `width` characters."""
    return _text_table(rows, COLUMNS, width)


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(rows: list[dict[str, str]], header: list[str]) -> str:
    """The section for BENCHMARKS.md: `header` lines, then the table."""
    lines = [*header, "", "| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(_md_cell(r[key]) for key, _ in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def summary_counts(rows: list[dict[str, str]]) -> dict[str, int]:
    counts = {"agree": 0, "disagree": 0, "not compared": 0}
    for r in rows:
        a = r["agreement"]
        counts["agree" if a.startswith("agree") else "disagree" if a.startswith("DISAGREE") else "not compared"] += 1
    return counts


def merge_results(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Results of several runs (a harness-only and a grader-only call, grades of different
    problems) as one: per submission the later part's harness half wins, and its graded
    problems replace the same problems of earlier parts (others are kept); each part's meta
    is kept."""
    merged: dict[str, Any] = {"meta": [], "harness": {}, "grader": {}}
    for part in parts:
        meta = part.get("meta")
        if isinstance(meta, list):
            merged["meta"].extend(meta)
        elif meta:
            merged["meta"].append(meta)
        merged["harness"].update(part.get("harness") or {})
        for name, record in (part.get("grader") or {}).items():
            earlier = merged["grader"].get(name) or {}
            if earlier.get("problems") and record.get("problems"):
                record = {**record, "problems": {**earlier["problems"], **record["problems"]}}
            merged["grader"][name] = record
    return merged


# --------------------------------------------------------------------------- speed fidelity

WITHIN = 0.15  # kernelgrade's scored figure "agrees" with the course mean within this fraction
# scored_figure -> the key of a timing_shapes entry's "speedups" that figure is the mean of
FIGURE_SHAPE_KEY = {"reference_ops": "reference_ops", "student": "baseline"}


@dataclass
class CourseSpeed:
    """The course harness's speedup for one test file over its repeated runs."""

    mean: float  # mean over runs of each run's mean of its printed per-case speedups
    run_means: list[float]
    per_case: list[float]  # per case, the mean over the runs that printed that case
    runs: int
    # per case, the median over the runs: a run whose composition hit a one-off stall (a
    # 30 ms call among 10 ms ones) moves the mean of a handful of runs, not this
    per_case_median: list[float] = field(default_factory=list)

    @property
    def robust(self) -> float:
        """The mean over cases of each case's median over the runs."""
        return statistics.fmean(self.per_case_median)

    @property
    def low(self) -> float:
        return min(self.run_means)

    @property
    def high(self) -> float:
        return max(self.run_means)


def _finite(values: Iterable[float]) -> bool:
    return all(v == v and v not in (float("inf"), float("-inf")) for v in values)


def course_runs(v: CourseVerdict) -> list[list[float]]:
    """The per-case speedups of every run that passed; a record from before --repeat (no
    repeat_speedups) gives its one passing run."""
    if v.repeat_speedups:
        return [list(r) for r in v.repeat_speedups if r]
    return [list(v.speedups)] if v.verdict == "pass" and v.speedups else []


def course_speed(v: CourseVerdict | None) -> CourseSpeed | None:
    """The course figure: the mean over runs of the per-run mean of the printed per-case
    speedups (runs with a NaN or infinite speedup are left out); None with no such run."""
    if v is None or v.verdict != "pass":
        return None
    runs = [r for r in course_runs(v) if _finite(r)]
    if not runs:
        return None
    run_means = [statistics.fmean(r) for r in runs]
    width = max(len(r) for r in runs)
    per_case = [statistics.fmean(r[i] for r in runs if i < len(r)) for i in range(width)]
    medians = [statistics.median(r[i] for r in runs if i < len(r)) for i in range(width)]
    return CourseSpeed(statistics.fmean(run_means), run_means, per_case, len(runs), medians)


def shapes_match(problem: str, printed: list[list[int]]) -> str:
    """yes / no: the course's printed shapes are kernelgrade's timing shapes
    (worker.hw4.course_shapes); `-` when the record has none (before shapes were kept)."""
    if not printed:
        return "-"
    try:
        ours = [list(s) for s in course_shapes(problem)]
    except ValueError:
        return "-"
    return "yes" if [list(s) for s in printed] == ours else "no"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _scored(record: dict[str, Any]) -> float | None:
    value = record.get("scored_speedup")
    return float(value) if isinstance(value, (int, float)) and value == value else None


Pair = tuple[str, str, "CourseVerdict | None", "dict[str, Any] | None"]


def _course_problem_pairs(results: dict[str, Any]) -> list[Pair]:
    """(submission, problem, course verdict, kernelgrade record) for every course-tested problem."""
    harness, grader = results.get("harness", {}), results.get("grader", {})
    pairs = []
    for name in sorted(set(harness) | set(grader)):
        tests = (harness.get(name) or {}).get("tests") or {}
        problems = (grader.get(name) or {}).get("problems") or {}
        for test, pid in COURSE_TESTS.items():
            raw = tests.get(test)
            pairs.append((name, pid, CourseVerdict.from_dict(raw) if raw else None, problems.get(pid)))
    return pairs


def speed_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """The speed fidelity table: one row per submission and problem where both the course
    (a passing run) and kernelgrade (a scored speedup) have a figure."""
    rows = []
    for name, pid, course, record in _course_problem_pairs(results):
        speed = course_speed(course)
        scored = _scored(record) if record else None
        if speed is None or scored is None or record is None or course is None:
            continue
        ratio = scored / speed.mean if speed.mean else None
        runs = f"{speed.runs} run{'s' if speed.runs != 1 else ''}"
        rows.append({
            "submission": name,
            "problem": pid,
            "course_mean": f"{speed.mean:.2f}x ({runs}, {speed.low:.2f}-{speed.high:.2f})",
            "kg_scored": f"{scored:.2f}x ({record.get('scored_figure') or '?'})",
            "kg_own_ops": record.get("speedup_student") or "-",
            "kg_our_ops": record.get("speedup_reference_ops") or "-",
            "kg_kit": record.get("speedup_trusted") or "-",
            "ratio": "-" if ratio is None else f"{ratio:.3f}",
            "within": "-" if ratio is None else ("yes" if abs(ratio - 1) <= WITHIN else "no"),
            "course_robust": f"{speed.robust:.2f}x ({scored / speed.robust:.3f})" if speed.robust else "-",
            "shapes": shapes_match(pid, course.shapes),
        })
    return rows


SPEED_COLUMNS = (("submission", "submission"), ("problem", "problem"),
                 ("course_mean", "course mean (runs, min-max of run means)"),
                 ("kg_scored", "kernelgrade scored (figure)"), ("kg_own_ops", "kernelgrade vs its own ops"),
                 ("kg_our_ops", "kernelgrade vs our ops"), ("kg_kit", "kit figure"),
                 ("ratio", "scored / course"), ("within", f"within {WITHIN:.0%}"),
                 ("course_robust", "course per-case medians over runs, mean (scored / that)"), ("shapes", "shapes"))


def _shape_speedup(entry: dict[str, Any], figure: str | None) -> tuple[float | None, str]:
    """A timing_shapes entry's speedup of the scored figure (reference_ops, else baseline)."""
    speedups = entry.get("speedups") or {}
    keys = [FIGURE_SHAPE_KEY[figure]] if figure in FIGURE_SHAPE_KEY else []
    for key in [*keys, "reference_ops", "baseline"]:
        value = speedups.get(key)
        if isinstance(value, (int, float)):
            return float(value), key
    return None, "-"


def shape_lines(results: dict[str, Any]) -> list[str]:
    """Per shape: the course's per-case mean over runs beside kernelgrade's per-shape speedup."""
    lines = []
    for name, pid, course, record in _course_problem_pairs(results):
        speed = course_speed(course)
        shapes = ((record or {}).get("timing") or {}).get("timing_shapes") or []
        if speed is None or not shapes or course is None or record is None:
            continue
        lines.append(f"- {name} {pid}:")
        for i in range(max(len(speed.per_case), len(shapes))):
            printed = course.shapes[i] if i < len(course.shapes) else None
            entry = shapes[i] if i < len(shapes) else {}
            value, key = _shape_speedup(entry, record.get("scored_figure"))
            ours = entry.get("shape")
            where = f"course {tuple(printed) if printed else '?'}"
            if ours is not None and list(ours) != (printed or []):
                where += f" / kernelgrade {tuple(ours)}"
            c = speed.per_case[i] if i < len(speed.per_case) else None
            lines.append(f"  - case {i + 1} {where}: course {_x(c)}, kernelgrade {_x(value)} ({key})")
    return lines


def _seconds_text(seconds: Any) -> str:
    if not isinstance(seconds, dict) or not seconds:
        return "-"
    return ", ".join(f"{k} {v:g} s" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in seconds.items())


def flag_lines(results: dict[str, Any]) -> list[str]:
    """A line per graded problem: its score's flags (if any) and the timing's phase seconds."""
    lines = []
    for name, g in sorted((results.get("grader") or {}).items()):
        for pid, record in sorted(((g or {}).get("problems") or {}).items()):
            if record.get("graded") is False:
                continue
            flags = record.get("flags") or []
            seconds = _seconds_text((record.get("timing") or {}).get("seconds"))
            lines.append(f"- {name} {pid}: flags {'; '.join(flags) if flags else 'none'}; timing seconds: {seconds}")
    return lines


def render_speed_text(rows: list[dict[str, str]], width: int = 48) -> str:
    return _text_table(rows, SPEED_COLUMNS, width)


def render_speed_markdown(rows: list[dict[str, str]]) -> str:
    return _md_table(rows, SPEED_COLUMNS)


def _text_table(rows: list[dict[str, str]], columns: tuple[tuple[str, str], ...], width: int) -> str:
    def cut(text: str) -> str:
        return text if len(text) <= width else text[: width - 3] + "..."

    header = [title for _, title in columns]
    body = [[cut(r[key]) for key, _ in columns] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body)] if body else [len(h) for h in header]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in body]
    return "\n".join(lines)


def _md_table(rows: list[dict[str, str]], columns: tuple[tuple[str, str], ...]) -> str:
    lines = ["| " + " | ".join(title for _, title in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_md_cell(r[key]) for key, _ in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"
