"""The mutant set (rubrics/hw4/mutants.yaml) against the grader's checks, on the GPU.

- correctness mutants (detect: abi): built with nvcc, then K's C-ABI checks (kit_checks.py,
  the same cases and seeds as test_kernels_abi.py) run in a child process per problem in
  must_fail; at least one case must fail (or the child must die: a crash is a failure).
- speed mutant (detect: serial_timing): all correctness cases still pass, and the launcher
  is several times slower than the reference on a many-row shape.
- Python mutants (detect: binding_grads / fused_calls): the tree's own MiniTorch with
  CudaKernelOps in a child (cwd = the tree): wrong gradients through autodiff, or a fused
  model whose forward never calls the backend's fused op (counted, not timed).

Every check runs in a spawned child so a broken kernel (illegal address, race, abort through
ctypes) cannot poison this process's CUDA context. The reference kit goes through the same
drivers first, as the control.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rubrics.hw4.probes import probe_command, probe_env
from worker.build import Toolchain, build_kernels, cuda_include_dirs
from worker.mutants import Mutant, apply_mutant, load_mutants, touched_kernels
from worker.rubric import load_rubric

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
GPU_ARCH = os.environ.get("KG_CUDA_ARCH", "native")
RUBRIC = load_rubric("hw4")
MUTANTS = load_mutants("hw4")
SO_DIR = "minitorch/cuda_kernels"

# problem id -> (library kind for kit_checks.load_<kind>_lib, case list name in kit_checks)
PROBLEM_CASES = {
    "1.1": ("softmax", "SOFTMAX_FW_CASES"),
    "1.2": ("softmax", "SOFTMAX_BW_CASES"),
    "2.1": ("layernorm", "LAYERNORM_FW_CASES"),
    "2.2": ("layernorm", "LAYERNORM_BW_CASES"),
}
CHILD_TIMEOUT_S = 300
SERIAL_SHAPE = (16384, 64)  # many rows, short ones: per-row launches dominate
SERIAL_MIN_SLOWDOWN = 3.0

ABI_MUTANTS = [m for m in MUTANTS if m.detect == "abi"]
SERIAL_MUTANTS = [m for m in MUTANTS if m.detect == "serial_timing"]
PROBE_MUTANTS = [m for m in MUTANTS if m.detect in ("binding_grads", "fused_calls")]


# --------------------------------------------------------------------------- child drivers

_CHECK_DRIVER = textwrap.dedent(
    """
    import json, sys, zlib
    sys.path.insert(0, {here!r})
    import numpy as np
    import kit_checks as kc
    lib = kc.load_{kind}_lib({so!r})
    for case in kc.{cases}:
        # the same seeding as test_kernels_abi.py
        result = case.run(lib, np.random.default_rng(zlib.crc32(case.id.encode())))
        print("CASE " + json.dumps({{"id": case.id, "ok": bool(result.ok), "text": result.describe()}}), flush=True)
        if not result.ok and {stop_first!r}:
            break
    print("DONE", flush=True)
    """
)

_TIMING_DRIVER = textwrap.dedent(
    """
    import statistics, sys, time
    sys.path.insert(0, {here!r})
    import numpy as np
    import kit_checks as kc
    lib = kc.load_layernorm_lib({so!r})
    rows, hidden = {rows}, {hidden}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    gamma = np.ones(hidden, np.float32)
    beta = np.zeros(hidden, np.float32)
    out = np.empty_like(x)
    var = np.empty(rows, np.float32)
    mean = np.empty(rows, np.float32)
    def call():
        lib.launch_layernorm(out.ctypes.data, var.ctypes.data, mean.ctypes.data, x.ctypes.data,
                             gamma.ctypes.data, beta.ctypes.data, rows, hidden, None)
    for _ in range(3):
        call()
    times = []
    for _ in range(9):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    print("MEDIAN_S", statistics.median(times), flush=True)
    """
)


@dataclass
class CheckRun:
    problem: str
    cases: list[dict] = field(default_factory=list)
    finished: bool = False
    returncode: int = 0
    stderr: str = ""

    @property
    def failed_cases(self) -> list[dict]:
        return [c for c in self.cases if not c["ok"]]

    @property
    def detected(self) -> bool:
        return bool(self.failed_cases) or not self.finished or self.returncode != 0

    def summary(self) -> str:
        if self.failed_cases:
            first = self.failed_cases[0]
            return f"{self.problem}: case {first['id']} {first['text']}"
        if not self.finished or self.returncode != 0:
            return f"{self.problem}: child died (rc={self.returncode}) after {len(self.cases)} cases: {self.stderr[-600:]}"
        return f"{self.problem}: all {len(self.cases)} cases passed"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_checks(so_dir: Path, problem: str, stop_first: bool) -> CheckRun:
    kind, cases = PROBLEM_CASES[problem]
    so = so_dir / f"{kind}_kernel.so"
    code = _CHECK_DRIVER.format(here=str(HERE), kind=kind, so=str(so), cases=cases, stop_first=stop_first)
    run = CheckRun(problem)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=_child_env()
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        run.cases = [json.loads(ln[5:]) for ln in out.splitlines() if ln.startswith("CASE ")]
        run.returncode, run.stderr = -1, f"timed out after {CHILD_TIMEOUT_S} s"
        return run
    run.cases = [json.loads(ln[5:]) for ln in proc.stdout.splitlines() if ln.startswith("CASE ")]
    run.finished = "DONE" in proc.stdout.splitlines()
    run.returncode = proc.returncode
    run.stderr = proc.stderr
    return run


def run_probe(tree: Path, detect: str) -> dict:
    proc = subprocess.run(
        [sys.executable, *probe_command(detect, "cuda")],
        cwd=tree, env=probe_env(), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE_RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": f"rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"}
    return json.loads(lines[-1][len("PROBE_RESULT "):])


def time_layernorm(so_dir: Path) -> float:
    rows, hidden = SERIAL_SHAPE
    code = _TIMING_DRIVER.format(here=str(HERE), so=str(so_dir / "layernorm_kernel.so"), rows=rows, hidden=hidden)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=_child_env()
    )
    for line in proc.stdout.splitlines():
        if line.startswith("MEDIAN_S "):
            return float(line.split()[1])
    raise AssertionError(f"timing child failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


# --------------------------------------------------------------------------- fixtures


@dataclass
class MutantBuild:
    mutant: Mutant
    root: Path
    ok: bool
    log: str


@pytest.fixture(scope="module")
def mutant_builds(kit_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, MutantBuild]:
    """Every mutant as a tree: the kernels it touches built with nvcc, the others' .so files
    copied from the built reference kit (their sources are the reference's)."""
    base = tmp_path_factory.mktemp("mutants")
    toolchain = Toolchain(
        nvcc=os.environ.get("KG_NVCC", "nvcc"),
        flags=(*RUBRIC.nvcc_flags, f"-arch={GPU_ARCH}"),
        include_dirs=cuda_include_dirs(),
    )

    def make(mutant: Mutant) -> MutantBuild:
        root = apply_mutant(RUBRIC.starter_dir, mutant, base / mutant.id / "llmsys_hw4")
        targets = touched_kernels(mutant, RUBRIC.kernels, root)
        rebuilt = {t.name for t in targets}
        for target in RUBRIC.kernels:
            if target.name not in rebuilt:
                (root / target.output).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(kit_root / target.output, root / target.output)
        if not targets:
            return MutantBuild(mutant, root, True, "")
        results = build_kernels(root, targets, toolchain)
        log = "\n".join(f"--- {r.name} ({r.seconds:.1f} s)\n{r.log}" for r in results)
        return MutantBuild(mutant, root, all(r.ok for r in results), log)

    with ThreadPoolExecutor(max_workers=max(2, min(16, os.cpu_count() or 2))) as pool:
        builds = list(pool.map(make, MUTANTS))
    return {b.mutant.id: b for b in builds}


@pytest.fixture(scope="module")
def reference_checks(kit_root: Path) -> dict[str, CheckRun]:
    """The control: the check driver on the reference kit, every case of every problem."""
    so_dir = kit_root / SO_DIR
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda p: run_checks(so_dir, p, stop_first=False), sorted(PROBLEM_CASES)))
    return {r.problem: r for r in runs}


