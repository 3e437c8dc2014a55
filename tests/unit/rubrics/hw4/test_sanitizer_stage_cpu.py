"""hw4's compute-sanitizer pass (rubrics/hw4/sanitize.py) inside the real GPU stage, on a CPU:
the CPU stand-in submission (tests/fixtures/cpu_standin.py) graded by run_gpu_stage with its
sandboxed children, and a fake `compute-sanitizer`, a shell script that reads the options the
stage gives it, leaves a mark in the child's folder, runs the wrapped child (the real
worker.gpu.child, whose channel to the parent passes through it), then writes the report kept
beside it for the tool asked into the log file the stage named, as the real tool does at exit.

What is proven: a problem whose C ABI case failed (a wrong value) or crashed gets exactly one
session on its smallest failed case, memcheck first and each next tool (racecheck, synccheck,
initcheck) only while the ones before found nothing; the findings land in its telemetry with the submission's own paths and in its reasons;
a problem that passed gets none; a tool that is missing or runs past its cap leaves a note, and
the points are those of a run without the tool.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import cpu_standin  # noqa: E402
from gpu_stage_support import base, policy, run_stage, short_cases, stage_config, trusted  # noqa: E402,F401  (fixtures)

from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.sanitizer import TOOLS, SanitizerConfig  # noqa: E402
from worker.scoring import RunScore, score_run  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_standin.have_compiler(), reason="g++ is needed to build the CPU stand-in kernels")

PROBLEMS = ("1.1", "1.2", "2.1")
FAKE = """#!/bin/sh
# A fake compute-sanitizer: the options the stage passes (each with a value), then the program.
tool=""; log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool="$2"; shift 2 ;;
    --log-file) log="$2"; shift 2 ;;
    --*) shift 2 ;;
    *) break ;;
  esac
