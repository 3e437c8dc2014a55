"""Problem 3 end to end on the CPU: the real sandboxed child (rubrics.hw4.child_problem3) runs a
copy of starter/hw4's MiniTorch on its numpy backend with a tiny DecoderLM; the parent
(rubrics.hw4.problem3) checks and times it. Broken copies must fail the right check, and a
fused branch that names and orders its LayerNorm parameters its own way (as students' do)
must be graded like the kit's."""
from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rubrics.hw4.problem3 import HANDLERS, Problem3Config, arena_bytes, measure_problem3
from worker.gpu.client import ChildClient
from worker.gpu.gpu_lock import GpuLock, GpuTurns
from worker.gpu_conditions import NO_NVML
from worker.rubric import load_rubric
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy
from worker.scoring import score_problem
from worker.trials import STOP_REASONS

KIT = Path(__file__).resolve().parents[4] / "starter" / "hw4"
MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=120, cpu_s=120, memory_bytes=2048 * MiB, max_processes=64,
                       file_size_bytes=256 * MiB, open_files=256)
TINY = Problem3Config(n_vocab=50, n_embd=16, n_head=2, n_positions=8, batch=2, seq_len=8, backend="numpy",
                      budget_s=20.0, min_pairs=3, max_pairs=6, step_timeout_s=30.0, setup_timeout_s=60.0,
                      probe_batch=2)
TRANSFORMER = "minitorch/modules_transfomer.py"
FUNCTIONS = "minitorch/tensor_functions.py"
ALL_CASES = {"p3-logits-finite", "p3-fused-matches-unfused", "p3-loss-match", "p3-fused-grads-match",
             "p3-causal-fused", "p3-fused-ops-called", "p3-unfused-composed", "p3-timed-fused-step-verified"}


