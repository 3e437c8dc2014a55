"""The grading core takes points away from realistic mistakes, proven on a CPU.

The mutant set (rubrics/hw4/mutants.yaml) is checked against real kernels on the GPU
(tests/gpu/test_mutants.py). Its mistakes that need no CUDA to express, the Python-side
mutants (every edit in minitorch/*.py: the binding's autodiff, the Transformer's fused path),
are applied here to the CPU stand-in submission (tests/fixtures/cpu_standin.py: the kit's
minitorch files, only cuda_kernel_ops.py replaced, so the mutants' `find` texts match) and
graded by rubrics.hw4.grade.run_gpu_stage (sandboxed children, C ABI + binding checks, Problem 3
checks and timing) and worker.scoring.score_run, on the mutant's `must_fail` problems only.
The stand-in's own broken kernels (cpu_kernels.cpp's BREAK_* switches, which mirror kernel
mutants) are graded on all four kernel problems.

Every mutant must score fewer points than the unmutated stand-in graded the same way (short
case list, small timing shapes, tiny Problem 3), on each problem it names, and the broken
kernels only on their own problem.
"""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import cpu_standin  # noqa: E402
from gpu_stage_support import KERNEL_PROBLEMS, base, describe, policy, run_stage, shorten_cases, stage_config, trusted  # noqa: E402,F401  (base, policy, trusted: fixtures)

from rubrics.hw4.timing_review import DEFERRED_FLAG_SHARE  # noqa: E402
from worker.mutants import Mutant, load_mutants, mutate_text  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.scoring import WITHHELD_WORDS, RunScore, score_run  # noqa: E402
from worker.timing import waited_beyond_slack  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_standin.have_compiler(), reason="g++ is needed to build the CPU stand-in kernels")


def _python_side(m: Mutant) -> bool:
    return all(e.file.startswith("minitorch/") and e.file.endswith(".py") for e in m.edits)


PYTHON_MUTANTS = [m for m in load_mutants("hw4") if _python_side(m) and m.kind != "gaming"]
# The gaming mutants that live in Python: graded here on the stand-in, the others (combine.cu)
# need nvcc and a GPU (bench/gaming.py on the corpus).
GAMING_PYTHON_MUTANTS = [m for m in load_mutants("hw4") if _python_side(m) and m.kind == "gaming"]
# Known members of that set: a mutant set that lost one (or a filter that stopped seeing
# one) fails here instead of silently testing less.
EXPECTED_PYTHON_MUTANTS = {"softmax_backward_swapped_tuple", "layernorm_backward_swapped_gamma_beta",
                           "fused_layernorm_calls_unfused", "fused_attention_calls_unfused"}

# cpu_kernels.cpp switches that break a kernel's values, and the problem each must fail.
BROKEN_KERNELS = {"BREAK_MASK": "1.1", "BREAK_LN_BW_GAMMA": "2.2"}
# cpu_kernels.cpp switches that follow a reading of the launcher's arguments the starter's
# comments allow, and the convention mutant whose Python side (the binding) goes with each.
CONVENTION_KERNELS = {"LN_BW_READS_OUTPUT": "layernorm_bw_reads_output"}
# Switches that hang or crash a kernel instead: graded (0 points, the rest goes on) by
# tests/unit/rubrics/hw4/test_gpu_stage_cpu.py (a crash) and
# tests/unit/rubrics/hw4/test_gpu_stage_hangs.py (a launcher that never returns, named once); a
# library that cannot be loaded at all, by tests/unit/rubrics/hw4/test_gpu_stage_loading.py.
HANG_OR_CRASH = {"SPIN_SOFTMAX_FW", "SPIN_LN_FW_HIDDEN_4", "CRASH_SOFTMAX_BW", "ABORT_AT_LOAD"}


@pytest.fixture(scope="module")
def short_grading():
    """The short case list and small timing shapes for every test of this module."""
    with pytest.MonkeyPatch.context() as mp:
        yield shorten_cases(mp)


