"""The shapes the course's own kernel tests time, so kernelgrade's speedup is the course's.

Each official test file (kernel_tests/test_*.py of llmsystem/llmsys_hw4 @ e2162e7) runs in a
fresh process whose `test_utils` seeds Python's `random` with 42 at import; its five cases then
draw their shapes through `TestDecorator.bs_sl` (seq 1..512, batch up to 1024 // seq) and, for
LayerNorm, `hidden_dim` (always 32 for float32 with nhead 8, but it still draws from `random`);
the softmax forward test also draws one valid length per batch for its padding mask. Replaying
that sequence of draws gives the very shapes the course's harness prints, case by case
(`bench/fidelity.py` checks them against its output on every run).
"""
from __future__ import annotations

import random

from rubrics.hw4.cases import Case, make_case

COURSE_SEED = 42  # test_utils.random_seed
MAX_BATCH_TOKENS = 1024  # test_utils.max_batch_tokens
MAX_SEQ_LEN = 512  # test_utils.max_seq_len
NHEAD = 8  # kt.init(nhead=8) in every kernel test
CASES_PER_TEST = 5  # @kt.case(ntest=5)
LN_HIDDEN = 32  # hidden_dim: head_dim 1 (range(1, 10 // 8 + 1)) x nhead 8 x io_factor 4


def _bs_sl(draw: random.Random, batch: int | None = None) -> tuple[int, int]:
    """(batch, seq) as TestDecorator.bs_sl draws them (its enable_quant branch is unused)."""
    if batch is None:
        seq = draw.randint(1, MAX_SEQ_LEN)
        return draw.randint(1, MAX_BATCH_TOKENS // seq), seq
    return batch, draw.randint(1, min(MAX_BATCH_TOKENS // batch, MAX_SEQ_LEN))


def course_shapes(problem: str) -> list[tuple[int, ...]]:
    """The CASES_PER_TEST shapes the course's test of `problem` times, in order:
    (batch, nhead, from_len, to_len) for softmax, (rows, hidden) for LayerNorm."""
    draw = random.Random(COURSE_SEED)
    shapes: list[tuple[int, ...]] = []
    for _ in range(CASES_PER_TEST):
        batch, first = _bs_sl(draw)
        if problem in ("1.1", "1.2"):
            _, to_len = _bs_sl(draw, batch)
            if problem == "1.1":
                for _ in range(batch):  # kt.attn_mask: one valid length per batch
                    draw.randint(1, to_len)
            shapes.append((batch, NHEAD, first, to_len))
        elif problem in ("2.1", "2.2"):
            draw.choice(range(1, 10 // NHEAD + 1))  # kt.hidden_dim's head_dim draw
            shapes.append((batch * first, LN_HIDDEN))
        else:
            raise ValueError(f"no course kernel test for problem {problem!r}")
    return shapes


def timing_cases(problem: str) -> list[Case]:
    """One public Case per shape the course's test times (softmax forward: padded keys, as
    the course's mask; softmax backward: the course's softmax of uniform rows)."""
    cases = []
    for i, shape in enumerate(course_shapes(problem)):
        if problem == "1.1":
            b, h, f, t = shape
            cases.append(make_case("softmax_fw", id=f"time-{i}-sfw-b{b}h{h}f{f}t{t}", problem=problem, public=True,
                                   batch=b, nhead=h, from_len=f, to_len=t, mask="pad", mask_future=False))
        elif problem == "1.2":
            b, h, f, t = shape
            cases.append(make_case("softmax_bw", id=f"time-{i}-sbw-b{b}h{h}f{f}t{t}", problem=problem, public=True,
                                   rows=b * h * f, softmax_len=t, batch=b, nhead=h, from_len=f))
        else:
            rows, hidden = shape
            kind = "layernorm_fw" if problem == "2.1" else "layernorm_bw"
            short = "lfw" if problem == "2.1" else "lbw"
            cases.append(make_case(kind, id=f"time-{i}-{short}-r{rows}h{hidden}", problem=problem, public=True,
                                   rows=rows, hidden=hidden))
    return cases
