"""The mutant set (rubrics/hw4/mutants.yaml): every mutant still applies to the reference kit,
changes it, and compiles (mutants must be realistic); so do the GPU exploit suite's
(tests/gpu/test_exploits_gpu.py), which only a GPU machine runs. CPU only; nvcc checks skip
only where nvcc is absent. Set KG_BUILD_CACHE to a folder to reuse nvcc outputs between runs.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gpu.test_exploits_gpu import exploits
from worker.build import BuildResult, Toolchain, build_kernels, cuda_include_dirs
from worker.mutants import (
    Edit,
    Mutant,
    MutantError,
    apply_mutant,
    load_mutants,
    mutate_text,
    parse_mutants,
    touched_kernels,
)
from worker.rubric import load_rubric
from worker.starter_kit import starter_files

CHECK_ARCH = "-arch=sm_90"
MUTANTS = load_mutants("hw4")
EXPLOITS = [case.mutant for case in exploits(os.getpid(), 0)]
RUBRIC = load_rubric("hw4")


def _nvcc() -> str | None:
    for cand in (os.environ.get("KG_NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    return None


# --------------------------------------------------------------------------- module units


def _mutant(*edits: Edit) -> Mutant:
    return Mutant("m", "test", "correctness", ("1.1",), tuple(edits))


def test_find_must_occur_exactly_once(tmp_path: Path) -> None:
    (tmp_path / "a.cu").write_text("x = 1; x = 1; y = 2;")
    assert mutate_text(tmp_path, _mutant(Edit("a.cu", "y = 3;", find="y = 2;")))["a.cu"] == "x = 1; x = 1; y = 3;"
    with pytest.raises(MutantError, match="occurs 2 times"):
        mutate_text(tmp_path, _mutant(Edit("a.cu", "z", find="x = 1;")))
    with pytest.raises(MutantError, match="occurs 0 times"):
        mutate_text(tmp_path, _mutant(Edit("a.cu", "z", find="nope")))
    with pytest.raises(MutantError, match="not in the reference"):
        mutate_text(tmp_path, _mutant(Edit("b.cu", "z", find="x")))


def test_regex_edits_and_edits_in_sequence(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    return (a, b)\n")
    m = _mutant(Edit("a.py", r"return (\1)", regex=r"return \((a), b\)"), Edit("a.py", "g()", find="f()"))
    assert mutate_text(tmp_path, m)["a.py"] == "def g():\n    return (a)\n"
    with pytest.raises(MutantError, match="matches 0 times"):
        mutate_text(tmp_path, _mutant(Edit("a.py", "", regex=r"zzz")))


def test_apply_copies_the_tree_without_build_junk(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    (ref / "src").mkdir(parents=True)
    (ref / "src" / "k.cu").write_text("int a = 1;\n")
    (ref / "src" / "k.so").write_bytes(b"elf")
    (ref / "other.txt").write_text("same\n")
    dest = apply_mutant(ref, _mutant(Edit("src/k.cu", "int a = 2;", find="int a = 1;")), tmp_path / "out")
    assert (dest / "src" / "k.cu").read_text() == "int a = 2;\n"
    assert (dest / "other.txt").read_text() == "same\n"
    assert not (dest / "src" / "k.so").exists()
    with pytest.raises(MutantError):  # fails before writing
        apply_mutant(ref, _mutant(Edit("src/k.cu", "", find="missing")), tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize(
    "raw",
    [
        {"mutants": [{"id": "a", "kind": "bogus", "must_fail": ["1.1"], "edits": [{"file": "f", "find": "x", "replace": "y"}]}]},
        {"mutants": [{"id": "a", "kind": "speed", "must_fail": ["9"], "edits": [{"file": "f", "find": "x", "replace": "y"}]}]},
        {"mutants": [{"id": "a", "kind": "speed", "must_fail": ["3"], "edits": []}]},
        {"mutants": [{"id": "a", "kind": "speed", "must_fail": ["3"], "edits": [{"file": "f", "replace": "y"}]}]},
        {"mutants": [{"id": "a", "kind": "speed", "must_fail": ["3"], "edits": [{"file": "../f", "find": "x", "replace": "y"}]}]},
        {"mutants": [
            {"id": "a", "kind": "speed", "must_fail": ["3"], "edits": [{"file": "f", "find": "x", "replace": "y"}]},
            {"id": "a", "kind": "speed", "must_fail": ["3"], "edits": [{"file": "f", "find": "x", "replace": "y"}]},
        ]},
        # a convention mutant names the problems it must pass, and only those
        {"mutants": [{"id": "a", "kind": "convention", "must_fail": ["3"], "edits": [{"file": "f", "find": "x", "replace": "y"}]}]},
        {"mutants": [{"id": "a", "kind": "convention", "must_pass": ["3"], "must_fail": ["1.1"],
                      "edits": [{"file": "f", "find": "x", "replace": "y"}]}]},
        {"mutants": [{"id": "a", "kind": "speed", "must_pass": ["3"], "edits": [{"file": "f", "find": "x", "replace": "y"}]}]},
        {"mutants": [{"id": "a", "kind": "convention", "must_pass": ["9"], "edits": [{"file": "f", "find": "x", "replace": "y"}]}]},
    ],
)
def test_malformed_sets_are_rejected(raw: dict) -> None:
    with pytest.raises(MutantError):
        parse_mutants(raw, problem_ids=frozenset({"1.1", "3"}))


# --------------------------------------------------------------------------- the hw4 set


def test_the_set_is_big_and_covers_every_problem() -> None:
    assert len(MUTANTS) >= 12
    covered = {p for m in MUTANTS for p in m.must_fail}
    assert covered == {"1.1", "1.2", "2.1", "2.2", "3"}
    assert {m.kind for m in MUTANTS} == {"correctness", "speed", "gaming", "convention"}
    conventions = [m for m in MUTANTS if m.kind == "convention"]
    assert all(m.must_pass and not m.must_fail for m in conventions)
    assert {p for m in conventions for p in m.must_pass} == {"2.2"}  # the open reading of launch_layernorm_bw


@pytest.mark.parametrize("mutant", MUTANTS + EXPLOITS, ids=[m.id for m in MUTANTS + EXPLOITS])
def test_mutant_applies_and_changes_only_its_files(mutant: Mutant, tmp_path: Path) -> None:
    ref = RUBRIC.starter_dir
    dest = apply_mutant(ref, mutant, tmp_path / "llmsys_hw4")
    for rel in starter_files(ref):
        before = (ref / rel).read_bytes()
        after = (dest / rel).read_bytes()
        if rel.as_posix() in mutant.files:
            assert before != after, f"{mutant.id}: {rel} unchanged"
        else:
            assert before == after, f"{mutant.id}: {rel} changed but not listed"
    for rel in mutant.files:
        if rel.endswith(".py"):
            compile((dest / rel).read_text(), rel, "exec")


CUDA_MUTANTS = [m for m in MUTANTS + EXPLOITS if any(not f.endswith(".py") for f in m.files)]


@pytest.fixture(scope="module")
def cuda_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[BuildResult]]:
    """Every CUDA mutant applied and its touched kernels built, all at once, one nvcc per core
    (a build keeps one core busy: built one test at a time, they took 6 minutes of a 2-core
    machine's suite). Mutant id -> its kernels' build results."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set KG_NVCC or put nvcc on PATH): cannot compile mutants")
    toolchain = Toolchain(nvcc=nvcc, flags=(*RUBRIC.nvcc_flags, CHECK_ARCH), include_dirs=cuda_include_dirs())
    cache = os.environ.get("KG_BUILD_CACHE")
    base = tmp_path_factory.mktemp("cuda-mutants")

    def build(mutant: Mutant) -> list[BuildResult]:
        root = apply_mutant(RUBRIC.starter_dir, mutant, base / mutant.id / "llmsys_hw4")
        targets = touched_kernels(mutant, RUBRIC.kernels, root)
        assert targets, f"{mutant.id}: touches CUDA files but no kernel source includes them"
        return build_kernels(root, targets, toolchain, cache_dir=Path(cache) if cache else None)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip((m.id for m in CUDA_MUTANTS), pool.map(build, CUDA_MUTANTS)))