@pytest.fixture(scope="module")
def baseline(base: Path, trusted: Path, policy: SandboxPolicy, short_grading: dict) -> RunScore:
    """The unmutated stand-in, graded like the mutants: full marks for correctness everywhere."""
    by_id = run_stage(base, "baseline", trusted, stage_config(policy))
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    for p in load_rubric("hw4").problems:
        s = score.problem(p.id)
        assert s.status == "passed" and s.correctness_points == p.scoring.correctness_points, (s.reasons,
                                                                                               describe(by_id[p.id]))
    return score


def _score(by_id: dict) -> RunScore:
    return score_run(load_rubric("hw4"), list(by_id.values()))


def test_the_python_side_mutants_are_all_here() -> None:
    assert {m.id for m in PYTHON_MUTANTS} == EXPECTED_PYTHON_MUTANTS


@pytest.mark.parametrize("mutant", GAMING_PYTHON_MUTANTS, ids=lambda m: m.id)
def test_gaming_mutant_is_caught_by_its_guard(mutant: Mutant, base: Path, trusted: Path, policy: SandboxPolicy,
                                              short_grading: dict, baseline: RunScore) -> None:
    """Each Python gaming mutant trips the guard made for it, asserted on the evidence the guard
    reads and on what it did with it, never on a speed figure (on a loaded machine the stand-in's
    tens of microseconds are noise; the figures live in bench/gaming_standin.py and docs/benchmarks/gaming.md,
    "Gaming on the CPU stand-in"). One that sleeps in its Python tensor ops spends its
    composition's time off the CPU: its speed points are withheld for review and each trial's
    composition time is cut to its CPU time. One that defers its fused work into the read of the
    result has that read's extra cost added to the fused op's time, with a flag."""
    assert {m.id for m in GAMING_PYTHON_MUTANTS} == {"gaming_python_sleep_in_tensor_ops",
                                                     "gaming_deferred_softmax_forward"}
    files = mutate_text(trusted, mutant)
    by_id = run_stage(base, f"gaming-{mutant.id}", trusted, stage_config(policy, problems=mutant.must_fail),
                      files=files)
    score = _score(by_id)
    for pid in mutant.must_fail:
        m, s, before = by_id[pid], score.problem(pid), baseline.problem(pid)
        assert m.status == "ok" and not m.failed_cases, describe(m)
        assert s.figure == "reference_ops" and before.figure == "reference_ops", (s.notes, before.notes)
        evidence, shapes = m.telemetry["timing_evidence"], m.telemetry["timing_shapes"]
        if mutant.id == "gaming_python_sleep_in_tensor_ops":
            # CPU time off the clock: the composition (2 ms asleep per tensor op) runs under a
            # tenth of its wall time on a CPU, the fused op most of it
            assert waited_beyond_slack(evidence["reference_ops_cpu_share"], evidence["custom_cpu_share"]), evidence
            assert any(WITHHELD_WORDS in f for f in s.flags), s.flags
            assert s.speed_points == 0 and s.correctness_points == before.correctness_points, s.reasons
            for shape in shapes:  # what scores is the composition's time less its waiting
                assert shape["ms"]["reference_ops"] < shape["raw"]["reference_ops"]["compute_ms"], shape
        else:
            # the read's extra cost: reading the fused op's result runs the softmax
            assert evidence["deferred_share"] >= DEFERRED_FLAG_SHARE, evidence
            assert any("counted as the fused op's" in f for f in s.flags), s.flags
            for shape in shapes:  # and it is added to the fused op's time, trial by trial
                assert shape["ms"]["custom"] > shape["raw"]["custom"]["compute_ms"], shape


def test_every_kernel_switch_is_graded_somewhere() -> None:
    switches = set(re.findall(r"^#ifdef\s+(\w+)", cpu_standin.CPU_KERNELS.read_text(), re.MULTILINE))
    assert switches == set(BROKEN_KERNELS) | set(CONVENTION_KERNELS) | HANG_OR_CRASH


