"""What the course's harness printed, read: each kernel test file's verdict with its cases'
speedups and shapes (CourseVerdict), a build failure blamed on the library a test needs, and
the course's speedup over repeated runs (course_speed). Standard library and numpy only
(worker.measurements), so the unit tests need neither torch nor a GPU.

The course harness (kernel_tests/test_*.py with test_utils.py's TestDecorator) prints, per
case, a `>>>>...<name>, ntest [i], dtype [...]:` header, then `Run baseline...`,
`Run custom...`, `Compare the results of custom and baseline...` and, when the case passes,
`Test passed. Time of custom/baseline (ms): C / B, speedup: S`. On a mismatch it prints
`torch.allclose failed, ...` and details, then calls exit(0): a failing kernel exits with
status 0, so verdicts are read from the printed text, never from the exit status alone.
Before each case it prints the case's shape, `(batch_size, nhead, from_len, to_len): (1, 8, 115, 282)`
(parse_shapes keeps the leading integers). The course speedup of a test file run several times
(course_speed) is the mean over runs of each run's mean of its printed per-case speedups.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

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


def shorten(text: str, limit: int = REASON_CHARS) -> str:
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
        result.reason = shorten(f"{_failure_reason(output)}; {progress} before it"
                               + ("; exit status 0" if returncode == 0 else ""))
        return result
    has_traceback = TRACEBACK in output
    if not timed_out and returncode == 0 and not has_traceback and result.passes >= expected:
        result.verdict = "pass"
        return result
    if not timed_out and NOT_IMPLEMENTED_RE.search(output):
        result.verdict = "not implemented"
        result.reason = shorten(_exception_line(output) or "Not implemented")
        return result
    if timed_out:
        limit = f" after {timeout_s:.0f} s" if timeout_s is not None else ""
        result.reason = f"timed out{limit} ({progress})"
    elif has_traceback:
        result.reason = shorten(f"{_exception_line(output) or _last_line(output)} ({progress})")
    elif returncode is not None and returncode < 0:
        result.reason = shorten(f"killed by signal {-returncode} ({progress}); last output: {_last_line(output)}")
    elif returncode not in (0, None):
        result.reason = shorten(f"exit status {returncode} ({progress}); last output: {_last_line(output)}")
    else:
        result.reason = shorten(f"exit status {returncode} with only {progress}; last output: {_last_line(output)}")
    return result


def build_failed(test: str, failed: dict[str, str]) -> CourseVerdict | None:
    """`build failed` when a library the test needs did not build (`failed`: name -> first
    error line), else None (the test is run)."""
    missing = [name for name in TEST_NEEDS[test] if name in failed]
    if not missing:
        return None
    reason = "; ".join(f"{name}.so: {failed[name]}" for name in missing)
    return CourseVerdict(verdict="build failed", reason=shorten(reason), passes=0)


def blame_build(verdict: CourseVerdict, output: str, failed: dict[str, str]) -> CourseVerdict:
    """A test that crashed while loading a library that failed to build (the student's
    MiniTorch loads every .so at import) is a build failure, not a crash of its own."""
    if verdict.verdict not in ("crash", "not implemented"):
        return verdict
    blamed = [name for name in failed if f"{name}.so" in output]
    if blamed:
        verdict.verdict = "build failed"
        verdict.reason = shorten("; ".join(f"{name}.so: {failed[name]}" for name in blamed))
    return verdict


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
