"""worker/sanitizer.py's reading of compute-sanitizer reports, on the report lines the tool
printed on the H200 (compute-sanitizer 2025.3.1, CUDA 13.0: bench/sanitizer_probe.py), a report
of several findings, the tool's own messages, and finding the tool from the setting."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker import sanitizer
from worker.sanitizer import (
    LOG_NAME,
    Finding,
    distinct,
    find_sanitizer,
    kernel_name,
    not_instrumented,
    parse_report,
    read_log,
    relative_source,
    sanitizer_config,
    tool_messages,
    wrapper_argv,
)

MEMCHECK = """========= COMPUTE-SANITIZER
sync: unspecified launch failure
========= Invalid __global__ write of size 4 bytes
=========     at write_past_end(float *, int)+0xc0 in oob.cu:4
=========     by thread (0,0,0) in block (1,0,0)
=========     and is 1 bytes after the nearest allocation at 0x7f26f4800000 of size 1024 bytes
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""
RACECHECK = """========= COMPUTE-SANITIZER
sync: no error
========= Error: Race reported between Write access at shift_left(float *)+0xd0 in race.cu:5
=========     and Read access at shift_left(float *)+0x100 in race.cu:6 [1024 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
# synccheck on the H200 prints one finding per thread that missed the barrier.
SYNCCHECK = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp.
=========     at half_barrier(float *)+0xd0 in barrier.cu:6
=========     by thread (32,0,0) in block (0,0,0)
=========
========= Barrier error detected. Divergent thread(s) in warp.
=========     at half_barrier(float *)+0xd0 in barrier.cu:6
=========     by thread (33,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 2 errors
"""
# initcheck's location lines as the H200 printed them, under the usual head.
INITCHECK = """========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at add_into(float *, const float *)+0x80 in uninit.cu:4
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f32a2800000
=========
========= ERROR SUMMARY: 1 error
"""
NOT_INSTRUMENTED = """========= COMPUTE-SANITIZER
========= Error: Target application terminated before first instrumented API call
"""
# A student's kernel in the submission's tree, built elsewhere: paths as the build saw them,
# reads and writes by several threads, the program's own output in between.
SEVERAL = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at (anonymous namespace)::ker_layer_norm(float *, float *, float *, const float *, const float *, const float *, int)+0x1a0 in /srv/jobs/run-9/build/layernorm_kernel/src/layernorm_kernel.cu:51
=========     by thread (33,0,0) in block (0,0,0)
=========     and is 512 bytes after the nearest allocation at 0x7f0000000000 of size 1536 bytes
=========
printf from the student's kernel
========= Invalid __global__ read of size 16 bytes
=========     at (anonymous namespace)::ker_layer_norm(float *, float *, float *, const float *, const float *, const float *, int)+0x1a0 in /srv/jobs/run-9/build/layernorm_kernel/src/layernorm_kernel.cu:51
=========     by thread (34,0,0) in block (0,0,0)
=========
========= Invalid __shared__ write of size 4 bytes
=========     at void ker_attn_softmax<32, 4>(float *, const float *, int, int, bool)+0x80 in /elsewhere/src/includes/block_reduce.h:40
=========     by thread (5,0,0) in block (2,1,0)
=========     Address 0x400 is out of bounds
=========
========= Warning: Race reported between Read access at ker_attn_softmax_bw(float *, const float *, int)+0x10 in /x/src/softmax_kernel.cu:200
=========     and Write access at ker_attn_softmax_bw(float *, const float *, int)+0x20 in /x/src/softmax_kernel.cu:204 [8 hazards]
=========
========= ERROR SUMMARY: 4 errors
"""


def test_a_memcheck_report_names_the_access_the_kernel_the_line_and_the_thread() -> None:
    findings = parse_report("memcheck", MEMCHECK)
    assert findings[0] == Finding("memcheck", "Invalid __global__ write of size 4 bytes", "write_past_end", "oob.cu", 4,
                                  "(0,0,0)", "(1,0,0)", "1 bytes after the nearest allocation of size 1024 bytes")
    assert findings[0].text() == ("compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes in write_past_end "
                                  "at oob.cu:4, thread (0,0,0) block (1,0,0) (1 bytes after the nearest allocation "
                                  "of size 1024 bytes)")
    # the CUDA API error the access caused comes after it, with no kernel; the summary is no finding
    assert len(findings) == 2 and findings[1].kernel == "" and findings[1].kind.startswith("Program hit cudaError")


def test_a_racecheck_report_names_both_accesses() -> None:
    [race] = parse_report("racecheck", RACECHECK)
    assert (race.kind, race.kernel, race.file, race.line) == ("race between write and read", "shift_left", "race.cu", 5)
    assert race.detail == "the read at race.cu:6, 1024 hazards" and race.thread == ""
    assert race.text() == ("compute-sanitizer racecheck: race between write and read in shift_left at race.cu:5 "
                           "(the read at race.cu:6, 1024 hazards)")
    assert tool_messages(RACECHECK) == []  # a race is a finding, not the tool speaking of itself


def test_a_synccheck_report_names_the_barrier_once() -> None:
    findings = parse_report("synccheck", SYNCCHECK)
    assert len(findings) == 2 and len(distinct(findings)) == 1
    assert findings[0].text() == ("compute-sanitizer synccheck: Barrier error detected. Divergent thread(s) in warp in "
                                  "half_barrier at barrier.cu:6, thread (32,0,0) block (0,0,0)")


def test_an_initcheck_report_names_the_read_without_its_address() -> None:
    [read] = parse_report("initcheck", INITCHECK)
    assert read.text() == ("compute-sanitizer initcheck: Uninitialized __global__ memory read of size 4 bytes in "
                           "add_into at uninit.cu:4, thread (0,0,0) block (0,0,0)")


def test_a_kernels_own_assert_is_told_from_the_findings() -> None:
    # the H200's memcheck on the starter's `assert(false && "Not Implemented")` stubs
    report = ("========= COMPUTE-SANITIZER\n========= Warp assert\n=========     at __assertfail+0x30\n"
              "=========     by thread (0,0,0) in block (0,0,0)\n=========\n" + INITCHECK.split("\n", 1)[1])
    assert [(f.kind, f.device_assert) for f in parse_report("memcheck", report)] == [
        ("Warp assert", True), ("Uninitialized __global__ memory read of size 4 bytes", False)]
    assert not any(f.device_assert for f in parse_report("memcheck", MEMCHECK) + parse_report("initcheck", INITCHECK))


def test_a_program_that_made_no_cuda_call_has_no_findings_and_is_no_fault() -> None:
    """The tool exits 255 with this line when the program ends before any CUDA call."""
    assert parse_report("memcheck", NOT_INSTRUMENTED) == []
    assert not_instrumented(NOT_INSTRUMENTED) and not not_instrumented(MEMCHECK)
    assert tool_messages(NOT_INSTRUMENTED) == ["Error: Target application terminated before first instrumented API call"]


def test_several_findings_in_order_with_their_paths_in_the_submissions_tree(tmp_path: Path) -> None:
    (tmp_path / "src" / "includes").mkdir(parents=True)
    for name in ("src/layernorm_kernel.cu", "src/includes/block_reduce.h", "src/softmax_kernel.cu"):
        (tmp_path / name).write_text("")
    findings = [f.in_tree(tmp_path) for f in parse_report("memcheck", SEVERAL)]
    assert [(f.kind, f.kernel, f.file, f.line, f.thread, f.block) for f in findings] == [
        ("Invalid __global__ read of size 16 bytes", "ker_layer_norm", "src/layernorm_kernel.cu", 51, "(33,0,0)", "(0,0,0)"),
        ("Invalid __global__ read of size 16 bytes", "ker_layer_norm", "src/layernorm_kernel.cu", 51, "(34,0,0)", "(0,0,0)"),
        ("Invalid __shared__ write of size 4 bytes", "ker_attn_softmax<32, 4>", "src/includes/block_reduce.h", 40,
         "(5,0,0)", "(2,1,0)"),
        ("race between read and write (warning)", "ker_attn_softmax_bw", "src/softmax_kernel.cu", 200, "", ""),
    ]
    assert findings[2].detail == "out of bounds"  # the address itself means nothing to a student
    assert findings[3].detail == "the write at src/softmax_kernel.cu:204, 8 hazards"  # no host path shown
    assert "/srv/" not in " ".join(f.text() for f in findings)


def test_a_finding_survives_the_telemetry_round_trip() -> None:
    for finding in parse_report("memcheck", SEVERAL):
        assert Finding.from_dict(finding.to_dict()) == finding


@pytest.mark.parametrize(("reported", "name"), [
    ("write_past_end(float *, int)", "write_past_end"),
    ("(anonymous namespace)::ker(float *, const float *)", "ker"),
    ("void ker_attn_softmax<(int)32, (int)4>(float *, int)", "ker_attn_softmax<(int)32, (int)4>"),
    ("kg::ker_f(float (*)[4], int)", "kg::ker_f"),
    # as the H200's compute-sanitizer 2025.3 prints a kernel of an anonymous namespace
    ("<unnamed>::ker_layer_norm(float4 *, const float4 *)", "ker_layer_norm"),
    ("<unnamed>::ker_attn_softmax<(int)64, (int)2>(float *, int)", "ker_attn_softmax<(int)64, (int)2>"),
])
def test_a_kernels_name_loses_its_parameters(reported: str, name: str) -> None:
    assert kernel_name(reported) == name


def test_the_older_location_format_reads_too() -> None:
    old = "========= Invalid __global__ write of size 4\n=========     at 0x70 in /a/src/k.cu:9:ker(float*)\n" \
          "=========     by thread (1,0,0) in block (0,0,0)\n"
    [finding] = parse_report("memcheck", old)
    assert (finding.kernel, finding.file, finding.line) == ("ker", "/a/src/k.cu", 9)


def test_a_source_outside_the_tree_is_named_by_its_file_name(tmp_path: Path) -> None:
    assert relative_source("/usr/local/cuda/include/cub/x.cuh", tmp_path) == "x.cuh"
    assert relative_source("oob.cu", tmp_path) == "oob.cu"


def test_a_file_name_alone_is_found_in_the_tree_when_only_one_file_has_it(tmp_path: Path) -> None:
    # The tool prints "at ker_layer_norm(...)+0x3c0 in layernorm_kernel.cu:51": the name alone.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "layernorm_kernel.cu").write_text("// kernel\n")
    assert relative_source("layernorm_kernel.cu", tmp_path) == "src/layernorm_kernel.cu"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "layernorm_kernel.cu").write_text("// a copy\n")
    assert relative_source("layernorm_kernel.cu", tmp_path) == "layernorm_kernel.cu"  # which one: unknown
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "softmax_kernel.cu").write_text("")
    (tmp_path / "src" / "linked").symlink_to(tmp_path / "elsewhere")
    assert relative_source("softmax_kernel.cu", tmp_path) == "elsewhere/softmax_kernel.cu"  # not through the link


def test_the_wrapper_keeps_the_programs_exit_status_and_instruments_it_alone(tmp_path: Path) -> None:
    argv = wrapper_argv(str(tmp_path / "compute-sanitizer"), "memcheck")
    assert argv[0] == os.path.realpath(tmp_path / "compute-sanitizer")
    assert argv[argv.index("--tool") + 1] == "memcheck" and argv[argv.index("--log-file") + 1] == LOG_NAME
    assert argv[argv.index("--target-processes") + 1] == "application-only" and "--error-exitcode" not in argv
    with pytest.raises(ValueError):
        wrapper_argv("x", "cachecheck")


def test_the_setting_finds_the_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(sanitizer, "DEFAULT_TOOLKIT", tmp_path / "no-toolkit")  # a machine's own /usr/local/cuda
    assert find_sanitizer("off") is None and sanitizer_config("off", 120.0) is None
    assert find_sanitizer("auto") is None  # nowhere to be found: the config says so, a run notes it
    assert sanitizer_config("auto", 60.0) == sanitizer_config("auto", 60.0) and sanitizer_config("auto", 60.0).executable is None  # type: ignore[union-attr]
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert find_sanitizer("auto") == tool
    assert find_sanitizer(str(tool)) == tool and find_sanitizer(str(tmp_path / "nope")) is None
    monkeypatch.setenv("PATH", str(tool.parent))
    monkeypatch.delenv("CUDA_HOME")
    assert sanitizer_config("auto", 60.0).executable == str(tool)  # type: ignore[union-attr]


def test_the_log_is_read_without_following_what_the_submission_put_there(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("========= Invalid __global__ write of size 4 bytes\n")
    job = tmp_path / "job"
    job.mkdir()
    log = job / LOG_NAME
    log.symlink_to(secret)
    assert read_log(job) == ""
    log.unlink()
    os.link(secret, log)
    assert read_log(job) == ""  # a hard link to a file elsewhere
    log.unlink()
    os.mkfifo(log)
    assert read_log(job) == ""  # a FIFO would block an ordinary read
    log.unlink()
    assert read_log(job) == ""  # none at all
    log.write_text(MEMCHECK)
    assert read_log(job) == MEMCHECK and read_log(job, 10) == MEMCHECK[:10]


def test_a_source_path_is_not_looked_up_through_a_link_or_outside_the_tree(tmp_path: Path) -> None:
    """The tool's report is the submission's to forge: a path it names must not make the
    parent tell whether a host file exists (the shown path would say so)."""
    tree = tmp_path / "job"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "k.cu").write_text("")
    (tree / "etc").symlink_to("/etc")
    assert relative_source("/build/src/k.cu", tree) == "src/k.cu"
    assert relative_source("/x/../../../../etc/passwd", tree) == "passwd"
    assert relative_source("/x/etc/passwd", tree) == "passwd"


def test_the_feedback_names_each_bad_access_once_and_at_most_three(tmp_path: Path) -> None:
    """worker.scoring's lines: the first finding of each place, at most MAX_SHOWN; the
    telemetry keeps them all."""
    from worker.measurements import ProblemMeasurement
    from worker.scoring import sanitizer_lines

    findings = [f.to_dict() for f in parse_report("memcheck", SEVERAL)]
    m = ProblemMeasurement("2.1", telemetry={"sanitizer": {"tool": "memcheck", "tools": ["memcheck"], "case": "abi:x",
                                                          "findings": findings, "note": "", "seconds": 1.0}})
    reasons, notes = sanitizer_lines(m)
    assert notes == [] and len(reasons) == 3
    assert reasons[0].startswith("2.1: compute-sanitizer memcheck: Invalid __global__ read of size 16 bytes in "
                                 "ker_layer_norm at /srv/jobs/run-9/build/layernorm_kernel/src/layernorm_kernel.cu:51, "
                                 "thread (33,0,0) block (0,0,0)")  # as stored: the stage stores paths in the tree
    assert "ker_attn_softmax<32, 4>" in reasons[1] and "race between read and write" in reasons[2]
    assert sanitizer_lines(ProblemMeasurement("2.1")) == ([], [])
    m.telemetry["sanitizer"].update(findings=[], note="skipped: compute-sanitizer was not found (KG_SANITIZER=auto)",
                                    tools=[])
    assert sanitizer_lines(m) == ([], [])  # a tool that did not run is for staff (telemetry) only