# The first of these tests sets up the module's builds, every mutant's at once: 170 s alone on a
# 2-core machine (docs/benchmarks/cpu-suite.md), past the suite's 300 s beside the other test
# process on a slower day (2026-12-07's fresh-clone runs), so their limit allows for it.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutant", CUDA_MUTANTS, ids=[m.id for m in CUDA_MUTANTS])
def test_mutant_cuda_compiles(mutant: Mutant, cuda_builds: dict[str, list[BuildResult]]) -> None:
    failed = [r for r in cuda_builds[mutant.id] if not r.ok]
    assert not failed, f"{mutant.id} does not compile:\n" + "\n".join(f"--- {r.name}\n{r.log}" for r in failed)


# --------------------------------------------------------------------------- Python mutants on CPU
# The probes of tests/gpu/test_mutants.py, run here with the kit's NumpyOps backend (same
# fused-op interface, no GPU): proves the Python-side mutants are detected by the probes
# and the reference is not.

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from rubrics.hw4.probes import PROBES, probe_command, probe_env  # noqa: E402

PY_MUTANTS = [m for m in MUTANTS if m.detect in PROBES]


def _probe(tree: Path, detect: str) -> dict:
    proc = subprocess.run(
        [sys.executable, *probe_command(detect, "numpy")],
        cwd=tree, env=probe_env(), capture_output=True, text=True, timeout=240,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE_RESULT ")]
    assert proc.returncode == 0 and lines, f"probe {detect} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("PROBE_RESULT "):])


@pytest.fixture(scope="module")
def reference_probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tree = tmp_path_factory.mktemp("ref") / "llmsys_hw4"
    shutil.copytree(RUBRIC.starter_dir, tree, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return {detect: _probe(tree, detect) for detect in sorted({m.detect for m in PY_MUTANTS})}


def test_reference_passes_the_probes_on_cpu(reference_probes: dict[str, dict]) -> None:
    grads = reference_probes["binding_grads"]
    assert all(r["ok"] for r in grads.values()), grads
    calls = reference_probes["fused_calls"]
    assert all(n > 0 for n in calls["fused_counts"].values()), calls
    assert all(n == 0 for n in calls["unfused_counts"].values()), calls


@pytest.mark.parametrize("mutant", PY_MUTANTS, ids=[m.id for m in PY_MUTANTS])
def test_python_mutant_detected_on_cpu(mutant: Mutant, tmp_path: Path, reference_probes: dict) -> None:
    tree = apply_mutant(RUBRIC.starter_dir, mutant, tmp_path / "llmsys_hw4")
    result = _probe(tree, mutant.detect)
    if mutant.detect == "binding_grads":
        for problem in mutant.must_fail:
            assert not result[problem]["ok"], f"{mutant.id}: problem {problem} not detected: {result}"
    else:  # fused_calls: values right, some fused op never called
        losses = result["losses"]
        assert abs(losses["fused"] - losses["unfused"]) <= 1e-4 * max(1.0, abs(losses["unfused"])), losses
        assert min(result["fused_counts"].values()) == 0, result
