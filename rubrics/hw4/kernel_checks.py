"""The correctness checks of hw4's kernel problems, run by the trusted parent (one check at a time).

A Check is one rubric case through one path: the C ABI of the built .so (the parent draws the
buffers and the float64 reference, the child calls the launcher, the parent verifies), or the
student's MiniTorch binding, as the course's tests call it. Every failed check says how to
rebuild its inputs (path, case, seed). rubrics.hw4.kernels runs the checks in sandboxed children,
and beside them the kernel profile (`measure_kernel_ms`: the fused kernels' own GPU time).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from rubrics.hw4.abi import abi_output_names
from rubrics.hw4.case_inputs import make_binding_inputs, make_inputs
from rubrics.hw4.cases import MAX_SOFTMAX_LEN, Case
from rubrics.hw4.conventions import open_readings
from rubrics.hw4.hangs import path_calls
from rubrics.hw4.references import binding_reference, reference, verify
from rubrics.hw4.speed import TimingConfig, run_binding
from worker.checks import CheckResult
from worker.gpu.channel import ArrayRef
from worker.gpu.client import ChildClient, ChildFailure, StudentError
from worker.measurements import CaseOutcome, salient_lines

BINDING_KINDS_WITHOUT_MASK_FUTURE = ("softmax_fw",)  # Tensor.attn_softmax(mask) has no mask_future


def case_json(case: Case) -> dict[str, Any]:
    """The case as the child's "case" field (its dataclass fields)."""
    return dataclasses.asdict(case)


@dataclass(frozen=True)
class Check:
    """One correctness check: a case through one path, with the seed of its inputs (so the
    feedback can say exactly how to rebuild them)."""

    path: str  # "abi" | "binding"
    case: Case
    seed: int

    @property
    def id(self) -> str:
        return f"{self.path}:{self.case.id}"

    @property
    def launchers(self) -> tuple[str, ...]:
        """The fused launchers (by kind) the check calls (rubrics.hw4.hangs)."""
        return path_calls(self.path, self.case.kind)

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    def reproduce(self) -> str:
        via = "the C ABI" if self.path == "abi" else "your MiniTorch binding"
        return f"through {via}; inputs: {self.case.describe_inputs()}; seed {self.seed}"


def plan_checks(cases: list[Case], rng: np.random.Generator) -> list[Check]:
    """Every case through the C ABI, then every case the binding can express through the
    binding, each with a fresh seed."""
    checks = [Check("abi", c, int(rng.integers(2**31))) for c in cases]
    checks += [Check("binding", c, int(rng.integers(2**31))) for c in cases if binding_eligible(c)]
    return checks


def check_outcome(check: Check, ok: bool, max_err: float | None, where: tuple[int, ...] | None,
             message: str) -> CaseOutcome:
    if not ok:
        message = f"{message} ({check.reproduce()})" if message else f"({check.reproduce()})"
    return CaseOutcome(case_id=check.id, shape=tuple(check.case.shape), ok=ok, max_err=max_err,
                       where=where, message=message, public=check.case.public)


def not_run_outcome(check: Check, why: str) -> CaseOutcome:
    """A check that did not run, and why: failed, as the scoring counts it (`ran` False)."""
    return dataclasses.replace(check_outcome(check, False, None, None, f"not run: {why}"), ran=False)


def crash_outcome(check: Check, failure: ChildFailure, detail: str | None = None) -> CaseOutcome:
    """A crash or hang of the submission's code, attributed to the check that caused it;
    `detail` in place of the failure's own (a hang that names its launcher)."""
    said = " | ".join(salient_lines(failure.tail))
    words = "hung" if failure.kind == "timeout" else "crashed"
    return check_outcome(check, False, None, None,
                         f"{words}: {detail or failure.detail}" + (f" | {said}" if said else ""))


def _call_abi(client: ChildClient, case: Case, arrays: dict[str, np.ndarray], expected: dict[str, np.ndarray],
              timeout: float) -> CheckResult | str:
    """One launcher call on `arrays` in the child, verified against `expected`; what the
    submission raised instead, as text."""
    client.arena.reset()
    refs = client.arena.put_all(arrays)
    try:
        client.call({"op": "abi", "case": case_json(case), "arrays": refs}, timeout)
    except StudentError as exc:
        return f"raised {exc.error}"
    outputs = {name: client.arena.view(ArrayRef.from_json(refs[name])).copy() for name in abi_output_names(case)}
    return verify(case, outputs, expected)


def check_abi_case(client: ChildClient, check: Check, timeout: float) -> CaseOutcome:
    """The case under the starter's reading of the launcher's arguments; where its outputs are
    wrong, again under each reading the starter leaves open (rubrics.hw4.conventions): it
    passes if one holds, and says which."""
    case = check.case
    arrays = make_inputs(case, check.rng())
    expected = reference(case, arrays)
    result = _call_abi(client, case, arrays, expected, timeout)
    if isinstance(result, str):
        return check_outcome(check, False, None, None, result)
    if result.ok:
        return check_outcome(check, True, result.max_err, result.where, result.message.strip())
    also_wrong = []
    for reading in open_readings(case.kind):
        other = _call_abi(client, case, reading.rewrite(arrays), expected, timeout)
        if isinstance(other, CheckResult) and other.ok:
            return check_outcome(check, True, other.max_err, None, f"passed reading {reading.name}")
        also_wrong.append(f"also wrong reading {reading.name}")
    message = "; ".join([result.message.strip(), *also_wrong])  # the message names the output
    return check_outcome(check, False, result.max_err, result.where, message.strip("; "))


def check_binding_case(client: ChildClient, check: Check, timeout: float) -> CaseOutcome:
    case = check.case
    inputs = make_binding_inputs(case, check.rng())
    expected = binding_reference(case, inputs)
    try:
        run = run_binding(client, case, "custom", [inputs], timeout, course_tensors=True)
    except StudentError as exc:
        return check_outcome(check, False, None, None, f"raised {exc.error}")
    result = verify(case, run.outputs[0], expected)
    return check_outcome(check, result.ok, result.max_err, result.where, result.message)


def run_check(client: ChildClient, check: Check, timeout: float) -> CaseOutcome:
    run = check_abi_case if check.path == "abi" else check_binding_case
    return run(client, check, timeout)


def binding_eligible(case: Case) -> bool:
    """Cases the binding can express: it has no mask_future, and a softmax backward runs the
    binding's forward first, which takes rows of at most MAX_SOFTMAX_LEN["softmax_fw"]
    (longer backward rows are still checked through the C ABI)."""
    if case.kind in BINDING_KINDS_WITHOUT_MASK_FUTURE and case.params.get("mask_future"):
        return False
    if case.kind == "softmax_bw" and case.params["softmax_len"] > MAX_SOFTMAX_LEN["softmax_fw"]:
        return False
    return True


def measure_kernel_ms(client: ChildClient, case: Case, rng: np.random.Generator,
                      config: TimingConfig) -> tuple[float | None, str]:
    """The fused kernels' own GPU time per C ABI call (CUPTI, in the child), or None and why.
    Informational: a profiler that is missing or refuses is not scored; a kernel that crashes
    or hangs there raises ChildFailure (the caller notes it; the checks say so)."""
    client.arena.reset()
    refs = client.arena.put_all(make_inputs(case, rng))
    try:
        reply = client.call({"op": "kernel_time", "case": case_json(case), "arrays": refs,
                             "calls": config.kernel_calls}, config.call_timeout_s)
    except StudentError as exc:
        return None, f"kernel GPU time not measured: {exc.error}"
    return float(reply["kernel_ms"]), ", ".join(reply.get("kernels", []))
