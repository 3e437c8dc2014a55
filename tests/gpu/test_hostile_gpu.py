"""Hostile submissions on the GPU: kernels that hang, trap, write out of bounds or hog GPU
memory, results forged on stdout, work deferred past the clock or moved to another stream,
and host code in the student's MiniTorch that fork-bombs, allocates without bound or probes
for a way out (network, other submissions, blobs, hidden cases, secrets, writes outside its
folder). Each is graded by the real GPU stage in the sandbox (rubrics.hw4.grade.run_gpu_stage)
on the problem it attacks and must lose what it should, with nothing escaping; the reference
kit graded afterwards in fresh children must still pass (the worker is healthy).

Quick on purpose: two rubric cases per problem and short timing. Cheats that patch timers,
cache outputs or sniff shapes are in test_grading_gpu.py (test_cheats_gain_nothing).
Run: KG_SKIP_BENCH=1 bash tests/gpu/suite.sh tests/gpu/test_hostile_gpu.py -s
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from rubrics.hw4 import grade
from rubrics.hw4.cases import load_cases
from rubrics.hw4.grade import GpuStageConfig
from tests.gpu.test_grading_gpu import LIMITS, POLICY, TIMING, build_all, grade_tree, stage_config, work  # noqa: F401
from worker.measurements import ProblemMeasurement
from worker.mutants import Mutant, parse_mutants
from worker.sandbox.view import PROJECT_ROOT
from worker.scoring import ProblemScore, RunScore

pytestmark = pytest.mark.gpu
# The uid drop (root parent, KG_SANDBOX_USER set) makes the probe's denials meaningful and
# bounds a fork bomb with RLIMIT_NPROC; without it those cases are skipped.
DROPS_UID = os.geteuid() == 0 and POLICY.user is not None
FAST = replace(TIMING, warmup=1, min_trials=4, max_trials=6, round_trials=2, call_timeout_s=20)
TIGHT = replace(LIMITS, memory_bytes=16 * 1024**3, max_processes=64)  # contain the host attacks sooner
CANARY = f"KGCANARY-{uuid.uuid4().hex}"
MARKER = f"kg-open-{uuid.uuid4().hex[:12]}"  # in the name of every world-readable canary
INIT_ANCHOR = '"""A compact MiniTorch for llmsys_hw4'
PROBES = ("host-probes-for-a-way-out", "host-looks-beyond-its-view")  # cases whose probe must have run
SUMMARY: list[tuple[str, str, str, str]] = []  # case, problem, outcome, escapes


def init_prefix(code: str) -> dict[str, str]:
    """An edit that runs `code` when the child imports the student's minitorch."""
    return {"file": "minitorch/__init__.py", "find": INIT_ANCHOR, "replace": code + "\n" + INIT_ANCHOR}


def probe_code(secrets: Path, port: int) -> str:
    """Host code that tries every way out it knows, prints ESCAPED for each that worked, and
    ends the child so its output reaches the log."""
    return f'''
import os as _o, socket as _s
def _kg_probe():
    for _p in {[str(p) for p in sorted(secrets.rglob("*")) if p.is_file()]!r} + ["/proc/%d/environ" % _o.getppid()]:
        try:
            print("ESCAPED read", _p, open(_p, "rb").read()[:32], flush=True)
        except OSError as _e:
            print("blocked read", _p, _e.errno, flush=True)
    for _a in [("127.0.0.1", {port}), ("127.0.0.1", 6379), ("127.0.0.1", 5432), ("192.0.2.1", 80)]:
        _c = _s.socket()
        _c.settimeout(2)
        try:
            _c.connect(_a)
            print("ESCAPED connect", _a, flush=True)
        except OSError as _e:
            print("blocked connect", _a, _e.errno, flush=True)
    for _p in [{str(secrets / "planted")!r}, _o.path.dirname(_o.getcwd()) + "/planted-by-student"]:
        try:
            open(_p, "w").write("x")
            print("ESCAPED wrote", _p, flush=True)
        except OSError as _e:
            print("blocked write", _p, _e.errno, flush=True)
    if any({CANARY!r} in _v for _v in _o.environ.values()):
        print("ESCAPED environment secret", flush=True)
    try:
        _o.kill(_o.getppid(), 0)
        print("ESCAPED signal the grader", flush=True)
    except OSError as _e:
        print("blocked signal", _e.errno, flush=True)
    print("KG-PROBE-DONE", flush=True)
    _o._exit(3)
_kg_probe()
'''


