"""The figures behind the bandwidth shown per problem: the traffic each hw4 operation needs
(rubrics.hw4.abi.traffic_bytes), GB/s from bytes and kernel time, the copy peak's rates and the
calibration's reference figures."""
from __future__ import annotations

import pytest

from rubrics.hw4.abi import traffic_bytes
from rubrics.hw4.cases import make_case
from worker.calibration import reference_bandwidths
from worker.gpu.copy_peak import copy_rates
from worker.measurements import Bandwidth, CaseOutcome, ProblemMeasurement

F32 = 4


def test_traffic_counts_every_array_once_and_an_in_place_one_twice() -> None:
    b, h, f, t = 8, 8, 128, 256
    softmax_fw = make_case("softmax_fw", batch=b, nhead=h, from_len=f, to_len=t, mask_future=False)
    assert traffic_bytes(softmax_fw) == F32 * (2 * b * h * f * t + b * t)  # inp read and written, mask read
    rows, n = 4096, 512
    assert traffic_bytes(make_case("softmax_bw", rows=rows, softmax_len=n)) == F32 * 3 * rows * n
    hidden = 1024
    # inp, gamma, beta read; ln_res, vars, means written
    assert traffic_bytes(make_case("layernorm_fw", rows=rows, hidden=hidden)) == F32 * (2 * rows * hidden
                                                                                         + 2 * hidden + 2 * rows)
    # out_grad, inp, gamma, beta, vars, means read; gamma_grad, betta_grad, inp_grad written
    assert traffic_bytes(make_case("layernorm_bw", rows=rows, hidden=hidden)) == F32 * (3 * rows * hidden
                                                                                         + 4 * hidden + 2 * rows)


def test_a_copy_counts_its_bytes_read_and_written() -> None:
    assert copy_rates(1 << 30, [1.0, 0.5, 0.0]) == pytest.approx([2 * (1 << 30) / 1e-3 / 1e9,
                                                                  2 * (1 << 30) / 0.5e-3 / 1e9])


def _measured(pid: str, gb: float | None, ok: bool = True) -> ProblemMeasurement:
    m = ProblemMeasurement(problem_id=pid)
    m.routes["abi"] = [CaseOutcome(f"{pid}-a", (4,), ok)]
    if gb is not None:  # 1e9 * gb bytes in 1 s
        m.telemetry["bandwidth"] = {"case": "c", "shape": [4], "bytes": int(gb * 1e9), "kernel_ms": 1000.0}
    return m


def test_reference_figures_are_the_median_of_correct_profiled_measurements() -> None:
    found = reference_bandwidths([_measured("1.1", 3000), _measured("1.1", 2000), _measured("1.1", 2600),
                                  _measured("1.1", 9000, ok=False),  # wrong answers set no reference
                                  _measured("1.2", None)])  # not profiled
    assert found == {"1.1": 2600.0}


@pytest.mark.parametrize("kernel_ms", [None, 0.0, -1.0, float("nan"), float("inf"), 1e-320])
def test_no_figure_from_a_kernel_time_that_is_not_a_positive_number(kernel_ms: float | None) -> None:
    # the profiling child runs the submission's code: whatever it reports must not become a
    # figure that is not a number (nor one PostgreSQL's JSON refuses)
    assert Bandwidth.of("c", (4,), 1 << 20, kernel_ms) is None
    assert Bandwidth.of("c", (4,), 1 << 20, 0.5) is not None