@pytest.fixture(scope="module")
def abi_results(mutant_builds: dict[str, MutantBuild]) -> dict[str, list[CheckRun]]:
    jobs = [(m.id, p) for m in ABI_MUTANTS if mutant_builds[m.id].ok for p in m.must_fail]

    def one(job: tuple[str, str]) -> tuple[str, CheckRun]:
        mid, problem = job
        return mid, run_checks(mutant_builds[mid].root / SO_DIR, problem, stop_first=True)

    out: dict[str, list[CheckRun]] = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for mid, run in pool.map(one, jobs):
            out.setdefault(mid, []).append(run)
    return out


# --------------------------------------------------------------------------- tests


def test_reference_passes_the_check_driver(reference_checks: dict[str, CheckRun]) -> None:
    for _problem, run in sorted(reference_checks.items()):
        assert run.finished and run.returncode == 0, run.summary()
        assert run.cases and not run.failed_cases, run.summary()
        print(f"reference {run.summary()}")


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_mutant_builds(mutant: Mutant, mutant_builds: dict[str, MutantBuild]) -> None:
    build = mutant_builds[mutant.id]
    assert build.ok, f"{mutant.id} does not build:\n{build.log[-6000:]}"


@pytest.mark.parametrize("mutant", ABI_MUTANTS, ids=[m.id for m in ABI_MUTANTS])
def test_correctness_mutant_fails_its_problems(
    mutant: Mutant, mutant_builds: dict[str, MutantBuild], abi_results: dict[str, list[CheckRun]],
    reference_checks: dict[str, CheckRun],
) -> None:
    assert mutant_builds[mutant.id].ok, f"{mutant.id} does not build"
    for problem in mutant.must_fail:  # the driver itself is sound on this problem
        ref = reference_checks[problem]
        assert ref.finished and not ref.failed_cases, f"reference fails {problem}: {ref.summary()}"
    runs = {r.problem: r for r in abi_results.get(mutant.id, [])}
    for problem in mutant.must_fail:
        run = runs[problem]
        print(f"{mutant.id} -> {run.summary()}")
        assert run.detected, f"{mutant.id} passed every case of {problem}: {mutant.description}"