def view_probe(open_files: list[Path], marker: str) -> str:
    """Host code that looks for the host beyond the allow-list: world-readable files by their
    paths (a host folder, the service's .env, a zip left readable), any name carrying the marker
    anywhere in the visible tree, /etc beyond the loader's and the fresh files, the host's name.
    (Not any zip: the Python runtime, which the child may read, ships some as package data.)"""
    return f'''
import os as _o, socket as _s
def _kg_view():
    for _p in {[str(p) for p in open_files]!r}:
        try:
            print("ESCAPED read", _p, open(_p, "rb").read()[:32], flush=True)
        except OSError as _e:
            print("blocked read", _p, _e.errno, flush=True)
    for _top, _dirs, _files in _o.walk("/"):
        _dirs[:] = [_d for _d in _dirs if (_top.rstrip("/") + "/" + _d) not in ("/usr", "/proc", "/sys", "/dev")]
        for _n in _dirs + _files:
            if {marker!r} in _n:
                print("ESCAPED sees", _top.rstrip("/") + "/" + _n, flush=True)
    _extra = set(_o.listdir("/etc")) - {{"passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf",
                                         "ld.so.conf.d", "alternatives"}}
    if _extra:
        print("ESCAPED /etc holds", sorted(_extra)[:8], flush=True)
    if _s.gethostname() == {socket.gethostname()!r}:
        print("ESCAPED host name", flush=True)
    print("KG-PROBE-DONE", flush=True)
    _o._exit(3)
_kg_view()
'''


FORK_BOMB = "import os as _o\nwhile True:\n    try:\n        _o.fork()\n    except OSError:\n        pass\n"
HOARD = "_kg_hoard = []\nwhile True:\n    _kg_hoard.append(bytearray(64 << 20))\n"
FORGED = ('import sys as _y\nfor _l in ["RESULT 1.1 passed 100/100", \'{"ok": true, "op": "abi", "seconds": 1e-9}\']:\n'
          "    print(_l, flush=True)\n    print(_l, file=_y.stderr, flush=True)\n")


@dataclass(frozen=True)
class Expectation:
    name: str
    holds: Callable[[ProblemScore, ProblemScore], bool]  # (this score, the reference kit's) -> ok


ZERO = Expectation("0 points", lambda got, ref: got.points == 0)
NO_SPEED = Expectation("correctness lost, no speed points",
                       lambda got, ref: got.speed_points == 0 and got.correctness_points < ref.correctness_points)
# Two grades of the same kernels differ in speed points: on the H200 (2026-11-29) the student
# baseline of 1.1 took 9.8 ms in one child and 21.8 ms in the next, moving the kit's speed
# points by up to ~1.8. A cheat that "gains" less than that is indistinguishable from noise;
# what must hold is that it stays correct and gains no more than that spread.
REGRADE_NOISE_POINTS = 2.0
NO_GAIN = Expectation("no more than the reference kit (within re-grade noise)",
                      lambda got, ref: got.points <= ref.points + REGRADE_NOISE_POINTS)


@dataclass(frozen=True)
class GpuCase:
    mutant: Mutant
    expect: Expectation
    needs_root: bool = False  # the uid drop makes the probe's denials meaningful


def _case(id: str, threat: str, problem: str, edits: list[dict[str, str]], expect: Expectation,
          needs_root: bool = False) -> GpuCase:
    raw = {"id": id, "description": threat, "kind": "correctness", "must_fail": [problem], "edits": edits}
    return GpuCase(parse_mutants({"mutants": [raw]})[0], expect, needs_root)


LN_FW = "// BEGIN SOLUTION: Problem 2.1 ker_layer_norm"
# ker_attn_softmax never returns (also graded whole by tests/gpu/test_load_failures_gpu.py).
SOFTMAX_FW_SPINS = {"file": "src/softmax_kernel.cu", "find": "// BEGIN SOLUTION: Problem 1.1 ker_attn_softmax",
                    "replace": "// BEGIN SOLUTION: Problem 1.1 ker_attn_softmax\n  while (clock64() >= 0) {}"}
SOFTMAX_ROWS = "  const int rows = batch_size * nhead * from_len;\n  if (rows == 0 || to_len == 0) return;\n"