@pytest.mark.parametrize("switch", sorted(CONVENTION_KERNELS))
def test_open_convention_keeps_every_correctness_point(switch: str, base: Path, trusted: Path, policy: SandboxPolicy,
                                                       short_grading: dict, baseline: RunScore) -> None:
    """A launcher that reads its arguments as the starter's comments allow but its own launcher
    does not (LightSeq's: `inp` is the LayerNorm output when betta is given), with the binding
    that goes with it (the convention mutant's Python edits), keeps every correctness point:
    each C ABI case, wrong under the starter's reading, passes under the open one and says so."""
    mutant = next(m for m in load_mutants("hw4") if m.id == CONVENTION_KERNELS[switch])
    python_side = dataclasses.replace(mutant, edits=tuple(e for e in mutant.edits if e.file.endswith(".py")))
    by_id = run_stage(base, f"convention-{switch}", trusted, stage_config(policy, problems=mutant.must_pass),
                      (switch,), files=mutate_text(trusted, python_side))
    score = _score(by_id)
    for pid in mutant.must_pass:
        m, s, before = by_id[pid], score.problem(pid), baseline.problem(pid)
        assert m.status == "ok" and not m.failed_cases, describe(m)
        assert m.cases_by("abi") and m.cases_by("binding"), describe(m)
        assert all(c.message.startswith("passed reading `inp` as the LayerNorm output") for c in m.cases_by("abi")), (
            [c.describe() for c in m.cases_by("abi")])
        assert s.correctness_points == before.correctness_points, s.reasons


@pytest.mark.parametrize("mutant", PYTHON_MUTANTS, ids=lambda m: m.id)
def test_python_side_mutant_loses_points(mutant: Mutant, base: Path, trusted: Path, policy: SandboxPolicy,
                                         short_grading: dict, baseline: RunScore) -> None:
    # `trusted` is an unmodified stand-in: the mutant's edits apply to its files.
    files = mutate_text(trusted, mutant)
    assert files and all(text != (trusted / rel).read_text() for rel, text in files.items())
    by_id = run_stage(base, f"mutant-{mutant.id}", trusted, stage_config(policy, problems=mutant.must_fail),
                      files=files)
    assert sorted(by_id) == sorted(mutant.must_fail)
    score = _score(by_id)
    for pid in mutant.must_fail:
        m, s, before = by_id[pid], score.problem(pid), baseline.problem(pid)
        # graded to the end (nothing crashed or hung): the checks themselves caught it
        assert m.status == "ok", describe(m)
        assert m.failed_cases, describe(m)
        assert s.points < before.points, (s.points, before.points, s.reasons)
        assert s.status == "failed" and s.speed_points == 0, s.reasons
        if mutant.kind == "correctness":
            assert s.correctness_points == 0, s.reasons
            # the C ABI is untouched: the binding's autodiff is what is wrong
            assert all(c.ok for c in m.cases_by("abi")), describe(m)
            assert any(c.case_id.startswith("binding:") for c in m.failed_cases), describe(m)
        else:  # speed: values right, the fused ops never ran
            assert [c.case_id for c in m.failed_cases] == ["p3-fused-ops-called"], describe(m)
            assert "never called with use_fused_kernel=True" in m.failed_cases[0].message
            assert any("p3-fused-ops-called" in r for r in s.reasons), s.reasons
            assert s.points < before.points


@pytest.mark.parametrize("switch", sorted(BROKEN_KERNELS))
def test_broken_standin_kernel_loses_points_only_on_its_problem(switch: str, base: Path, trusted: Path,
                                                                policy: SandboxPolicy, short_grading: dict,
                                                                baseline: RunScore) -> None:
    target = BROKEN_KERNELS[switch]
    by_id = run_stage(base, f"switch-{switch}", trusted, stage_config(policy, problems=KERNEL_PROBLEMS), (switch,))
    assert sorted(by_id) == sorted(KERNEL_PROBLEMS)
    score = _score(by_id)
    m, s = by_id[target], score.problem(target)
    assert m.status == "ok", describe(m)
    assert any(c.case_id.startswith("abi:") for c in m.failed_cases), describe(m)
    assert m.figure("student") is None  # a wrong kernel is not timed
    assert s.status == "failed" and s.correctness_points == 0 and s.points == 0, s.reasons
    assert s.points < baseline.problem(target).points
    for pid in KERNEL_PROBLEMS:
        if pid == target:
            continue
        other = score.problem(pid)
        assert by_id[pid].status == "ok" and not by_id[pid].failed_cases, describe(by_id[pid])
        assert other.status == "passed", other.reasons
        assert other.correctness_points == baseline.problem(pid).correctness_points
