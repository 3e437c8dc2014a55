"""No bench rots (issue 53), on a GPU: every GPU bench of bench/ run with its smallest sizes (a
grade or a round, a problem, a mutant) as a subprocess that must exit 0, print its figures and
record nothing (KG_BENCH_SMOKE; $OUT is the test's folder). Parts 5 and 6 of the suite
(tests/conftest.py GPU_PARTS); skipped without a GPU. The list: tests/fixtures/bench_smoke.py."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.fixtures.bench_smoke import GPU_SMOKES, Smoke, corpus_zip, run_smoke

pytestmark = pytest.mark.gpu


@pytest.mark.timeout(600)
@pytest.mark.parametrize("smoke", GPU_SMOKES, ids=lambda s: s.name)
def test_gpu_bench_smoke(smoke: Smoke, tmp_path: Path) -> None:
    if smoke.needs_corpus and corpus_zip() is None:
        pytest.skip("no .corpus/zips carried (ignored by git)")
    if smoke.needs_tool and not (shutil.which(smoke.needs_tool) or Path("/usr/local/cuda/bin", smoke.needs_tool).exists()):
        pytest.skip(f"no {smoke.needs_tool} on this machine")
    values = {"tmp": str(tmp_path), "corpus_zip": corpus_zip() or ""}
    run_smoke(smoke, {"OUT": str(tmp_path / "out"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, values,
              timeout_s=540)
