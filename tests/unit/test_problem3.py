"""Problem 3 end to end on the CPU: the real sandboxed child (worker.hw4.child_problem3) runs a
copy of starter/hw4's MiniTorch on its numpy backend with a tiny DecoderLM; the parent
(worker.hw4.problem3) checks and times it. Broken copies must fail the right check."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from worker.gpu.client import ChildClient
from worker.hw4.problem3 import HANDLERS, Problem3Config, arena_bytes, measure_problem3
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy

KIT = Path(__file__).resolve().parents[2] / "starter" / "hw4"
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


def _measure(root: Path, config: Problem3Config = TINY, seed: int = 3):
    sandbox = Sandbox(LIMITS, SandboxPolicy(user=None))
    with ChildClient(sandbox, root, (HANDLERS,), arena_bytes(config)) as client:
        return measure_problem3(client, config, np.random.default_rng(seed),
                                telemetry=lambda: {"probe": "telemetry"})


def _cases(m) -> dict[str, object]:
    return {c.case_id: c for c in m.binding_cases}


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
    s = m.speedup_student
    assert s is not None and TINY.min_pairs <= s.trials <= TINY.max_pairs
    assert s.low <= s.speedup <= s.high and s.median_baseline_ms > 0 and s.median_custom_ms > 0
    assert info["timing"]["stop"] in ("converged", "budget", "max_pairs")
    orders = [st["model"] for st in info["steps"] if st["pair"] < 2]
    assert orders == ["unfused", "fused", "fused", "unfused"]  # alternating which goes first
    assert m.telemetry["gpu_before"] == {"probe": "telemetry"}
    print("reference:", s.describe(), info["timing"])


def test_non_causal_fused_attention_fails_causality(tmp_path: Path) -> None:
    root = _kit_copy(tmp_path, (("mask_future=self.causal", "mask_future=False"),))
    m = _measure(root)
    assert m.status == "ok", m.log_tail
    cases = _cases(m)
    assert not cases["p3-causal-fused"].ok
    assert cases["p3-causal-fused"].max_err > 1e-3
    assert not cases["p3-fused-matches-unfused"].ok  # the unfused model is causal
    assert cases["p3-fused-ops-called"].ok
    assert not m.all_passed and m.first_failure is not None


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


def test_unfused_path_using_fused_ops_fails(tmp_path: Path) -> None:
    root = _kit_copy(tmp_path, (("    if use_fused_kernel:\n", "    if True:\n"),))
    m = _measure(root)
    cases = _cases(m)
    assert not cases["p3-unfused-composed"].ok
    assert "layernorm_fw" in cases["p3-unfused-composed"].message


def test_decoder_without_fused_flag_is_an_error(tmp_path: Path) -> None:
    root = _kit_copy(tmp_path, (("        use_fused_kernel: bool = False,\n    ) -> None:\n        super().__init__()\n"
                                 "        self.backend = backend\n        self.n_embd = n_embd",
                                 "    ) -> None:\n        use_fused_kernel = False\n        super().__init__()\n"
                                 "        self.backend = backend\n        self.n_embd = n_embd"),))
    m = _measure(root)
    assert m.status == "error"
    assert "use_fused_kernel" in m.log_tail
    assert m.first_failure is not None and not m.first_failure.ok


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
    assert not cases["p3-timed-fused-step-verified"].ok


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
    assert "first steps" in m.log_tail
    assert m.first_failure is not None and not m.first_failure.ok and m.speedup_student is None
