"""Similarity at class scale: 300 synthetic students made from the development corpus, compared
from a cold fingerprint cache, on the cores this process may use.

    taskset -c 0,1 .venv/bin/python bench/similarity_scale.py [--students 300] [--corpus .corpus]

Student i takes each file of a corpus submission chosen at random per file (the official starter's
file where none changed it) and perturbs it (bench/similarity_plants.perturb: extra tokens on a
share of the lines, so no two students' files are equal). The base is the official starter.
Printed: students, files fingerprinted, cores, seconds fingerprinting (progress), seconds in all,
pairs, the best genuine-looking score; a planted verbatim copy's rank; the clusters found and the
seconds they took beyond the comparison (near-identical matching compares files within a size band).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks_md import add_smoke_flag, smoke  # noqa: E402

from bench.similarity_plants import perturb, smoke_corpus  # noqa: E402
from grader.similarity.cache import PrintCache  # noqa: E402
from grader.similarity.clusters import find_clusters  # noqa: E402
from grader.similarity.compare import compare_class, tree_sources  # noqa: E402
from grader.similarity.prints import Fingerprinting  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--corpus", type=Path, default=Path(".corpus"))
    parser.add_argument("--seed", type=int, default=20261201)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):  # a few students made from the kit: runs without .corpus/
        with tempfile.TemporaryDirectory(prefix="kg-sim-smoke-") as tmp:
            args.students, args.corpus = 4, smoke_corpus(Path(tmp))
            compare_scale(args)
        return
    compare_scale(args)


def compare_scale(args: argparse.Namespace) -> None:
    rubric = load_rubric("hw4")
    corpus = [tree_sources(d / "llmsys_hw4", rubric.student_files)
              for d in sorted((args.corpus / "src").iterdir()) if (d / "llmsys_hw4").is_dir()]
    base = tree_sources(args.corpus / "official", rubric.student_files)
    rng = random.Random(args.seed)
    paths = sorted({p for s in corpus for p in s})
    students: dict[str, dict[str, str]] = {}
    for i in range(args.students):
        files = {}
        for path in paths:
            text = rng.choice(corpus).get(path) or base.get(path)
            if text is not None:
                files[path] = text if base.get(path) == text else perturb(path, text, rng)
        students[f"s{i:03d}"] = files
    copied = "src/softmax_kernel.cu"
    students["s001"] = {**students["s001"], copied: students["s000"][copied]}
    cores = len(os.sched_getaffinity(0))
    config = Fingerprinting()
    cache = PrintCache(config, workers=cores)
    marks: dict[str, float] = {}
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        marks.setdefault("total", total)
        if done == total:
            marks["fingerprinted"] = time.monotonic() - started

    pairs = compare_class(students, base, config, cache, progress)
    seconds = time.monotonic() - started
    clusters = find_clusters(students, base, cache)  # the fingerprints are cached by now
    cluster_seconds = time.monotonic() - started - seconds
    rank = next(i for i, p in enumerate(pairs, start=1) if {p.a, p.b} == {"s000", "s001"})
    genuine = [p for p in pairs if {p.a, p.b} != {"s000", "s001"}]
    print(f"{len(students)} students, {int(marks.get('total', 0))} files fingerprinted on {cores} cores: "
          f"{marks.get('fingerprinted', 0.0):.1f} s; compared in all {seconds:.1f} s; {len(pairs)} pairs; "
          f"best other pair {genuine[0].score:.3f} ({genuine[0].driver}); the planted copy ranks {rank} "
          f"({pairs[rank - 1].score:.3f}, {pairs[rank - 1].driver}); clusters: {len(clusters)} in "
          f"{cluster_seconds:.1f} s more")


if __name__ == "__main__":
    main()
