"""What the trusted parent measured for one problem: plain dataclasses, JSON via to_dict/from_dict.

The scorer (worker.scoring) turns these into points; nothing here judges anything.
Non-finite floats (a NaN max error, say) are written as the strings "nan", "inf", "-inf" so
the dicts stay strict JSON.

A problem's measurement is stored as it crosses from the engine to the database and the pages
(`ProblemResult.details["measurement"]`) in one versioned schema, MEASUREMENT_SCHEMA:
  2: {"schema": 2, "problem_id", "status", "cases": {route: [case, ...]}, "first_failure",
      "figures": {name: ratio summary}, "kernel_ms", "log_tail", "telemetry"}: cases by the
      route they took and speed figures by name, both named by the assignment (its plug-in's
      worker.assignment.Words says what each means; its rubric which figure scores);
  1 (no "schema" key; runs stored before 2026-12-06, when every assignment used hw4's names):
      the cases and figures as flat keys (`abi_cases`, `speedup_student`, ...; SCHEMA_1_ROUTES,
      SCHEMA_1_FIGURES).
`stored_measurement` reads any of them as the current one: every reader of a stored
measurement goes through it (or through `ProblemMeasurement.from_dict`, which does).

Pure standard library + numpy (through worker.timing): importable on a bare GPU machine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from worker.timing import RatioSummary

STATUSES = ("ok", "timeout", "crashed", "error", "not_run")
MEASUREMENT_SCHEMA = 2
# Schema 1's flat keys of the case routes and speed figures -> their names in schema 2.
SCHEMA_1_ROUTES = {"abi_cases": "abi", "binding_cases": "binding"}
SCHEMA_1_FIGURES = {"speedup_student": "student", "speedup_reference_ops": "reference_ops",
                    "speedup_trusted": "trusted"}
# Where a measurement's telemetry holds the snapshot of the GPU its problem ran on
# (worker.telemetry.gpu_snapshot, with its `name`): `before`, taken before the problem, or
# `gpu_before` for a problem whose telemetry has phases of its own. Every stage that runs on a
# GPU records one; grader/reads/gpu_info.py reads the model from there.
GPU_SNAPSHOT_KEYS = ("before", "gpu_before")
# Where a measurement's telemetry lists what the sandbox's syscall filter refused the
# submission's code in the problem's child (SandboxExit.refused); the scorer notes it.
SANDBOX_REFUSED_KEY = "sandbox_refused"


@dataclass(frozen=True)
class Bandwidth:
    """A kernel's achieved memory bandwidth on one case: the traffic its operation needs (the
    assignment's count) over the kernels' own GPU time. Kept in a measurement's telemetry at
    BANDWIDTH_KEY; grader/reads/bandwidth.py sets it beside the GPU's measured peak."""

    case: str
    shape: tuple[int, ...]
    bytes: int
    kernel_ms: float

    @classmethod
    def of(cls, case: str, shape: tuple[int, ...], size: int, kernel_ms: float | None) -> Bandwidth | None:
        """The figure, or None where the kernel time cannot make one (none, not positive, or
        so small the figure is not a number: the child reports it, so it may be anything)."""
        if kernel_ms is None or not math.isfinite(kernel_ms) or kernel_ms <= 0:
            return None
        made = cls(case, tuple(shape), int(size), float(kernel_ms))
        return made if math.isfinite(made.gb_s) else None

    @property
    def gb_s(self) -> float:
        return self.bytes / (self.kernel_ms * 1e-3) / 1e9

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "shape": list(self.shape), "bytes": self.bytes, "kernel_ms": self.kernel_ms,
                "gb_s": round(self.gb_s, 1)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bandwidth:
        return cls(str(data["case"]), tuple(int(s) for s in data["shape"]), int(data["bytes"]),
                   float(data["kernel_ms"]))


BANDWIDTH_KEY = "bandwidth"
# A timed problem's GPU conditions over its timing windows (worker.gpu_conditions.conditions_summary).
CONDITIONS_KEY = "timing_conditions"
# The GPU's peak copy bandwidth as the stage measured it before its timings
# (worker.gpu.copy_peak.CopyPeak.to_dict, or {"error": why not}).
COPY_PEAK_KEY = "copy_peak"
# In each shape record of a timed kernel problem (telemetry `timing_shapes`): the bytes its fused
# op must move (rubrics.hw4.abi.traffic_bytes), which with its median timed milliseconds
# (`ms` -> `custom`) is the timed call's bandwidth.
FUSED_BYTES_KEY = "fused_bytes"


