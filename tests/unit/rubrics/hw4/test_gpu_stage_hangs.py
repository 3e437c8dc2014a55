"""A kernel that never returns is named once, on the CPU stand-in (tests/fixtures/cpu_standin.py;
rubrics.hw4.hangs, issue 55).

The first call of a launcher that times out names it ("your softmax forward
(launch_attn_softmax) did not return within 10 s in case abi:..."); every other check of
either path, timing and Problem 3 that would call it is settled at once with those words, and
a call of it still waiting elsewhere is cut short. So a submission whose softmax forward spins
forever costs one call timeout beside what a correct one costs, and what does not call it
(the LayerNorm problems, 1.2's C ABI cases) is graded as usual. A launcher that hangs on a
hidden case only settles hidden checks: the course's cases, the timing and Problem 3 run. A
hang outside every launcher (the binding making its tensors) blames none.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import cpu_standin  # noqa: E402
from gpu_stage_support import KERNEL_PROBLEMS, P3, TIMING, base, policy, short_cases, trusted  # noqa: E402,F401  (base, policy, trusted, short_cases: fixtures)
from gpu_stage_support import describe as _describe  # noqa: E402
from gpu_stage_support import measured as _measured  # noqa: E402
from gpu_stage_support import run_stage as _run  # noqa: E402
from gpu_stage_support import stage_config as _config  # noqa: E402

from rubrics.hw4 import grade  # noqa: E402
from rubrics.hw4.cases import load_cases  # noqa: E402
from rubrics.hw4.grade import GpuStageConfig  # noqa: E402
from rubrics.hw4.kernels import MAX_HANGS  # noqa: E402
from worker.measurements import ProblemMeasurement  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.scoring import score_run  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_standin.have_compiler(), reason="g++ is needed to build the CPU stand-in kernels")

CALL_TIMEOUT_S = 10.0  # long beside the stand-in's calls (ms), so each wait shows in the stage's seconds
# Stopping the children that ran the hung launcher: a killed sandbox takes ~1.7 s to end (its
# namespaces and overlay torn down) on this 2-core machine, all of them at once. On the GPU,
# Problem 3's minutes saved hide it (tests/gpu/test_load_failures_gpu.py); the stand-in's tiny
# Problem 3 and timings do not.
STOP_S = 5.0


def _hang_config(policy: SandboxPolicy, problems: tuple[str, ...] = (*KERNEL_PROBLEMS, "3")) -> GpuStageConfig:
    p3 = replace(P3, step_timeout_s=CALL_TIMEOUT_S, setup_timeout_s=CALL_TIMEOUT_S)
    return _config(policy, replace(TIMING, call_timeout_s=CALL_TIMEOUT_S), p3, problems)


def _timed(base: Path, name: str, trusted: Path, config: GpuStageConfig, defines: tuple[str, ...] = (),
           files: dict[str, str] | None = None) -> tuple[dict[str, ProblemMeasurement], float]:
    started = time.monotonic()
    by_id = _run(base, name, trusted, config, defines, files)
    return by_id, time.monotonic() - started


def _settled(cases: list, words: str) -> None:
    assert cases and all(not c.ok and not c.ran and c.message.startswith(f"not run: {words}") for c in cases), \
        [c.message for c in cases]


def test_a_softmax_forward_that_never_returns_costs_one_timeout(base: Path, trusted: Path, policy: SandboxPolicy,
                                                                short_cases: dict) -> None:
    """Before, both paths of 1.1 hung MAX_HANGS times each, one after another, 1.2's binding
    (which runs the forward first) twice more, each timing child once and Problem 3 once more:
    over four timeouts of wall time beside the rest."""
    config = _hang_config(policy)
    correct, correct_s = _timed(base, "hang-reference", trusted, config)
    assert all(m.status == "ok" and m.all_passed for m in correct.values()), [_describe(m) for m in correct.values()]
    by_id, seconds = _timed(base, "softmax-spins", trusted, config, ("SPIN_SOFTMAX_FW",))
    first = "abi:" + short_cases["1.1"][0].id
    words = f"your softmax forward (launch_attn_softmax) did not return within {CALL_TIMEOUT_S:g} s in case {first}"

    m11 = by_id["1.1"]  # one case waited its timeout and names the launcher; the rest are settled with its words
    hung = [c for c in m11.cases if c.ran]
    assert [c.case_id for c in hung] == [first] and hung[0].message.startswith(f"hung: {words}"), _describe(m11)
    assert "seed " in hung[0].message
    _settled([c for c in m11.cases if not c.ran], words)
    assert m11.figure("student") is None and m11.status == "ok"
    m12 = by_id["1.2"]  # its own launcher is called alone through the C ABI; its binding runs the forward first
    assert m12.cases_by("abi") and all(c.ok for c in m12.cases_by("abi")), _describe(m12)
    _settled(m12.cases_by("binding"), words)
    assert m12.figure("student") is None
    for pid in ("2.1", "2.2"):  # they call no softmax launcher: full verdicts, timed
        assert by_id[pid].status == "ok" and by_id[pid].all_passed and _measured(by_id[pid]), _describe(by_id[pid])
    m3 = by_id["3"]  # its fused model calls every fused launcher: no child, no wait
    assert m3.status == "not_run" and m3.log_tail == words, _describe(m3)
    assert not (base / "softmax-spins" / "work" / "problem-3").exists()
    assert m3.telemetry["hung"] == {"softmax_fw": {"launcher": "launch_attn_softmax", "words": words, "public": True}}

    # One timeout of wall time: the check that names it waited once (and 1.2's, cut short, less),
    # the stage beside a correct grade (two timeouts one after the other would be over this)
    assert m11.telemetry["seconds"]["abi_cases"] < CALL_TIMEOUT_S + STOP_S, m11.telemetry["seconds"]
    assert m12.telemetry["seconds"]["binding_cases"] < CALL_TIMEOUT_S + STOP_S, m12.telemetry["seconds"]
    assert CALL_TIMEOUT_S <= seconds < correct_s + CALL_TIMEOUT_S + STOP_S, (seconds, correct_s)

    score = score_run(load_rubric("hw4"), list(by_id.values()))
    assert score.problem("1.1").points == 0 and any(words in r for r in score.problem("1.1").reasons)
    assert score.problem("3").reasons[0].startswith(f"3: was not run: {words}"), score.problem("3").reasons
    for pid in ("2.1", "2.2"):
        assert score.problem(pid).correctness_points == 14, score.problem(pid).reasons


@pytest.fixture
def public_and_hidden(short_cases: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Per problem its first public case and its first hidden one (2.1's and 2.2's: hidden_dim
    4), and small timing shapes."""
    chosen = {pid: [next(c for c in cases if c.public), next(c for c in cases if not c.public)]
              for pid, cases in load_cases("hw4").items()}
    monkeypatch.setattr(grade, "load_cases", lambda _slug: chosen)
    return chosen


