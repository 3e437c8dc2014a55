"""The grading core on the GPU: the reference kit end to end (three grades, for stability),
every mutant, an infinite-loop kernel, a compile error, and cheating submissions.

Prints a table per submission and problem (correct?, speedup with interval, points) and the
stability summary; writes them as JSON to $OUT (or .gpu-out) for the issue note.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from rubrics.hw4 import speed
from rubrics.hw4.grade import GpuStageConfig, run_gpu_stage
from rubrics.hw4.problem3 import Problem3Config
from rubrics.hw4.timing_review import waited_off_cpu
from worker.build import Toolchain, build_kernels, cuda_include_dirs
from worker.calibration import calibrated_targets
from worker.gpu.copy_peak import measure_copy_peak
from worker.measurements import Bandwidth, ProblemMeasurement
from worker.mutants import Mutant, apply_mutant, load_mutants, parse_mutants, touched_kernels
from worker.pipeline import PipelineConfig, grade_submission
from worker.rubric import load_rubric
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy
from worker.scoring import RunScore, choose_figure, score_run
from worker.starter_kit import zip_tree
from worker.timing import spread
from worker.unpack import UnpackLimits

pytestmark = pytest.mark.gpu

RUBRIC = load_rubric("hw4")
GiB = 1024**3
LIMITS = SandboxLimits(wall_s=600, cpu_s=1200, memory_bytes=48 * GiB, max_processes=512, file_size_bytes=4 * GiB)
POLICY = SandboxPolicy(user=os.environ.get("KG_SANDBOX_USER", "nobody") or None, isolate_network=True, gpu_index=0)
TIMING = speed.TimingConfig()  # production settings: its grade times are the kernel problems' p50 figures
P3 = Problem3Config(budget_s=100, max_pairs=6)
OUT = Path(os.environ.get("OUT", ".gpu-out"))
REPORT: dict[str, object] = {"grades": [], "stability": {}}


def toolchain() -> Toolchain:
    return Toolchain(os.environ.get("KG_NVCC", "nvcc"), (*RUBRIC.nvcc_flags, "-arch=native"), cuda_include_dirs())


def stage_config(problems: tuple[str, ...], **overrides: object) -> GpuStageConfig:
    config = GpuStageConfig(limits=LIMITS, policy=POLICY, timing=TIMING, problem3=P3, problems=problems)
    return replace(config, **overrides)  # type: ignore[arg-type]


def record(label: str, measurements: list[ProblemMeasurement], score: RunScore, seconds: float) -> None:
    by_id = {m.problem_id: m for m in measurements}
    rows = []
    for s in score.problems:
        m = by_id.get(s.problem_id)
        if m is None:
            continue
        rows.append({
            "problem": s.problem_id,
            "status": m.status,
            "correct": m.all_passed,
            "cases": f"{sum(c.ok for c in m.cases)}/{len(m.cases)}",
            "speedup": m.figure("student").describe() if m.figure("student") else "-",
            "speedup_reference_ops": m.figure("reference_ops").describe() if m.figure("reference_ops") else "-",
            "speedup_trusted": m.figure("trusted").describe() if m.figure("trusted") else "-",
            "median_ms": {name: round(getattr(r, attr), 4) for name, r, attr in (
                ("custom", m.figure("student"), "median_custom_ms"), ("baseline", m.figure("student"), "median_baseline_ms"),
                ("trusted", m.figure("trusted"), "median_baseline_ms")) if r is not None},
            "kernel_ms": m.kernel_ms,
            "phase_seconds": m.telemetry.get("seconds"),
            "gpu_busy": m.telemetry.get("gpu_busy"),
            "points": s.points,
            "max": s.max_points,
            "reasons": s.reasons,
        })
    REPORT["grades"].append({"submission": label, "seconds": round(seconds, 1), "rows": rows})  # type: ignore[union-attr]
    print(f"\n== {label} ({seconds:.0f} s)")
    for r in rows:
        print(f"  {r['problem']:>3} {r['status']:<8} correct={str(r['correct']):<5} {r['cases']:>7} "
              f"speedup {r['speedup']:<22} trusted {r['speedup_trusted']:<22} {r['points']:>5}/{r['max']:g}")
        if r["median_ms"] or r["kernel_ms"] is not None:
            print(f"        ms per computation {r['median_ms']}; kernels' own GPU time {r['kernel_ms']}; "
                  f"phases (s) {r['phase_seconds']}; GPU busy {r['gpu_busy']}")
        for reason in r["reasons"]:
            print(f"        - {reason}")


@pytest.fixture()
def work(tmp_path: Path) -> Iterator[Path]:
    """A work folder the sandbox user can reach (pytest's own tmp folders are 0700 root)."""
    root = Path(tempfile.mkdtemp(prefix="kg-gpu-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def write_report() -> Iterator[None]:
    yield
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "grading.json").write_text(json.dumps(REPORT, indent=1, default=str))


def grade_tree(label: str, tree: Path, trusted: Path, work: Path, config: GpuStageConfig) -> tuple[list[ProblemMeasurement], RunScore]:
    started = time.monotonic()
    measurements = run_gpu_stage(RUBRIC, tree, trusted, work, config)
    score = score_run(RUBRIC, measurements)
    record(label, measurements, score, time.monotonic() - started)
    return measurements, score


# --------------------------------------------------------------------------- the reference

REFERENCE_GRADES: list[list[ProblemMeasurement]] = []


@pytest.mark.timeout(1200)
def test_reference_kit_end_to_end(kit_root: Path, tmp_path: Path, work: Path) -> None:
    """Zip -> unpack -> stage -> build -> GPU stage -> score, with the time of each stage."""
    archive = zip_tree(RUBRIC.starter_dir, tmp_path / "llmsys_hw4.zip")
    config = PipelineConfig(
        limits=UnpackLimits(200 * 2**20, 50 * 2**20, 5000, 24, 100.0),
        toolchain=toolchain(), build_cache_dir=tmp_path / "cache", build_jobs=3, log_limit_bytes=64 * 1024,
    )
    collected: list[ProblemMeasurement] = []

    def gpu_stage(rubric, staged, reference, work, problems):  # type: ignore[no-untyped-def]
        collected.extend(run_gpu_stage(rubric, staged, reference, work, stage_config(problems)))
        return collected

    started = time.monotonic()
    outcome = grade_submission(archive, RUBRIC, work / "job", config, gpu_stage=gpu_stage)
    total_s = time.monotonic() - started
    stages = {name: round(rec.seconds, 1) for name, rec in outcome.stages.items()}
    REPORT["reference_stage_seconds"] = {**stages, "total": round(total_s, 1)}
    print(f"\nreference kit: {outcome.state.value} {outcome.score} in {total_s:.0f} s; stages {stages}")
    score = score_run(RUBRIC, collected)
    record("starter/hw4 (reference) via pipeline", collected, score, total_s)
    REFERENCE_GRADES.append(collected)
    assert outcome.state.value == "scored", outcome.message
    assert outcome.report is not None and outcome.report["tests"]
    for m in collected:
        assert m.status == "ok" and m.all_passed, (m.problem_id, m.first_failure, m.log_tail[-2000:])
        if m.problem_id != "3":
            assert m.kernel_ms is not None and 0 < m.kernel_ms < m.figure("student").median_custom_ms, (
                m.problem_id, m.kernel_ms, m.telemetry.get("kernel_profile"))
    # Every kernel problem's achieved bandwidth, set beside the GPU's peak copy bandwidth
    # measured as `grader calibrate` measures it: a correct kit is below the peak, none is flagged.
    peak = measure_copy_peak(Sandbox(LIMITS, POLICY), work / "copy-peak", POLICY.gpu_index)
    bandwidths = {m.problem_id: Bandwidth.from_dict(m.telemetry["bandwidth"]) for m in collected if m.problem_id != "3"}
    REPORT["peak_copy"] = peak.to_dict()
    REPORT["bandwidth"] = {pid: {**b.to_dict(), "percent_of_peak": round(100 * b.gb_s / peak.gb_s, 1)}
                           for pid, b in bandwidths.items()}
    print(f"peak copy bandwidth {peak.to_dict()}; kit bandwidth {REPORT['bandwidth']}")
    assert 100 < peak.gb_s < 20000 and peak.high / peak.low < 1.5, peak
    assert sorted(bandwidths) == ["1.1", "1.2", "2.1", "2.2"]
    assert all(0 < b.gb_s < peak.gb_s for b in bandwidths.values()), (peak, bandwidths)
    targets = calibrated_targets(RUBRIC, collected)
    calibrated = score_run(RUBRIC, collected, targets=targets)
    REPORT["reference_rubric_targets_total"] = score.total
    REPORT["reference_calibrated_total"] = calibrated.total
    REPORT["calibrated_targets"] = {k: round(v, 2) for k, v in targets.items()}
    print(f"reference total: {score.total} with the course targets, {calibrated.total} with targets calibrated on this GPU")
    assert calibrated.total >= 99.0, calibrated.to_dict()


@pytest.mark.timeout(1200)
def test_reference_kit_is_stable_over_three_grades(kit_root: Path, work: Path) -> None:
    kernel_only = ("1.1", "1.2", "2.1", "2.2")
    while len(REFERENCE_GRADES) < 3:  # with the end-to-end grade when it ran in this session
        i = len(REFERENCE_GRADES) + 1
        measurements, _ = grade_tree(f"starter/hw4 (reference) grade {i}", kit_root, kit_root,
                                     work / f"g{i}", stage_config(kernel_only))
        REFERENCE_GRADES.append(measurements)
    # As production scores after `grader calibrate`: targets from the first grade.
    targets = calibrated_targets(RUBRIC, REFERENCE_GRADES[0])
    stability = {}
    for pid in kernel_only:
        grades = [next(m for m in g if m.problem_id == pid) for g in REFERENCE_GRADES]
        student = [m.figure("student").speedup for m in grades if m.figure("student")]
        spec = next(p for p in RUBRIC.problems if p.id == pid).scoring
        scored = [f.speedup for f in (choose_figure(spec, m)[0] for m in grades) if f is not None]
        trusted = [m.figure("trusted").speedup for m in grades if m.figure("trusted")]
        points = [score_run(RUBRIC, g).problem(pid).points for g in REFERENCE_GRADES]
        calibrated = [score_run(RUBRIC, g, targets=targets).problem(pid).points for g in REFERENCE_GRADES]
        stability[pid] = {"speedups": [round(x, 3) for x in student], "max_over_min": round(spread(student)[2], 3),
                          "scored": [round(x, 3) for x in scored], "scored_max_over_min": round(spread(scored)[2], 3),
                          "trusted_max_over_min": round(spread(trusted)[2], 3), "points": points,
                          "points_range": round(max(points) - min(points), 2),
                          "trusted": [round(x, 3) for x in trusted],
                          "calibrated_target": targets.get(pid), "calibrated_points": calibrated,
                          "calibrated_points_range": round(max(calibrated) - min(calibrated), 2)}
    REPORT["stability"] = stability
    print("\nstability over 3 grades:", json.dumps(stability, indent=1))
    # The goals (speedup max/min <= 1.05) are reported above; asserted: no gross instability of
    # the figures that score (the trusted kit figure is information only since issue 16: its
    # spread is reported, not asserted), and a kit as good as ours keeps the same score under
    # its GPU's calibrated targets.
    for pid, s in stability.items():
        assert len(s["scored"]) == 3 and s["scored_max_over_min"] <= 1.25 and s["max_over_min"] <= 1.25, (pid, s)
        assert s["calibrated_points_range"] == 0, (pid, s)


# --------------------------------------------------------------------------- broken submissions


def build_variant(mutant: Mutant, kit_root: Path, dest: Path) -> Path:
    """The mutant's tree with its touched kernels rebuilt and the others copied from the kit."""
    tree = apply_mutant(RUBRIC.starter_dir, mutant, dest)
    touched = touched_kernels(mutant, RUBRIC.kernels, tree)
    for target in RUBRIC.kernels:
        if target not in touched:
            (tree / target.output).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kit_root / target.output, tree / target.output)
    results = build_kernels(tree, touched, toolchain())
    assert all(r.ok for r in results), [r.log for r in results if not r.ok]
    return tree


def build_all(mutants: list[Mutant], kit_root: Path, base: Path) -> dict[str, Path]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        trees = pool.map(lambda m: build_variant(m, kit_root, base / m.id), mutants)
        return {m.id: t for m, t in zip(mutants, trees)}


def reference_scores(kit_root: Path, work: Path, problems: tuple[str, ...]) -> dict[str, object]:
    """The reference kit's score per problem (graded here if this session has not yet)."""
    if not REFERENCE_GRADES or not all(any(m.problem_id == p for m in REFERENCE_GRADES[0]) for p in problems):
        measurements, _ = grade_tree("starter/hw4 (reference, for comparison)", kit_root, kit_root,
                                     work / "reference", stage_config(problems))
        REFERENCE_GRADES.insert(0, measurements)
    return {p.problem_id: p for p in score_run(RUBRIC, REFERENCE_GRADES[0]).problems}


INFINITE_LOOP = parse_mutants({"mutants": [{
    "id": "layernorm_fw_spins_forever", "description": "ker_layer_norm never returns",
    "kind": "correctness", "must_fail": ["2.1"],
    "edits": [{"file": "src/layernorm_kernel.cu", "find": "// BEGIN SOLUTION: Problem 2.1 ker_layer_norm",
               "replace": "// BEGIN SOLUTION: Problem 2.1 ker_layer_norm\n  while (clock64() >= 0) {}"}],
}]})[0]


@pytest.mark.timeout(1200)
def test_infinite_loop_kernel_times_out_and_grading_goes_on(kit_root: Path, tmp_path: Path, work: Path) -> None:
    tree = build_variant(INFINITE_LOOP, kit_root, tmp_path / "spin")
    config = stage_config(("2.1", "2.2"), timing=replace(TIMING, call_timeout_s=20))
    measurements, score = grade_tree("infinite-loop kernel", tree, kit_root, work / "spin", config)
    by_id = {m.problem_id: m for m in measurements}
    # The first hang fails its own case and names the launcher (rubrics.hw4.hangs); every other
    # case calling it is settled with those words, without a timeout. 2.1 scores nothing.
    words = "your LayerNorm forward (launch_layernorm) did not return within 20 s in case abi:"
    cases_21 = [*by_id["2.1"].cases_by("abi"), *by_id["2.1"].cases_by("binding")]
    assert cases_21 and not any(c.ok for c in cases_21), by_id["2.1"].to_dict()
    assert [c.message.startswith(f"hung: {words}") for c in cases_21 if c.ran] == [True], by_id["2.1"].to_dict()
    assert all(c.message.startswith(f"not run: {words}") for c in cases_21 if not c.ran), by_id["2.1"].to_dict()
    assert score.problem("2.1").points == 0
    # Grading went on: 2.2's own launcher passed through the C ABI; its binding runs the
    # (hanging) fused forward first, so those cases are settled with the same words.
    assert by_id["2.2"].cases_by("abi") and all(c.ok for c in by_id["2.2"].cases_by("abi"))
    assert by_id["2.2"].cases_by("binding") and all(c.message.startswith(f"not run: {words}")
                                              for c in by_id["2.2"].cases_by("binding")), by_id["2.2"].to_dict()


def _broken_kit(tmp_path: Path, kernels: tuple[str, ...]) -> Path:
    """The reference kit zipped with a syntax error in each of `kernels` (src/<name>.cu)."""
    tree = tmp_path / "broken"
    shutil.copytree(RUBRIC.starter_dir, tree, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for name in kernels:
        path = tree / f"src/{name}.cu"
        path.write_text(path.read_text().replace("__global__", "__global__ syntax error here", 1))
    return zip_tree(tree, tmp_path / "broken.zip")


COMPILE_CONFIG = PipelineConfig(UnpackLimits(200 * 2**20, 50 * 2**20, 5000, 24, 100.0), toolchain(), None, 3, 65536)


def test_compile_error_blocks_only_the_problems_that_need_the_kernel(tmp_path: Path) -> None:
    archive = _broken_kit(tmp_path, ("layernorm_kernel",))
    ran: list[tuple[str, ...]] = []

    def stage(rubric: object, staged: Path, reference: Path, work_dir: Path,
              problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        ran.append(tuple(problems))
        return []

    outcome = grade_submission(archive, RUBRIC, tmp_path / "job", COMPILE_CONFIG, gpu_stage=stage)
    # The softmax problems still go to the GPU stage; the LayerNorm ones say which file failed.
    assert ran and set(ran[0]) == {"1.1", "1.2"}, ran
    by_id = {p.problem_id: p for p in outcome.problems}
    for pid in ("2.1", "2.2"):
        assert by_id[pid].points == 0 and "layernorm_kernel" in by_id[pid].message, by_id[pid]
    assert "syntax" in outcome.stages["build"].log


def test_compile_error_in_every_kernel_is_a_build_error(tmp_path: Path) -> None:
    archive = _broken_kit(tmp_path, ("softmax_kernel", "layernorm_kernel"))
    outcome = grade_submission(archive, RUBRIC, tmp_path / "job", COMPILE_CONFIG,
                               gpu_stage=lambda *a: pytest.fail("the GPU stage ran with nothing built"))
    assert outcome.state.value == "failed" and outcome.error_class.value == "build_error"
    assert "syntax" in outcome.stages["build"].log


# --------------------------------------------------------------------------- cheating


CHEATS = parse_mutants({"mutants": [
    {"id": "cheat_patches_timers", "kind": "speed", "must_fail": ["2.1"],
     "description": "the student's MiniTorch freezes every clock it can reach",
     "edits": [{"file": "minitorch/__init__.py",
                "find": '"""A compact MiniTorch for llmsys_hw4',
                "replace": 'import time as _t\n_t.perf_counter = lambda: 0.0\n_t.perf_counter_ns = lambda: 0\n'
                           '_t.time = lambda: 0.0\n_t.monotonic = lambda: 0.0\n"""A compact MiniTorch for llmsys_hw4'}]},
    {"id": "cheat_slows_own_baseline", "kind": "speed", "must_fail": ["2.1"],
     "description": "every basic zip op of the student's MiniTorch sleeps, inflating its own baseline",
     "edits": [{"file": "minitorch/cuda_kernel_ops.py",
                "find": "            shape = shape_broadcast(a.shape, b.shape)\n            res, buf = _new(shape, a.backend)",
                "replace": "            __import__('time').sleep(0.003)\n            shape = shape_broadcast(a.shape, b.shape)\n"
                           "            res, buf = _new(shape, a.backend)"}]},
    {"id": "cheat_caches_outputs", "kind": "correctness", "must_fail": ["1.1"],
     "description": "the fused softmax returns the first result computed for a shape",
     "edits": [{"file": "minitorch/tensor_functions.py",
                "find": "        out = inp.backend.attn_softmax_fw(inp, mask, mask_future=mask_future)\n",
                "replace": "        cache = Attn_Softmax.__dict__.get('kg_cache')\n"
                           "        if cache is None:\n"
                           "            cache = {}\n"
                           "            Attn_Softmax.kg_cache = cache\n"
                           "        key = (tuple(inp.shape), mask_future)\n"
                           "        if key not in cache:\n"
                           "            cache[key] = inp.backend.attn_softmax_fw(inp, mask, mask_future=mask_future)\n"
                           "        out = cache[key]\n"}]},
    {"id": "cheat_sniffs_public_shapes", "kind": "correctness", "must_fail": ["2.1"],
     "description": "LayerNorm forward handles only the course's hidden size 32 correctly",
     "edits": [{"file": "src/layernorm_kernel.cu", "find": "const int hidden4 = hidden_dim / 4;\n  ker_layer_norm<<<",
                "replace": "const int hidden4 = hidden_dim == 32 ? hidden_dim / 4 : 8;\n  ker_layer_norm<<<"}]},
]})


@pytest.mark.timeout(1200)
def test_cheats_gain_nothing(kit_root: Path, tmp_path: Path, work: Path) -> None:
    # every problem a cheat names: in its own part of the suite no other test graded the kit
    ref_scores = reference_scores(kit_root, work, tuple(sorted({p for c in CHEATS for p in c.must_fail})))
    reference = {m.problem_id: m for m in REFERENCE_GRADES[0]}
    for cheat in CHEATS:
        tree = build_variant(cheat, kit_root, tmp_path / cheat.id)
        measurements, score = grade_tree(f"cheat {cheat.id}", tree, kit_root, work / cheat.id,
                                         stage_config(cheat.must_fail))
        for pid in cheat.must_fail:
            got = score.problem(pid)
            measured = next(m for m in measurements if m.problem_id == pid)
            if cheat.kind == "correctness":
                # Caught: a failed case costs correctness points. The rubric's hidden share is
                # given in proportion to the hidden cases passed, so a cheat that fails a
                # course-like case keeps those (3.93 of 4 for the output cache on the H200) but
                # loses the public share and every speed point.
                assert got.status == "failed" and got.correctness_points < ref_scores[pid].correctness_points, (  # type: ignore[attr-defined]
                    cheat.id, got.to_dict())
                if any(c.public for c in measured.failed_cases):
                    assert got.speed_points == 0, (cheat.id, got.to_dict())
                continue
            assert got.points <= ref_scores[pid].points + 0.6, (cheat.id, got.to_dict())  # type: ignore[attr-defined]
            honest = score_run(RUBRIC, list(reference.values())).problem(pid)
            if waited_off_cpu(measured):  # a sleeping baseline may still raise the figure: not trusted
                assert got.speed_points == 0 and got.flags, (cheat.id, got.to_dict())
            elif got.speedup is not None and honest.speedup is not None:  # the figure that scores
                assert got.speedup.speedup <= honest.speedup.speedup * 1.25, (cheat.id, got.to_dict())


@pytest.mark.timeout(1200)
def test_every_mutant_loses_points_on_its_problems(kit_root: Path, tmp_path: Path, work: Path) -> None:
    # The gaming mutants lose nothing by design (values right): bench/gaming.py proves on real
    # submissions that they gain nothing either; the convention mutants must lose nothing (below).
    mutants = [m for m in load_mutants("hw4") if m.kind in ("correctness", "speed")]
    speed_problems = tuple(sorted({p for m in mutants if m.kind == "speed" for p in m.must_fail} - {"3"}))
    reference = reference_scores(kit_root, work, speed_problems)
    trees = build_all(mutants, kit_root, tmp_path / "trees")
    failures = []
    for mutant in mutants:
        measurements, score = grade_tree(f"mutant {mutant.id} ({mutant.kind})", trees[mutant.id], kit_root,
                                         work / mutant.id, stage_config(mutant.must_fail))
        for pid in mutant.must_fail:
            got = next(s for s in score.problems if s.problem_id == pid)
            lost_correctness = got.correctness_points < got.max_points - 6 or got.status != "passed"
            lost_speed = pid in reference and got.points < reference[pid].points - 0.5  # type: ignore[attr-defined]
            if not (lost_correctness if mutant.kind == "correctness" else (lost_correctness or lost_speed)):
                failures.append((mutant.id, pid, got.to_dict()))
    assert not failures, failures


@pytest.mark.timeout(1200)
def test_convention_mutants_keep_every_correctness_point(kit_root: Path, tmp_path: Path, work: Path) -> None:
    """A kit that reads a launcher's arguments as the starter's comments allow but its own
    launcher does not (kind "convention": LightSeq's `inp` as the LayerNorm output) keeps every
    correctness point of its problems: the C ABI cases, wrong under the starter's reading,
    pass under the open one and say so; the binding cases pass as they are."""
    mutants = [m for m in load_mutants("hw4") if m.kind == "convention"]
    assert mutants
    trees = build_all(mutants, kit_root, tmp_path / "trees")
    for mutant in mutants:
        measurements, score = grade_tree(f"convention {mutant.id}", trees[mutant.id], kit_root, work / mutant.id,
                                         stage_config(mutant.must_pass))
        for pid in mutant.must_pass:
            got = score.problem(pid)
            measured = next(m for m in measurements if m.problem_id == pid)
            assert measured.cases_by("abi") and measured.cases_by("binding"), (mutant.id, got.to_dict())
            assert not measured.failed_cases, (mutant.id, [c.describe() for c in measured.failed_cases])
            assert all(c.message.startswith("passed reading") for c in measured.cases_by("abi")), (
                mutant.id, [c.describe() for c in measured.cases_by("abi")][:3])
            correctness = next(p for p in RUBRIC.problems if p.id == pid).scoring.correctness_points
            assert got.correctness_points == correctness, (mutant.id, got.to_dict())
