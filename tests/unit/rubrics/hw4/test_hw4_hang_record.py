"""Which launcher a request that got no answer was running, and the record's scope
(rubrics.hw4.hangs): a step is blamed only for a launcher it calls, and a hang found on a
hidden case settles hidden calls alone. The stage around it: tests/unit/rubrics/hw4/test_gpu_stage_hangs.py."""
from __future__ import annotations

import pytest

from rubrics.hw4.abi import prepared_forward
from rubrics.hw4.hangs import FUSED_KINDS, HungLaunchers, binding_calls, hang_words, path_calls, waited_on


@pytest.mark.parametrize(("request_", "blamed"), [
    ({"op": "abi", "case": {"kind": "softmax_bw"}}, "softmax_bw"),
    ({"op": "kernel_time", "case": {"kind": "layernorm_fw"}}, "layernorm_fw"),
    ({"op": "binding_prepare", "kind": "softmax_bw", "variant": "custom"}, None),  # tensors made: no launcher
    ({"op": "binding_forward", "kind": "softmax_bw", "variant": "custom"}, "softmax_fw"),
    ({"op": "binding_forward", "kind": "softmax_bw", "variant": "baseline"}, None),  # nn.softmax: basic ops
    ({"op": "binding_forward", "kind": "layernorm_bw", "variant": "baseline"}, "layernorm_fw"),  # the fused forward
    ({"op": "binding_run", "kind": "softmax_bw", "variant": "custom"}, "softmax_bw"),
    ({"op": "binding_read", "kind": "layernorm_fw", "variant": "custom"}, "layernorm_fw"),
    ({"op": "binding_run", "kind": "layernorm_fw", "variant": "baseline"}, None),  # the composition
    ({"op": "binding_warm"}, None),
    ({"op": "p3_step", "model": "fused"}, None),
])
def test_a_timeout_is_blamed_on_the_launcher_its_step_runs(request_: dict, blamed: str | None) -> None:
    assert waited_on(request_) == blamed


def test_what_each_path_calls() -> None:
    for kind in FUSED_KINDS:
        assert path_calls("abi", kind) == (kind,)
        forward = prepared_forward(kind, "custom")
        assert path_calls("binding", kind) == binding_calls(kind) == ((kind,) if forward is None else
                                                                      (kind.replace("_bw", "_fw"), kind))


def test_a_hidden_hang_settles_only_hidden_calls_and_a_public_one_everything() -> None:
    hangs = HungLaunchers()
    hidden = hang_words("layernorm_fw", 60, "in case abi:lnfw-r1h4")
    hangs.name("layernorm_fw", hidden, public=False)
    assert hangs.why(("layernorm_fw", "layernorm_bw"), public=False) == hidden
    assert hangs.why(("layernorm_fw",), public=True) is None  # the course's cases, timing, Problem 3 run
    assert hangs.why(("layernorm_bw",), public=False) is None  # the backward alone was not blamed
    public = hang_words("layernorm_fw", 60, "in case abi:lnfw-r7h32")
    hangs.name("layernorm_fw", public, public=True)
    hangs.name("layernorm_fw", hang_words("layernorm_fw", 60, "in case abi:other"), public=True)  # first one stays
    assert hangs.why(("layernorm_fw",), public=True) == hangs.why(("layernorm_fw",), public=False) == public
    assert public == "your LayerNorm forward (launch_layernorm) did not return within 60 s in case abi:lnfw-r7h32"
    assert hangs.record() == {"layernorm_fw": {"launcher": "launch_layernorm", "words": public, "public": True}}