def test_a_hang_on_a_hidden_case_settles_only_hidden_checks(base: Path, trusted: Path, policy: SandboxPolicy,
                                                            public_and_hidden: dict) -> None:
    """The LayerNorm forward spins at hidden_dim 4, a hidden case's shape: the course's cases
    (both paths), the timing and Problem 3 still run and pass, the hidden checks that call it
    are settled (2.2's through its binding, which runs the forward; its C ABI case does not)."""
    by_id, _ = _timed(base, "hidden-spins", trusted, _hang_config(policy, ("2.1", "2.2", "3")),
                      ("SPIN_LN_FW_HIDDEN_4",))
    hidden_21, hidden_22 = public_and_hidden["2.1"][1].id, public_and_hidden["2.2"][1].id
    words = (f"your LayerNorm forward (launch_layernorm) did not return within {CALL_TIMEOUT_S:g} s "
             f"in case abi:{hidden_21}")
    m21, m22 = by_id["2.1"], by_id["2.2"]
    assert [(c.case_id, c.ok) for c in m21.cases if c.public] == [(f"abi:{public_and_hidden['2.1'][0].id}", True),
                                                                   (f"binding:{public_and_hidden['2.1'][0].id}", True)]
    [hung] = [c for c in m21.cases if not c.public and c.ran]
    assert hung.case_id == f"abi:{hidden_21}" and hung.message.startswith(f"hung: {words}"), _describe(m21)
    _settled([c for c in m21.cases_by("binding") if not c.public], words)
    assert all(c.ok for c in m22.cases_by("abi")) and all(c.ok for c in m22.cases_by("binding") if c.public), _describe(m22)
    # 2.2's hidden binding case runs beside 2.1's in another child: settled by 2.1's hang, or, when
    # both started before either timed out (a loaded machine), hung on the same launcher alongside
    [beside] = [c for c in m22.cases_by("binding") if c.case_id == f"binding:{hidden_22}"]
    assert not beside.ok and (beside.message.startswith(f"not run: {words}") or beside.message.startswith(
        f"hung: {words.rsplit(' in case ', 1)[0]} in case binding:{hidden_22}")), beside.message
    for m in (m21, m22):  # the course's shapes: timed as usual
        assert m.status == "ok" and _measured(m), _describe(m)
    assert by_id["3"].status == "ok" and by_id["3"].all_passed, _describe(by_id["3"])
    assert by_id["3"].telemetry["hung"]["layernorm_fw"]["public"] is False
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    assert score.problem("2.1").correctness_points == 10, score.problem("2.1").reasons  # the hidden 4 lost
    # timed and scored on its figure (its speed points depend on this machine's speed, not on the hang)
    assert score.problem("2.1").speedup is not None and score.problem("3").status == "passed"
    assert not any("not measured" in r for r in score.problem("2.1").reasons), score.problem("2.1").reasons


# The student's minitorch.tensor (the course's tests make every checked tensor with it, from
# lists) never returns; tensor_from_numpy, which the timing uses, is untouched.
TENSORS_NEVER_MADE = '''
import time as _kg_time

import minitorch as _kg_minitorch


def _kg_never(*args, **kwargs):
    while True:
        _kg_time.sleep(1)


_kg_minitorch.tensor = _kg_never
'''


def test_a_hang_outside_every_launcher_blames_none(base: Path, trusted: Path, policy: SandboxPolicy,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The binding hangs while it makes its tensors, before any launcher runs: no launcher is
    named, the C ABI cases pass, and the binding path gives up after MAX_HANGS hangs."""
    cases = [c for c in load_cases("hw4")["2.1"] if c.public][:MAX_HANGS + 1]
    monkeypatch.setattr(grade, "load_cases", lambda _slug: {"2.1": cases})
    config = replace(_hang_config(policy, ("2.1",)), timing=replace(TIMING, call_timeout_s=3.0))
    by_id, _ = _timed(base, "tensors-hang", trusted, config,
                      files={"minitorch/cuda_kernel_ops.py": cpu_standin.OPS_MODULE + TENSORS_NEVER_MADE})
    m = by_id["2.1"]
    assert m.cases_by("abi") and all(c.ok for c in m.cases_by("abi")), _describe(m)
    hung = [c for c in m.cases_by("binding") if c.ran]
    assert len(hung) == MAX_HANGS and all("hung: no answer to 'binding_prepare'" in c.message for c in hung), \
        _describe(m)
    _settled([c for c in m.cases_by("binding") if not c.ran], f"the code crashed on 0 and hung on {MAX_HANGS} earlier")
    assert "hung" not in m.telemetry and "did not return" not in m.log_tail