@dataclass(frozen=True)
class TimedRate:
    """The bandwidth a fused op's timed call achieved on one shape: the bytes the operation must
    move over its median timed milliseconds (the call as the course times it, host work included)."""

    case: str
    shape: tuple[int, ...]
    bytes: int
    ms: float

    @property
    def gb_s(self) -> float:
        return self.bytes / (self.ms * 1e-3) / 1e9


def _positive(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def timed_rates(telemetry: dict[str, Any]) -> list[TimedRate]:
    """Each timed shape's TimedRate, where its record holds the bytes and a positive time
    (stored telemetry is read as it comes: anything else is left out)."""
    rates = []
    for shape in telemetry.get("timing_shapes") or []:
        if not isinstance(shape, dict):
            continue
        size, ms = _positive(shape.get(FUSED_BYTES_KEY)), _positive((shape.get("ms") or {}).get("custom"))
        if size is not None and ms is not None:
            dims = tuple(int(d) for d in shape.get("shape") or () if isinstance(d, int))
            rates.append(TimedRate(str(shape.get("case", "")), dims, int(size), ms))
    return rates


def copy_peak_gb_s(telemetry: dict[str, Any]) -> float | None:
    """The stage's measured peak copy bandwidth (COPY_PEAK_KEY), None where it has none."""
    record = telemetry.get(COPY_PEAK_KEY)
    return _positive(record.get("gb_s")) if isinstance(record, dict) else None

# Lines of a dying child's output that say what went wrong (a CUDA error, an exception, a
# failed assertion), as opposed to the boilerplate printed after them: PyCUDA's "context
# stack was not empty" notice at exit buried "Reduce Error: an illegal memory access".
_TELLING = ("error", "what():", "assert", "exception", "traceback", "illegal", "abort", "fault", "killed")
_BOILERPLATE = ("pycuda error: the context stack", "----------", "a context was still active",
                "cleaned up. at this point", "have been deinitialized", "cleanly. the program",
                "use context.pop()")


def salient_lines(log: str, limit: int = 3) -> list[str]:
    """Up to `limit` lines of `log` worth quoting to a student: the last ones that name an
    error, else the last lines that are not exit boilerplate."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.lower().startswith(_BOILERPLATE)]
    telling = [ln for ln in useful if any(word in ln.lower() for word in _TELLING)]
    return (telling or useful)[-limit:]


def _enc_float(x: float | None) -> float | str | None:
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _strict_json(value: Any) -> Any:
    """`value` with every non-finite float, however deep, written as _enc_float writes it:
    telemetry holds what children report (the submission's code runs there), and a NaN would
    make the whole record unstorable (PostgreSQL's JSON has no NaN)."""
    if isinstance(value, float):
        return _enc_float(value)
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(v) for v in value]
    return value


def _dec_float(x: Any) -> float | None:
    return None if x is None else float(x)  # float("nan") / float("inf") parse the strings


@dataclass(frozen=True)
class CaseOutcome:
    """One correctness case: its shape, verdict, and where the worst error was."""

    case_id: str
    shape: tuple[int, ...]
    ok: bool
    max_err: float | None = None
    where: tuple[int, ...] | None = None
    message: str = ""
    public: bool = True
    # False: the case never ran (a part it needs did not load, the budget ran out, its path
    # crashed too often); it counts as failed, and `message` says why it did not run
    ran: bool = True

    def describe(self) -> str:
        """`failed case sfw-b3h8f33t33-fut: max error 0.42 at [1, 2, 5, 7]`. A hidden case whose
        details the rubric withholds is named by ProblemMeasurement.describe_case instead."""
        kind = "case" if self.public else "hidden case"
        head = f"{'passed' if self.ok else 'failed'} {kind} {self.case_id}"
        parts = []
        if self.shape:
            parts.append(f"shape {list(self.shape)}")
        if self.max_err is not None:
            err = "NaN" if math.isnan(self.max_err) else f"{self.max_err:.3g}"
            parts.append(f"max error {err}" + (f" at {list(self.where)}" if self.where is not None else ""))
        if self.message:
            parts.append(self.message)
        return head + (": " + ", ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "shape": list(self.shape),
            "ok": self.ok,
            "max_err": _enc_float(self.max_err),
            "where": None if self.where is None else list(self.where),
            "message": self.message,
            "public": self.public,
            "ran": self.ran,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseOutcome:
        where = data.get("where")
        return cls(
            case_id=str(data["case_id"]),
            shape=tuple(int(s) for s in data.get("shape", ())),
            ok=bool(data["ok"]),
            max_err=_dec_float(data.get("max_err")),
            where=None if where is None else tuple(int(w) for w in where),
            message=str(data.get("message", "")),
            public=bool(data.get("public", True)),
            ran=bool(data.get("ran", True)),
        )


@dataclass
class ProblemMeasurement:
    """Everything measured for one problem.

    `routes`: its correctness cases by the route they took to the student's code, and `figures`:
    its speed figures (each a speedup over its trials) by name. The assignment names both (e.g.
    hw4: cases through the compiled library, `abi`, or through the student's own code,
    `binding`; its plug-in's Words says each in the student's words) and its rubric says which
    figure scores (worker.rubric.ProblemScoring.speed_figure). A figure not measured is absent.
    """

    problem_id: str
    status: str = "ok"  # ok | timeout | crashed | error | not_run
    routes: dict[str, list[CaseOutcome]] = field(default_factory=dict)
    first_failure: CaseOutcome | None = None
    figures: dict[str, RatioSummary] = field(default_factory=dict)
    kernel_ms: float | None = None  # the kernels' own GPU time per direct call (CUPTI), informational
    log_tail: str = ""
    telemetry: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"problem {self.problem_id}: unknown status {self.status!r}")
        # a figure not measured is absent (a stage may pass what its timing returned, None or not)
        self.figures = {name: f for name, f in self.figures.items() if f is not None}

    def cases_by(self, route: str) -> list[CaseOutcome]:
        """The cases that took `route` (none: an empty list, not stored)."""
        return self.routes.get(route, [])

    def figure(self, name: str) -> RatioSummary | None:
        return self.figures.get(name)

    @property
    def cases(self) -> list[CaseOutcome]:
        return [case for cases in self.routes.values() for case in cases]

    @property
    def failed_cases(self) -> list[CaseOutcome]:
        return [c for c in self.cases if not c.ok]

    @property
    def all_passed(self) -> bool:
        return bool(self.cases) and all(c.ok for c in self.cases)

    def hidden_numbers(self) -> dict[str, int]:
        """Each hidden case's id -> its number, 1, 2, ... in the order of `cases` (the run page
        numbers its case table alike)."""
        numbers: dict[str, int] = {}
        for case in self.cases:
            if not case.public:
                numbers.setdefault(case.case_id, len(numbers) + 1)
        return numbers

    def describe_case(self, case: CaseOutcome, *, hidden_details: bool = True) -> str:
        """`case.describe()`; without `hidden_details` (the rubric's hidden_case_details), a
        hidden case is only its verdict and number, `failed hidden case 3`: its id spells its
        shape."""
        if case.public or hidden_details:
            return case.describe()
        return f"{'passed' if case.ok else 'failed'} hidden case {self.hidden_numbers()[case.case_id]}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": MEASUREMENT_SCHEMA,
            "problem_id": self.problem_id,
            "status": self.status,
            "cases": {route: [c.to_dict() for c in cases] for route, cases in self.routes.items()},
            "first_failure": None if self.first_failure is None else self.first_failure.to_dict(),
            "figures": {name: f.to_dict() for name, f in self.figures.items()},
            "kernel_ms": _enc_float(self.kernel_ms),
            "log_tail": self.log_tail,
            "telemetry": _strict_json(self.telemetry),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemMeasurement:
        """A stored measurement of any schema (`stored_measurement`)."""
        data = stored_measurement(data)
        first = data.get("first_failure")
        return cls(
            problem_id=str(data["problem_id"]),
            status=str(data.get("status", "ok")),
            routes={route: [CaseOutcome.from_dict(c) for c in cases or []]
                    for route, cases in (data.get("cases") or {}).items()},
            first_failure=None if first is None else CaseOutcome.from_dict(first),
            figures={name: RatioSummary.from_dict(f) for name, f in (data.get("figures") or {}).items()
                     if f is not None},
            kernel_ms=_dec_float(data.get("kernel_ms")),
            log_tail=str(data.get("log_tail", "")),
            telemetry=dict(data.get("telemetry") or {}),
        )


def stored_measurement(data: dict[str, Any]) -> dict[str, Any]:
    """A stored measurement (a dict of any schema this code knows) as the current schema's dict;
    ValueError for one stored by a newer kernelgrade than this."""
    schema = data.get("schema", 1)
    if schema == MEASUREMENT_SCHEMA:
        return data
    if schema != 1:
        raise ValueError(f"a measurement of schema {schema!r}: this kernelgrade reads up to {MEASUREMENT_SCHEMA}")
    flat = set(SCHEMA_1_ROUTES) | set(SCHEMA_1_FIGURES)
    upgraded = {k: v for k, v in data.items() if k not in flat}
    upgraded["schema"] = MEASUREMENT_SCHEMA
    upgraded["cases"] = {route: list(data[key] or []) for key, route in SCHEMA_1_ROUTES.items() if key in data}
    upgraded["figures"] = {name: data[key] for key, name in SCHEMA_1_FIGURES.items() if data.get(key) is not None}
    return upgraded
