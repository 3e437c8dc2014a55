"""No bench rots (issue 53): every CPU bench of bench/ runs here in its --smoke mode (the
smallest sizes, seconds each, nothing recorded) on the suite's PostgreSQL and Redis, and must
exit 0, print its figures and leave BENCHMARKS.md and docs/benchmarks/ as they were. The GPU benches run so in the GPU
suite (tests/gpu/test_bench_smoke_gpu.py); every script of bench/ is one or the other."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import PG_ADMIN_URL, REDIS_URL
from tests.fixtures.bench_smoke import CPU_SMOKES, GPU_SMOKES, Smoke, bench_scripts, run_smoke
from tests.service.conftest import fresh_database


def test_every_bench_script_has_a_smoke_run() -> None:
    listed = {s.script for s in (*CPU_SMOKES, *GPU_SMOKES)}
    assert bench_scripts() - listed == set(), "a bench script without a smoke run in tests/fixtures/bench_smoke.py"
    assert listed - bench_scripts() == set(), "a smoke run of a script that is no more"


@pytest.mark.timeout(330)
@pytest.mark.parametrize("smoke", CPU_SMOKES, ids=lambda s: s.name)
def test_cpu_bench_smoke(smoke: Smoke, settings_env: dict[str, str], tmp_path: Path) -> None:
    if smoke.needs_root and os.geteuid() != 0:
        pytest.skip("the sandbox's namespaces need a root parent")
    if smoke.script == "gaming_standin" and shutil.which("g++") is None:
        pytest.skip("g++ builds the CPU stand-in's kernels")
    # The benches' own variables for the suite's services; the session's build cache, so the kit
    # is built once for the suite, not once per bench.
    env = {"KG_TEST_PG_URL": PG_ADMIN_URL, "KG_TEST_REDIS_URL": REDIS_URL, "KG_BENCH_PG_URL": PG_ADMIN_URL,
           "KG_BENCH_REDIS_URL": REDIS_URL, "KG_BUILD_CACHE_DIR": settings_env["KG_BUILD_CACHE_DIR"]}
    if "{database}" not in smoke.args:
        run_smoke(smoke, env, {"tmp": str(tmp_path)})
        return
    with fresh_database("kg_bench_smoke") as url:
        run_smoke(smoke, env, {"tmp": str(tmp_path), "database": url})
