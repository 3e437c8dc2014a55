"""The cost of one password hash (grader/passwords.py) at the production default of
KG_ARGON2_* and at the test suite's (tests/conftest.py), hashed in turn on this machine.

    .venv/bin/python bench/password_hash_cost.py [--repeats 20]

Prints, per cost, the median and the range of the milliseconds one hash took, and their ratio:
what each of the suite's hashes (about a thousand a run) saves.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks_md import add_smoke_flag, smoke  # noqa: E402

from grader.models import User  # noqa: E402
from grader.passwords import set_password  # noqa: E402
from grader.settings import Argon2Settings  # noqa: E402

COSTS = {"production default": Argon2Settings(),
         "test suite": Argon2Settings(time_cost=1, memory_kib=8, parallelism=1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.repeats = 2
    ms: dict[str, list[float]] = {name: [] for name in COSTS}
    user = User(username="bench")
    for _ in range(args.repeats):
        for name, cost in COSTS.items():  # in turn, so both see the same machine
            started = time.perf_counter()
            set_password(user, "correct horse battery", cost)
            ms[name].append((time.perf_counter() - started) * 1000)
    print("| cost | ms per hash (median) | range |\n| --- | --- | --- |")
    for name, times in ms.items():
        cost = COSTS[name]
        print(f"| {name} (t={cost.time_cost}, m={cost.memory_kib} KiB, p={cost.parallelism}) "
              f"| {statistics.median(times):.3f} | {min(times):.3f}-{max(times):.3f} |")
    ratio = statistics.median(ms["production default"]) / statistics.median(ms["test suite"])
    print(f"\nproduction / suite, medians: {ratio:.0f}x over {args.repeats} hashes each")


if __name__ == "__main__":
    main()