def _kit_copy(tmp_path: Path, edits: tuple[tuple[str, str], ...] = (), file: str = TRANSFORMER) -> Path:
    root = tmp_path / "llmsys_hw4"
    shutil.copytree(KIT, root, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    path = root / file
    text = path.read_text()
    for old, new in edits:
        assert old in text, f"edit no longer applies to the kit: {old!r}"
        text = text.replace(old, new)
    path.write_text(text)
    return root


def _measure(root: Path, config: Problem3Config = TINY, seed: int = 3, turns: GpuTurns = GpuTurns(None)):
    sandbox = Sandbox(LIMITS, SandboxPolicy(user=None))
    with ChildClient(sandbox, root, (HANDLERS,), arena_bytes(config)) as client:
        return measure_problem3(client, config, np.random.default_rng(seed),
                                telemetry=lambda: {"probe": "telemetry"}, turns=turns)


def _cases(m) -> dict[str, object]:
    return {c.case_id: c for c in m.cases_by("binding")}


def _problem3_score(m):
    return score_problem(next(p for p in load_rubric("hw4").problems if p.id == "3").scoring, m)


def _own_layernorm_edits(gamma: str = "ln{i}_gamma", beta: str = "ln{i}_beta", swap: bool = False,
                         keep_modules: bool = False):
    """Kit edits giving the FUSED model LayerNorm parameters of its own, as many students
    wrote it: held by TransformerLayer / DecoderLM themselves (so named_parameters lists them
    before the submodules' and the position-k parameters of the two models differ), gammas
    defined before betas, betas initialised to one (the unfused LayerNorm1d's are zero, so
    only a copy makes the models agree). `swap` makes the fused path use beta as the scale
    and gamma as the shift: a bug the pairing must not hide. `keep_modules`: the fused model
    also keeps the unfused LayerNorm1d modules, unused, and its own betas start at zero (as
    LayerNorm1d's do), so its own parameters are extra ones that pair with nothing."""
    def params(names: list[str], indent: str) -> str:
        fill = "zeros" if keep_modules and "beta" in names[-1] else "ones"
        return "".join(f"{indent}self.{n} = Parameter({fill}((n_embd,), backend=backend))\n" for n in names)

    def use(attr: str, g: str, b: str, indent: str) -> str:
        scale, shift = (b, g) if swap else (g, b)
        return f"{indent}self.{attr} = _OwnLayerNorm(self.{scale}, self.{shift})\n"

    g1, g2, b1, b2 = gamma.format(i=1), gamma.format(i=2), beta.format(i=1), beta.format(i=2)
    layer_old = ("        self.ln_1 = LayerNorm1d(n_embd, eps=ln_eps, backend=backend)\n"
                 "        self.ln_2 = LayerNorm1d(n_embd, eps=ln_eps, backend=backend)\n")
    final_old = "        self.ln = LayerNorm1d(n_embd, eps=ln_eps, backend=backend)\n"
    if keep_modules:  # the modules first, then the fused path's own parameters over their names
        layer_new = (layer_old + "        if use_fused_kernel:\n" + params([g1, g2], " " * 12) + params([b1, b2], " " * 12)
                     + use("ln_1", g1, b1, " " * 12) + use("ln_2", g2, b2, " " * 12))
        final_new = (final_old + "        if use_fused_kernel:\n" + params(["ln_gamma"], " " * 12)
                     + params(["ln_beta"], " " * 12) + use("ln", "ln_gamma", "ln_beta", " " * 12))
    else:
        layer_new = ("        if use_fused_kernel:\n" + params([g1, g2, b1, b2], " " * 12)
                     + use("ln_1", g1, b1, " " * 12) + use("ln_2", g2, b2, " " * 12)
                     + "        else:\n" + layer_old.replace("        self.", "            self."))
        final_new = ("        if use_fused_kernel:\n" + params(["ln_gamma", "ln_beta"], " " * 12)
                     + use("ln", "ln_gamma", "ln_beta", " " * 12) + "        else:\n    " + final_old)
    holder = ("class _OwnLayerNorm:  # what the kit's _layer_norm reads: .weights and .bias\n"
              "    def __init__(self, weights, bias):\n"
              "        self.weights, self.bias = weights, bias\n\n\n"
              "class MultiHeadAttention(Module):\n")
    return (("from .module import Module\n", "from .module import Module, Parameter\n"),
            ("from .tensor_functions import tensor_from_numpy, zeros\n",
             "from .tensor_functions import ones, tensor_from_numpy, zeros\n"),
            ("class MultiHeadAttention(Module):\n", holder), (layer_old, layer_new), (final_old, final_new))


def test_reference_passes_and_is_timed(tmp_path: Path) -> None:
    m = _measure(_kit_copy(tmp_path))
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert set(cases) == ALL_CASES
    assert all(c.ok for c in cases.values()), [c.describe() for c in m.failed_cases]
    assert m.all_passed and m.first_failure is None
    # Same parameters, same function: float32 rounding only.
    assert cases["p3-fused-matches-unfused"].max_err < 1e-4
    assert cases["p3-causal-fused"].max_err == 0.0
    assert cases["p3-fused-grads-match"].max_err < 1e-5
    assert cases["p3-timed-fused-step-verified"].max_err < 1e-5
    info = m.telemetry["problem3"]
    losses = info["losses"]
    assert abs(losses["fused"] - losses["unfused"]) < 1e-4
    assert abs(losses["unfused"] - np.log(TINY.n_vocab)) < 1.5  # random targets: near log(vocab)
    fused_counts = info["first_steps"]["fused"]["counts"]
    assert fused_counts == {"attn_softmax_fw": 4, "attn_softmax_bw": 4, "layernorm_fw": 9, "layernorm_bw": 9}
    assert set(info["first_steps"]["unfused"]["counts"].values()) == {0}
    assert info["first_steps"]["fused"]["params_with_grad"] == info["setup"]["parameters"]
    s = m.figure("student")
    assert s is not None and TINY.min_pairs <= s.trials <= TINY.max_pairs
    assert s.low <= s.speedup <= s.high and s.median_baseline_ms > 0 and s.median_custom_ms > 0
    assert info["timing"]["stop"] in STOP_REASONS
    assert "warm_up_s" not in info  # the checked steps warm the child, with or without the GPU's lock
    # every kept pair is a window; without a watch (NVML) nothing was read and none was taken again
    assert len(info["timing"]["windows"]) == s.trials
    assert m.telemetry["timing_conditions"] == {"recorded": False, "note": NO_NVML, "windows": s.trials}
    orders = [st["model"] for st in info["steps"] if st["pair"] < 2]
    assert orders == ["unfused", "fused", "fused", "unfused"]  # alternating which goes first
    assert m.telemetry["gpu_before"] == {"probe": "telemetry"}
    # every step reports its own peak host memory (the child resets the mark before it); a
    # numpy model has no device, so its sampled device figure is None, not a guess
    for model in ("unfused", "fused"):
        first = info["first_steps"][model]["memory"]
        assert first["host_reset"] is True and 20 < first["host_peak_mib"] < LIMITS.memory_bytes / MiB
        assert first["device_used_peak_mib"] is None
        assert info["memory"][model]["host_peak_mib"] >= first["host_peak_mib"]
        first_step, last_step = info["memory"][model]["host_first_last_mib"]
        assert first_step == first["host_peak_mib"]
        timed = [st["memory"]["host_peak_mib"] for st in info["steps"] if st["model"] == model]
        assert last_step == timed[-1]
    assert all(st["memory"]["host_peak_mib"] > 0 and "device_used_peak_mib" not in st["memory"] for st in info["steps"])
    print("reference:", s.describe(), info["timing"], info["memory"])


def _other_runs_checks(lock: GpuLock, seen: dict[str, float], after_s: float = 1.0) -> None:
    """Another run's checks: the GPU's lock held shared until a timing asks for it alone (its
    request holds the gate), then `after_s` more; at most 60 s before the request."""
    with lock.shared():
        gate = os.open(lock.gate, os.O_RDWR)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(gate, fcntl.LOCK_UN)
                except BlockingIOError:
                    seen["timing_asked"] = time.monotonic()
                    break
                time.sleep(0.02)
        finally:
            os.close(gate)
        time.sleep(after_s)
        seen["released"] = time.monotonic()


class _TurnLog(GpuTurns):
    """GpuTurns that also notes the kind of each turn it takes, in order."""

    def __init__(self, lock: GpuLock) -> None:
        super().__init__(lock)
        self.taken: list[str] = []

    def _turn(self, alone: bool):  # noqa: ANN202
        self.taken.append("alone" if alone else "shared")
        return super()._turn(alone)


def test_a_timing_piece_checks_beside_other_runs_and_times_alone(tmp_path: Path) -> None:
    """In a timing piece, Problem 3's set-up and checked steps share the GPU with another run's
    checks; only its timed pairs wait for the GPU alone, right after the checked steps that
    warmed the child (no warm-up pair), and the timed step's verification is shared again."""
    lock = GpuLock(tmp_path / "locks", 0)
    seen: dict[str, float] = {}
    other = threading.Thread(target=_other_runs_checks, args=(lock, seen))
    other.start()
    time.sleep(0.2)
    started = time.monotonic()
    turns = _TurnLog(lock)
    m = _measure(_kit_copy(tmp_path), turns=turns)
    ended = time.monotonic()
    other.join(70)
    assert m.status == "ok" and m.all_passed, m.log_tail
    info = m.telemetry["problem3"]
    # the set-up and the checks ran while the other run held the lock shared: the timing asked
    # for it only after them, and got it only once the other run let go
    assert "timing_asked" in seen, "the checks waited for the GPU alone"
    assert started + info["checks_s"] < seen["timing_asked"] < seen["released"]
    assert seen["released"] < ended
    assert "warm_up_s" not in info and m.figure("student") is not None
    assert turns.taken == ["shared", "shared", "alone", "shared"]  # set-up, checks, timed pairs, verification
    assert _cases(m)["p3-timed-fused-step-verified"].ok
    assert TINY.min_pairs <= info["timing"]["pairs"] <= TINY.max_pairs
    held = turns.record()  # the other run held on for a second after the timing asked
    assert held is not None and held["waited_alone"] >= 0.9 and held["alone"] > 0 and held["shared"] > 0
    assert held["waited_shared"] < 0.5 and GpuTurns(None).record() is None


def test_the_seconds_queued_for_the_gpu_are_not_problem_3s(tmp_path: Path) -> None:
    """The timed pairs wait longer for the GPU than Problem 3's whole budget (another run's
    checks hold it): the timing then has its whole budget, as in a whole grade; the queueing
    is not counted as the problem's time (it was, and such a timing stopped at its minimum of
    pairs, over budget)."""
    lock = GpuLock(tmp_path / "locks", 0)
    seen: dict[str, float] = {}
    other = threading.Thread(target=_other_runs_checks, args=(lock, seen, TINY.budget_s + 2))
    other.start()
    time.sleep(0.2)
    turns = GpuTurns(lock)
    m = _measure(_kit_copy(tmp_path), turns=turns)
    other.join(90)
    assert m.status == "ok" and m.all_passed, m.log_tail
    held, timing = turns.record(), m.telemetry["problem3"]["timing"]
    assert held is not None and held["waited_alone"] > TINY.budget_s, held
    assert timing["stop"] != "budget" and timing["over_budget"] is False, timing
    assert m.telemetry["problem3"]["elapsed_s"] < TINY.budget_s


def _not_timed(m, failed_case: str) -> None:  # noqa: ANN001
    """A model that failed a check on its first steps is not timed: no pairs, no figure, no
    timed step to verify, and the reason names the check."""
    info = m.telemetry["problem3"]
    assert "timing" not in info and info["steps"] == [] and m.figure("student") is None, info.get("timing")
    assert "p3-timed-fused-step-verified" not in _cases(m)
    assert m.telemetry["timing_skipped"] == f"the check {failed_case} failed on the first steps"


def test_non_causal_fused_attention_fails_causality(tmp_path: Path) -> None:
    root = _kit_copy(tmp_path, (("mask_future=self.causal", "mask_future=False"),))
    m = _measure(root)
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert not cases["p3-causal-fused"].ok
    assert cases["p3-causal-fused"].max_err > 1e-3
    assert cases["p3-causal-fused"].message.startswith("the fused model's attention is not causal: position ")
    assert not cases["p3-fused-matches-unfused"].ok  # the unfused model is causal
    assert cases["p3-fused-ops-called"].ok
    assert not m.all_passed and m.first_failure is not None
    _not_timed(m, "p3-fused-matches-unfused")  # the first failed check, in the order they run


def test_fused_path_calling_unfused_code_fails_ops_called(tmp_path: Path) -> None:
    root = _kit_copy(tmp_path, (("    if use_fused_kernel:\n", "    if False:\n"),
                                ("        if self.use_fused_kernel:\n", "        if False:\n")))
    m = _measure(root)
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert not cases["p3-fused-ops-called"].ok
    assert "never called" in cases["p3-fused-ops-called"].message
    assert cases["p3-fused-matches-unfused"].ok and cases["p3-causal-fused"].ok
    assert cases["p3-fused-grads-match"].ok
    assert m.first_failure is not None and m.first_failure.case_id == "p3-fused-ops-called"
    _not_timed(m, "p3-fused-ops-called")


def test_unfused_path_using_fused_ops_fails(tmp_path: Path) -> None:
    root = _kit_copy(tmp_path, (("    if use_fused_kernel:\n", "    if True:\n"),))
    m = _measure(root)
    cases = _cases(m)
    assert not cases["p3-unfused-composed"].ok
    assert "layernorm_fw" in cases["p3-unfused-composed"].message


def test_decoder_without_fused_flag_fails_the_construction_case(tmp_path: Path) -> None:
    """No use_fused_kernel argument: one failed case saying what the course's driver passes,
    and 0 points for the problem with that message in the feedback."""
    root = _kit_copy(tmp_path, (("        use_fused_kernel: bool = False,\n    ) -> None:\n        super().__init__()\n"
                                 "        self.backend = backend\n        self.n_embd = n_embd",
                                 "    ) -> None:\n        use_fused_kernel = False\n        super().__init__()\n"
                                 "        self.backend = backend\n        self.n_embd = n_embd"),))
    m = _measure(root)
    assert m.status == "ok", m.log_tail
    assert [c.case_id for c in m.cases_by("binding")] == ["p3-constructs"]
    case = m.cases_by("binding")[0]
    assert not case.ok and m.first_failure == case and m.figure("student") is None
    assert "does not take use_fused_kernel" in case.message
    assert "run_machine_translation.py" in case.message and "n_positions, p_dropout, ln_eps" in case.message
    score = _problem3_score(m)
    assert score.points == 0 and score.status == "failed"
    assert any("p3-constructs" in r and "does not take use_fused_kernel" in r for r in score.reasons), score.reasons


def test_decoder_is_built_with_the_drivers_keys_only(tmp_path: Path) -> None:
    """The driver passes no `bias`: a DecoderLM that requires it fails the construction case
    with its own TypeError (the grader guesses no keywords)."""
    root = _kit_copy(tmp_path, (("        ln_eps: float = 1e-5,\n        bias: bool = True,\n        backend=None,\n"
                                 "        use_fused_kernel: bool = False,\n    ) -> None:",
                                 "        ln_eps: float = 1e-5,\n        *,\n        bias: bool,\n        backend=None,\n"
                                 "        use_fused_kernel: bool = False,\n    ) -> None:"),))
    m = _measure(root)
    assert m.status == "ok", m.log_tail
    assert [c.case_id for c in m.cases_by("binding")] == ["p3-constructs"]
    msg = m.cases_by("binding")[0].message
    assert "DecoderLM(use_fused_kernel=False)" in msg and "TypeError" in msg and "'bias'" in msg
    assert " at " not in msg.split("raised", 1)[1]  # the call itself failed: no frame of the submission
    assert _problem3_score(m).points == 0


def test_unimplemented_fused_branch_fails_the_construction_case_with_its_location(tmp_path: Path) -> None:
    old = "        self.use_fused_kernel = use_fused_kernel\n        self.ln_1 = "
    root = _kit_copy(tmp_path, ((old, "        if use_fused_kernel:\n            raise NotImplementedError\n" + old),))
    m = _measure(root)
    assert m.status == "ok", m.log_tail
    assert [c.case_id for c in m.cases_by("binding")] == ["p3-constructs"]
    msg = m.cases_by("binding")[0].message
    assert "building DecoderLM(use_fused_kernel=True)" in msg
    line = (root / TRANSFORMER).read_text().splitlines().index("            raise NotImplementedError") + 1
    assert msg.endswith(f"raised NotImplementedError at {TRANSFORMER} line {line}"), msg


def test_fused_branch_with_its_own_layernorm_parameters_passes(tmp_path: Path) -> None:
    """ln1_gamma / ln2_gamma / ln1_beta / ln2_beta / ln_gamma / ln_beta listed first in the fused
    model: paired by role, copied, and every check passes as for the kit (gradients compared
    role by role: a pairing by position would fail at the copy, one that crossed roles would
    fail the logits and gradient checks)."""
    m = _measure(_kit_copy(tmp_path, _own_layernorm_edits()))
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert set(cases) == ALL_CASES
    assert all(c.ok for c in cases.values()), [c.describe() for c in m.failed_cases]
    assert cases["p3-fused-matches-unfused"].max_err < 1e-4
    assert cases["p3-fused-grads-match"].max_err < 1e-5
    assert cases["p3-timed-fused-step-verified"].max_err < 1e-5
    setup = m.telemetry["problem3"]["setup"]
    assert setup["renamed_parameters"] == 4 * 4 + 2


def test_fused_parameters_of_its_own_are_named_not_fatal(tmp_path: Path) -> None:
    """A fused model that keeps the unfused LayerNorm1d modules, unused, and adds (and uses)
    gamma and beta of its own: 18 parameters more than the unfused model (a real submission's
    design). Every unfused parameter pairs with one the fused step uses, every check runs and
    passes, and the gradient case names the fused parameters it did not compare."""
    m = _measure(_kit_copy(tmp_path, _own_layernorm_edits(keep_modules=True)))
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert set(cases) == ALL_CASES
    assert all(c.ok for c in cases.values()), [c.describe() for c in m.failed_cases]
    # the unfused LayerNorm parameters pair with the ones the fused step uses, its own; the
    # LayerNorm1d modules it holds unused are what is left
    setup = m.telemetry["problem3"]["setup"]
    assert setup["renamed_parameters"] == 4 * 4 + 2
    unused = setup["fused_only_parameters"]
    assert len(unused) == 4 * 4 + 2 and ["t_layer_1.ln_1.weights", [16]] in unused and ["ln.bias", [16]] in unused
    message = cases["p3-fused-grads-match"].message
    assert "not compared: 18 parameter(s) of the fused model that pair with none" in message, message
    assert _problem3_score(m).correctness_points == next(
        p for p in load_rubric("hw4").problems if p.id == "3").scoring.correctness_points


def test_own_layernorm_parameters_used_the_wrong_way_round_fail(tmp_path: Path) -> None:
    """The same renamed fused branch using beta as the scale and gamma as the shift: the
    pairing goes by name, so the models differ and the checks say so."""
    m = _measure(_kit_copy(tmp_path, _own_layernorm_edits(swap=True)))
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert not cases["p3-fused-matches-unfused"].ok
    assert not cases["p3-fused-grads-match"].ok
    assert "(fused " in cases["p3-fused-grads-match"].message  # names both models' parameter
    assert cases["p3-causal-fused"].ok and cases["p3-fused-ops-called"].ok


def test_unpairable_fused_parameters_fail_the_pairing_case(tmp_path: Path) -> None:
    """Fused LayerNorm parameters whose names hide which LayerNorm they belong to (`sub1_gamma`
    is no `ln_1`, and t_layer_1 holds two gammas of that shape): one failed case naming what was
    left on each side, and 0 points."""
    m = _measure(_kit_copy(tmp_path, _own_layernorm_edits(gamma="sub{i}_gamma", beta="sub{i}_beta")))
    assert m.status == "ok", m.log_tail
    assert [c.case_id for c in m.cases_by("binding")] == ["p3-parameters-pair"]
    msg = m.cases_by("binding")[0].message
    assert "Unpaired in the unfused model: t_layer_1.ln_1.weights [16]" in msg
    assert "t_layer_1.sub1_gamma [16]" in msg and "could be any of t_layer_1.sub1_gamma, t_layer_1.sub2_gamma" in msg
    score = _problem3_score(m)
    assert score.points == 0 and any("p3-parameters-pair" in r for r in score.reasons), score.reasons


def test_swapped_layernorm_parameter_grads_fail_the_gradient_check(tmp_path: Path) -> None:
    """Forward right, backward wrong (gamma's and beta's gradients swapped): logits match,
    the parameter gradients of the fused model do not."""
    old = "        return out_grad.backend.layernorm_bw(out_grad, inp, gamma, beta, var, mean)\n"
    new = ("        g_inp, g_gamma, g_beta = out_grad.backend.layernorm_bw(out_grad, inp, gamma, beta, var, mean)\n"
           "        return g_inp, g_beta, g_gamma\n")
    m = _measure(_kit_copy(tmp_path, ((old, new),), file=FUNCTIONS))
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert cases["p3-fused-matches-unfused"].ok
    assert not cases["p3-fused-grads-match"].ok
    assert "ln" in cases["p3-fused-grads-match"].message
    _not_timed(m, "p3-fused-grads-match")


def test_timed_fused_steps_that_skip_the_backward_fail(tmp_path: Path) -> None:
    """A fused model that does the backward only on the first (checked) step: the timed
    steps are faster, and the randomly verified one has no gradients."""
    old = "    def forward(self, idx) -> Tensor:\n"
    new = ("    _kg_calls = 0\n\n"
           "    def forward(self, idx) -> Tensor:\n"
           "        if self.use_fused_kernel:\n"
           "            DecoderLM._kg_calls += 1\n"
           "            if DecoderLM._kg_calls > 3:\n"
           "                return self._forward(idx).detach()\n"
           "        return self._forward(idx)\n\n"
           "    def _forward(self, idx) -> Tensor:\n")
    m = _measure(_kit_copy(tmp_path, ((old, new),)))
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert cases["p3-fused-grads-match"].ok and cases["p3-causal-fused"].ok
    assert not cases["p3-timed-fused-step-verified"].ok
    assert "missing or non-finite" in cases["p3-timed-fused-step-verified"].message


@pytest.mark.parametrize("body, kind", [("import time; time.sleep(600)", "timeout"), ("import os; os._exit(3)", "crashed")])
def test_hung_or_dying_fused_step_ends_the_problem(tmp_path: Path, body: str, kind: str) -> None:
    old = "    def forward(self, idx) -> Tensor:\n"
    new = old + f"        if self.use_fused_kernel:\n            {body}\n"
    config = dataclasses.replace(TINY, step_timeout_s=3.0)
    m = _measure(_kit_copy(tmp_path, ((old, new),)), config)
    assert m.status == kind
    # the unfused model's step ran; the fused model's is the one named
    assert "first steps (fused model's step)" in m.log_tail
    assert m.first_failure.case_id == "p3-first" and "fused model's step" in m.first_failure.message
    assert m.first_failure is not None and not m.first_failure.ok and m.figure("student") is None