def cases(secrets: Path, port: int, open_files: list[Path]) -> list[GpuCase]:
    return [
        _case("kernel-spins-forever", "kernels that loop forever", "1.1", [SOFTMAX_FW_SPINS], ZERO),
        _case("kernel-traps", "kernels that trap", "2.1",
              [{"file": "src/layernorm_kernel.cu", "find": LN_FW, "replace": LN_FW + '\n  asm volatile("trap;");'}], ZERO),
        _case("kernel-writes-out-of-bounds", "kernels that write out of bounds", "2.1",
              [{"file": "src/layernorm_kernel.cu", "find": LN_FW,
                "replace": LN_FW + "\n  ln_res[(size_t)1 << 36 | threadIdx.x] = 1.f;"}], ZERO),
        _case("kernel-hogs-gpu-memory", "kernels that exhaust GPU memory", "1.1",
              [{"file": "src/softmax_kernel.cu", "find": SOFTMAX_ROWS,
                "replace": "  static void* hoard = nullptr;\n  if (!hoard) {\n    size_t free_b = 0, total_b = 0;\n"
                           "    cudaMemGetInfo(&free_b, &total_b);\n"
                           "    if (free_b > (4ull << 30)) cudaMalloc(&hoard, free_b - (4ull << 30));\n  }\n"
                           + SOFTMAX_ROWS}], NO_GAIN),
        _case("side-stream-no-sync", "runs work on another stream", "2.1",  # wrong, or right and no faster
              [{"file": "src/layernorm_kernel.cu", "find": "  ker_layer_norm<<<batch_size, row_threads(hidden4), 0, stream>>>",
                "replace": "  cudaStream_t side;\n  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);\n"
                           "  ker_layer_norm<<<batch_size, row_threads(hidden4), 0, side>>>"}], NO_GAIN),
        _case("defers-work-to-a-thread", "defers work past the clock (another thread)", "1.1",
              [{"file": "minitorch/tensor_functions.py",
                "find": "        out = inp.backend.attn_softmax_fw(inp, mask, mask_future=mask_future)\n",
                "replace": "        import threading, time\n        out = inp * 0.0\n"
                           "        def _later():\n            time.sleep(0.05)\n"
                           "            done = inp.backend.attn_softmax_fw(inp, mask, mask_future=mask_future)\n"
                           "            out._tensor._storage[:] = done._tensor._storage\n"
                           "        threading.Thread(target=_later, daemon=True).start()\n"}], NO_SPEED),
        _case("forged-result-lines", "prints a forged result line", "1.1",
              [init_prefix(FORGED),
               {"file": "src/softmax_kernel.cu", "find": "  if (to_len <= 32) {\n    launch_warp_softmax<1>",
                "replace": "  if (true) {\n  } else if (to_len <= 32) {\n    launch_warp_softmax<1>"}], ZERO),
        _case("host-fork-bomb", "host code fork-bombs", "2.1", [init_prefix(FORK_BOMB)], ZERO, needs_root=True),
        _case("host-allocates-unbounded", "host code allocates without bound", "2.1", [init_prefix(HOARD)], ZERO),
        _case("host-probes-for-a-way-out", "sockets, reads of submissions/blobs/hidden cases/secrets, writes outside",
              "2.1", [init_prefix(probe_code(secrets, port))], ZERO, needs_root=True),
        _case("host-looks-beyond-its-view", "reads world-readable host files, the service's .env, finds zips",
              "2.1", [init_prefix(view_probe(open_files, MARKER))], ZERO),
    ]


@dataclass(frozen=True)
class Secrets:
    root: Path
    port: int
    open_files: list[Path]  # world-readable (0644, searchable folders): only the view keeps them out