done
here=$(dirname "$0")
echo "$tool" > "kg-fake-sanitizer-$tool"
if [ -f "$here/slow" ]; then sleep 60; fi
"$@"
code=$?
if [ -f "$here/$tool.link" ]; then ln -sf "$(cat "$here/$tool.link")" "$log"
elif [ -f "$here/$tool.report" ]; then cat "$here/$tool.report" > "$log"; fi
exit $code
"""
# Where the stand-in's kernels were built, as a real report would name them (never shown).
MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at void ker_attn_softmax<32, 4>(float *, const float *, int, int, bool)+0xc0 in /build/elsewhere/src/softmax_kernel.cu:42
=========     by thread (0,0,0) in block (1,0,0)
=========     and is 4 bytes after the nearest allocation at 0x7f26f4800000 of size 1024 bytes
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""
NOTHING = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
# As on the H200: a block reduction's shared storage reused without a barrier shows first
# inside the library's header, then at the student's own lines.
RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Read access at void cub::BlockReduceWarpReductions<float>::Apply(float)+0x90 in /usr/local/cuda/include/cub/block_reduce_warp_reductions.cuh:143
=========     and Write access at void cub::Copy(float *)+0x20 in /usr/local/cuda/include/cub/uninitialized_copy.cuh:60 [576 hazards]
=========
========= Error: Race reported between Write access at ker_attn_softmax(float *)+0xd0 in /build/elsewhere/src/softmax_kernel.cu:77
=========     and Read access at ker_attn_softmax(float *)+0x100 in softmax_kernel.cu:80 [256 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
# initcheck's form: a read of global memory that nothing wrote.
INITCHECK = """========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at ker_attn_softmax(float *, const float *, int, int, bool)+0x1a0 in /build/elsewhere/src/softmax_kernel.cu:63
=========     by thread (3,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""


def fake_tool(folder: Path, reports: dict[str, str], slow: bool = False, links: dict[str, Path] | None = None) -> str:
    """The fake at folder/bin/compute-sanitizer, with a report per tool (or, for a tool in
    `links`, a link to that file left where the log should be); its path."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for path in (folder, bin_dir):
        path.chmod(0o755)  # the sandbox user reaches it
    tool = bin_dir / "compute-sanitizer"
    tool.write_text(FAKE)
    tool.chmod(0o755)
    for name, text in reports.items():
        (bin_dir / f"{name}.report").write_text(text)
    for name, target in (links or {}).items():
        (bin_dir / f"{name}.link").write_text(str(target))
    if slow:
        (bin_dir / "slow").write_text("")
    return str(tool)


def graded(base: Path, trusted: Path, policy: SandboxPolicy, name: str,
           sanitizer: SanitizerConfig | None) -> tuple[dict, RunScore]:
    """The stand-in with a wrong softmax forward (1.1) and an aborting softmax backward (1.2),
    2.1 right, graded with `sanitizer`: the measurements and the score."""
    config = dataclasses.replace(stage_config(policy, problems=PROBLEMS), sanitizer=sanitizer)
    by_id = run_stage(base, name, trusted, config, ("BREAK_MASK", "CRASH_SOFTMAX_BW"))
    return by_id, score_run(load_rubric("hw4"), [by_id[p] for p in PROBLEMS])


@pytest.fixture(scope="module")
def without_tool(base: Path, trusted: Path, policy: SandboxPolicy) -> tuple[dict, RunScore]:
    with pytest.MonkeyPatch.context() as patch:
        from gpu_stage_support import shorten_cases
        shorten_cases(patch)
        return graded(base, trusted, policy, "no-sanitizer", None)


def _smallest_failed_abi(m) -> str:  # noqa: ANN001
    failed = [c for c in m.cases_by("abi") if not c.ok]
    return min(failed, key=lambda c: (math.prod(c.shape), c.case_id)).case_id


def _correctness(score: RunScore) -> dict[str, tuple[float, str]]:
    return {p.problem_id: (p.correctness_points, p.status) for p in score.problems}


def test_without_the_tool_nothing_runs(without_tool: tuple[dict, RunScore]) -> None:
    by_id, _ = without_tool
    assert by_id["1.1"].failed_cases and by_id["1.2"].failed_cases and not by_id["2.1"].failed_cases
    assert all("sanitizer" not in m.telemetry for m in by_id.values())


def test_a_failed_problem_gets_one_session_and_its_findings_are_shown(
        base: Path, trusted: Path, policy: SandboxPolicy, short_cases: dict,
        without_tool: tuple[dict, RunScore]) -> None:
    tool = fake_tool(base / "fake-cuda", {"memcheck": MEMCHECK})
    by_id, score = graded(base, trusted, policy, "memcheck", SanitizerConfig("auto", tool, 120.0))
    work = base / "memcheck" / "work"
    for pid in ("1.1", "1.2"):  # a wrong value, a crash (the launcher aborts)
        record = by_id[pid].telemetry["sanitizer"]
        assert record["tools"] == ["memcheck"] and record["tool"] == "memcheck" and record["note"] == "", record
        assert record["case"] == _smallest_failed_abi(by_id[pid]) and record["seconds"] > 0
        first = record["findings"][0]
        assert (first["kernel"], first["file"], first["line"]) == ("ker_attn_softmax<32, 4>", "src/softmax_kernel.cu", 42)
        assert (first["thread"], first["block"]) == ("(0,0,0)", "(1,0,0)")
        assert len(record["findings"]) == 2  # the access, then the API error it caused
        # the wrapped child ran: its mark in the session's own folder, and no racecheck after findings
        assert (work / f"sanitizer-{pid}-memcheck" / "kg-fake-sanitizer-memcheck").is_file()
        assert not (work / f"sanitizer-{pid}-racecheck").exists()
        reasons = score.problem(pid).reasons
        assert (f"{pid}: compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes in ker_attn_softmax<32, 4> "
                f"at src/softmax_kernel.cu:42, thread (0,0,0) block (1,0,0) (4 bytes after the nearest allocation of "
                "size 1024 bytes)") in reasons, reasons
        assert not any("/build/elsewhere" in r for r in reasons)
    assert "sanitizer" not in by_id["2.1"].telemetry and not (work / "sanitizer-2.1-memcheck").exists()
    assert not any("compute-sanitizer" in line for line in score.problem("2.1").reasons + score.problem("2.1").notes)
    assert _correctness(score) == _correctness(without_tool[1])  # findings never change points
    assert score.problem("1.1").points == without_tool[1].problem("1.1").points


def test_racecheck_runs_only_when_memcheck_found_nothing(base: Path, trusted: Path, policy: SandboxPolicy,
                                                         short_cases: dict) -> None:
    tool = fake_tool(base / "fake-cuda-race", {"memcheck": NOTHING, "racecheck": RACECHECK})
    by_id, score = graded(base, trusted, policy, "racecheck", SanitizerConfig("auto", tool, 120.0))
    record = by_id["1.1"].telemetry["sanitizer"]
    assert record["tools"] == ["memcheck", "racecheck"] and record["tool"] == "racecheck", record
    race, in_library = record["findings"]  # the student's own line first
    assert (in_library["file"], in_library["line"]) == ("block_reduce_warp_reductions.cuh", 143)
    assert (race["kind"], race["kernel"], race["file"], race["line"]) == (
        "race between write and read", "ker_attn_softmax", "src/softmax_kernel.cu", 77)
    assert race["detail"] == "the read at src/softmax_kernel.cu:80, 256 hazards"
    assert ("1.1: compute-sanitizer racecheck: race between write and read in ker_attn_softmax at "
            "src/softmax_kernel.cu:77 (the read at src/softmax_kernel.cu:80, 256 hazards)") in score.problem("1.1").reasons


def test_a_tool_that_finds_nothing_says_so_in_a_note(base: Path, trusted: Path, policy: SandboxPolicy,
                                                     short_cases: dict) -> None:
    tool = fake_tool(base / "fake-cuda-nothing", dict.fromkeys(TOOLS, NOTHING))
    by_id, score = graded(base, trusted, policy, "nothing", SanitizerConfig("auto", tool, 120.0))
    record = by_id["1.1"].telemetry["sanitizer"]
    assert record["tools"] == list(TOOLS) and record["findings"] == [] and record["note"] == ""
    assert any("compute-sanitizer (memcheck, racecheck, synccheck, initcheck) found no bad access, race, barrier "
               "misuse or uninitialized read" in n for n in score.problem("1.1").notes), score.problem("1.1").notes


def test_initcheck_runs_last_and_names_a_read_of_memory_never_written(base: Path, trusted: Path, policy: SandboxPolicy,
                                                                     short_cases: dict) -> None:
    tool = fake_tool(base / "fake-cuda-init", {"memcheck": NOTHING, "racecheck": NOTHING, "synccheck": NOTHING,
                                               "initcheck": INITCHECK})
    by_id, score = graded(base, trusted, policy, "initcheck", SanitizerConfig("auto", tool, 120.0))
    record = by_id["1.1"].telemetry["sanitizer"]
    assert record["tools"] == list(TOOLS) and record["tool"] == "initcheck", record
    [finding] = record["findings"]
    assert (finding["kind"], finding["kernel"], finding["file"], finding["line"]) == (
        "Uninitialized __global__ memory read of size 4 bytes", "ker_attn_softmax", "src/softmax_kernel.cu", 63)
    assert ("1.1: compute-sanitizer initcheck: Uninitialized __global__ memory read of size 4 bytes in "
            "ker_attn_softmax at src/softmax_kernel.cu:63, thread (3,0,0) block (0,0,0)") in score.problem("1.1").reasons


def test_a_kernel_stopped_at_its_own_assert_ends_the_session_with_a_note(base: Path, trusted: Path, policy: SandboxPolicy,
                                                                          short_cases: dict) -> None:
    assert_report = ("========= COMPUTE-SANITIZER\n========= Warp assert\n=========     at __assertfail+0x30\n"
                     "=========     by thread (0,0,0) in block (0,0,0)\n========= ERROR SUMMARY: 1 error\n")
    tool = fake_tool(base / "fake-cuda-assert", {"memcheck": assert_report, "racecheck": RACECHECK})
    by_id, score = graded(base, trusted, policy, "assert", SanitizerConfig("auto", tool, 120.0))
    record = by_id["1.1"].telemetry["sanitizer"]
    assert record["tools"] == ["memcheck"] and record["findings"] == [], record
    assert "stopped at its own assert()" in record["note"], record
    problem = score.problem("1.1")
    assert not any("compute-sanitizer" in line for line in problem.reasons + problem.notes), problem


def test_a_missing_tool_is_a_note_and_the_same_points(base: Path, trusted: Path, policy: SandboxPolicy,
                                                      short_cases: dict, without_tool: tuple[dict, RunScore]) -> None:
    by_id, score = graded(base, trusted, policy, "missing", SanitizerConfig("auto", None, 120.0))
    for pid in ("1.1", "1.2"):
        record = by_id[pid].telemetry["sanitizer"]
        assert record["tools"] == [] and record["seconds"] == 0.0 and "was not found" in record["note"], record
    assert "sanitizer" not in by_id["2.1"].telemetry
    assert not (base / "missing" / "work" / "sanitizer-1.1-memcheck").exists()
    assert _correctness(score) == _correctness(without_tool[1])
    assert [s.points for s in score.problems][:2] == [s.points for s in without_tool[1].problems][:2]


def test_a_tool_past_its_cap_is_stopped_with_a_note_and_the_same_points(
        base: Path, trusted: Path, policy: SandboxPolicy, short_cases: dict,
        without_tool: tuple[dict, RunScore]) -> None:
    tool = fake_tool(base / "fake-cuda-slow", {"memcheck": MEMCHECK}, slow=True)
    by_id, score = graded(base, trusted, policy, "slow", SanitizerConfig("auto", tool, 3.0))
    first = by_id["1.1"].telemetry["sanitizer"]
    assert first["tools"] == ["memcheck"] and first["findings"] == [], first
    assert "ran out of time" in first["note"], first
    second = by_id["1.2"].telemetry["sanitizer"]  # the cap is the whole run's: nothing left for 1.2
    assert second["tools"] == [] and "was used up" in second["note"], second
    assert sum(by_id[p].telemetry["sanitizer"]["seconds"] for p in ("1.1", "1.2")) < 3.0 + 15.0
    assert _correctness(score) == _correctness(without_tool[1])
    assert [s.points for s in score.problems][:2] == [s.points for s in without_tool[1].problems][:2]


def test_a_log_left_as_a_link_to_a_root_only_file_is_not_read(base: Path, trusted: Path, policy: SandboxPolicy,
                                                              short_cases: dict) -> None:
    """The log is the job's to replace (issue 54): a link to a 0600 file holding a report is
    never followed, so nothing of that file reaches the findings, the reasons or the notes."""
    token = f"ker_secret_{uuid.uuid4().hex}"
    secret = base / "secret-report.txt"
    secret.write_text(MEMCHECK.replace("ker_attn_softmax", token))
    secret.chmod(0o600)
    tool = fake_tool(base / "fake-cuda-link", {}, links={"memcheck": secret})
    by_id, score = graded(base, trusted, policy, "link", SanitizerConfig("auto", tool, 120.0))
    record = by_id["1.1"].telemetry["sanitizer"]
    assert record["tools"] == list(TOOLS) and record["findings"] == [], record
    assert token not in repr(by_id) and token not in repr(score)