@pytest.mark.parametrize("mutant", SERIAL_MUTANTS, ids=[m.id for m in SERIAL_MUTANTS])
def test_serial_mutant_is_correct_but_slow(
    mutant: Mutant, kit_root: Path, mutant_builds: dict[str, MutantBuild]
) -> None:
    build = mutant_builds[mutant.id]
    assert build.ok, f"{mutant.id} does not build"
    for problem in mutant.must_fail:  # values stay right: it is a speed mutant
        run = run_checks(build.root / SO_DIR, problem, stop_first=True)
        assert run.finished and not run.failed_cases, f"{mutant.id} should be correct: {run.summary()}"
    ref_s = time_layernorm(kit_root / SO_DIR)
    mut_s = time_layernorm(build.root / SO_DIR)
    ref_s = min(ref_s, time_layernorm(kit_root / SO_DIR))  # the reference's best of two medians
    ratio = mut_s / ref_s
    print(f"{mutant.id}: launch_layernorm {SERIAL_SHAPE} reference {ref_s * 1e3:.2f} ms, mutant {mut_s * 1e3:.2f} ms, {ratio:.1f}x slower")
    assert ratio >= SERIAL_MIN_SLOWDOWN, f"{mutant.id} only {ratio:.2f}x slower than the reference"


@pytest.fixture(scope="module")
def reference_probes(kit_root: Path) -> dict[str, dict]:
    return {d: run_probe(kit_root, d) for d in sorted({m.detect for m in PROBE_MUTANTS})}


def test_reference_passes_the_probes(reference_probes: dict[str, dict]) -> None:
    grads = reference_probes["binding_grads"]
    assert "error" not in grads, grads.get("error")
    assert all(r["ok"] for r in grads.values()), grads
    calls = reference_probes["fused_calls"]
    assert "error" not in calls, calls.get("error")
    assert all(n > 0 for n in calls["fused_counts"].values()), calls
    losses = calls["losses"]
    assert abs(losses["fused"] - losses["unfused"]) <= 1e-4 * max(1.0, abs(losses["unfused"])), losses


@pytest.mark.parametrize("mutant", PROBE_MUTANTS, ids=[m.id for m in PROBE_MUTANTS])
def test_python_mutant_detected(
    mutant: Mutant, mutant_builds: dict[str, MutantBuild], reference_probes: dict[str, dict]
) -> None:
    ref = reference_probes[mutant.detect]
    assert "error" not in ref, f"probe broken on the reference: {ref.get('error')}"
    result = run_probe(mutant_builds[mutant.id].root, mutant.detect)
    print(f"{mutant.id} -> {json.dumps(result)[:600]}")
    if mutant.detect == "binding_grads":
        assert "error" not in result, result["error"]  # the probe catches binding errors itself
        for problem in mutant.must_fail:
            assert not result[problem]["ok"], f"{mutant.id}: {problem} not detected: {result}"
    else:  # fused_calls: values right, but some fused op is never called by the fused model
        assert "error" not in result, result["error"]
        losses = result["losses"]
        assert abs(losses["fused"] - losses["unfused"]) <= 1e-4 * max(1.0, abs(losses["unfused"])), losses
        missing = [op for op, n in result["fused_counts"].items() if n == 0 and ref["fused_counts"][op] > 0]
        assert missing, f"{mutant.id}: every fused op was called: {result['fused_counts']}"