@pytest.fixture(scope="module")
def secrets() -> Iterator[Secrets]:
    """Root-only files standing in for the blob store, another job, hidden cases and the secret
    key; a listener on loopback; a secret in the grader's environment. (Not under pytest's
    tmp folder: it is 0700, which would deny the sandbox user for the wrong reason.)"""
    root = Path(tempfile.mkdtemp(prefix="kg-hostile-server-"))
    for rel in ("blobs/ab/cd/blob", "jobs/run-7/src/combine.cu", "rubrics/hw4-hidden.yaml", "secret_key"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(CANARY)
        (root / rel).chmod(0o600)
    root.chmod(0o711)  # searchable: the denial must come from the files' modes
    host = Path("/var/lib") / MARKER
    open_files = [host / "notes.txt", host / f"{MARKER}-another-student.zip", PROJECT_ROOT / f".env-{MARKER}"]
    host.mkdir(mode=0o755)
    for path in open_files:
        path.write_text(CANARY)
        path.chmod(0o644)
    listener = socket.create_server(("127.0.0.1", 0))
    os.environ["KG_SECRET_KEY"] = CANARY
    try:
        yield Secrets(root, listener.getsockname()[1], open_files)
    finally:
        del os.environ["KG_SECRET_KEY"]
        listener.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(host, ignore_errors=True)
        open_files[-1].unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def two_cases_per_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    short = {pid: found[:2] for pid, found in load_cases("hw4").items()}
    monkeypatch.setattr(grade, "load_cases", lambda _slug: short)


def hostile_config(problems: tuple[str, ...]) -> GpuStageConfig:
    return stage_config(problems, timing=FAST, limits=TIGHT)


@pytest.fixture(scope="module")
def reference(kit_root: Path) -> Iterator[RunScore]:
    """The reference kit graded the same way, for the 'no gain' comparison (in a folder the
    sandbox user can reach, as the `work` fixture)."""
    folder = Path(tempfile.mkdtemp(prefix="kg-gpu-ref-"))
    folder.chmod(0o711)
    try:
        yield grade_tree("hostile: reference kit", kit_root, kit_root, folder, hostile_config(("1.1", "2.1")))[1]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _escapes(measurement: ProblemMeasurement, secrets: Secrets, work: Path) -> list[str]:
    found = [line.strip() for line in measurement.log_tail.splitlines() if "ESCAPED" in line]
    found += [f"left {p}" for p in [secrets.root / "planted", *work.rglob("planted-by-student")] if p.exists()]
    if CANARY in measurement.log_tail and not found:
        found.append("a secret reached the log")
    return found


@pytest.mark.timeout(600)
def test_hostile_gpu_submissions(kit_root: Path, tmp_path: Path, work: Path, secrets: Secrets,  # noqa: F811
                                 reference: RunScore) -> None:
    chosen = [c for c in cases(secrets.root, secrets.port, secrets.open_files) if DROPS_UID or not c.needs_root]
    trees = build_all([c.mutant for c in chosen], kit_root, tmp_path / "trees")
    failures = []
    for case in chosen:
        pid = case.mutant.must_fail[0]
        measurements, score = grade_tree(f"hostile {case.mutant.id}", trees[case.mutant.id], kit_root,
                                         work / case.mutant.id, hostile_config((pid,)))
        got, m = score.problem(pid), next(x for x in measurements if x.problem_id == pid)
        escapes = _escapes(m, secrets, work)
        ok = case.expect.holds(got, reference.problem(pid))
        SUMMARY.append((case.mutant.id, pid, f"{m.status}, {got.points:g}/{got.max_points:g} "
                        f"({'as expected' if ok else 'expected ' + case.expect.name})", "; ".join(escapes) or "-"))
        if escapes or not ok:
            failures.append((case.mutant.id, escapes, got.to_dict(), m.log_tail[-1500:]))
        # The probe's last line reaches the log tail or, when a case crashed, that case's message.
        seen = [m.log_tail, *(c.message for c in m.cases)]
        if case.mutant.id in PROBES and not any("KG-PROBE-DONE" in t for t in seen):
            failures.append((case.mutant.id, "the probe did not run", m.log_tail[-1500:]))
    print_summary("hostile", SUMMARY, len(failures))
    assert not failures, failures


def print_summary(suite: str, rows: list[tuple[str, str, str, str]], failures: int) -> None:
    """The table of a GPU suite's cases: case, problem, outcome, escapes."""
    case_w, outcome_w = max(len(r[0]) for r in rows) + 2, max(len(r[2]) for r in rows) + 2
    print(f"\n{'case':<{case_w}} {'problem':<8} {'outcome':<{outcome_w}} escapes")
    for row in rows:
        print(f"{row[0]:<{case_w}} {row[1]:<8} {row[2]:<{outcome_w}} {row[3]}")
    print(f"{suite} GPU cases tried: {len(rows)}, escapes: {sum(r[3] != '-' for r in rows)}, "
          f"outcome not as expected: {failures}")


def test_reference_kit_passes_after_the_hostile_ones(kit_root: Path, work: Path) -> None:  # noqa: F811
    """Fresh children on the same GPU after the hostile ones: every correctness case passes."""
    measurements, _ = grade_tree("hostile: reference kit afterwards", kit_root, kit_root, work / "after",
                                 hostile_config(("1.1", "2.1")))
    for m in measurements:
        assert m.status == "ok" and m.all_passed, (m.problem_id, m.first_failure, m.log_tail[-1500:])
