"""Similarity fidelity on the development corpus: where planted copies rank among the genuine
pairs of real submissions, with the official starter as the base and with our kit's fallback.

    .venv/bin/python bench/similarity_fidelity.py [--corpus .corpus] [--common DIR ...] [--out .gpu-out/similarity-fidelity.json]

The class: every submission under CORPUS/src/<name>/llmsys_hw4 (the rubric's student files).
--common: folders listed as common code (grader.similarity.public's role "common"), left out like
the base: on the corpus, an earlier assignment's tree (hw3's `src/combine.cu` and minitorch, which
the hw4 submissions carry and the official hw4 starter lacks).
For each ordered pair (source, copier) of different submissions and each kind of copy, the
copier's submission is changed and the class compared again:
- verbatim: the copier's src/softmax_kernel.cu replaced by the source's;
- disguised: the copier's src/layernorm_kernel.cu replaced by the source's with identifiers
  renamed, comments and layout changed and two functions swapped (bench/similarity_plants.py);
- kernel: the source's ker_ln_bw_dgamma_dbetta pasted over the copier's own.
A plant counts only where the source wrote the copied code (at least MIN_OWN_LINES of its
lines are not lines of the official starter's file); it ranks 1 when the ranking puts it above every genuine pair
of that class (its order: the score, then the lines the strongest matches share). Printed: per kind and base,
plants, how many rank 1, worst rank, the smallest margin over the best genuine pair; the
genuine pairs' score distribution; written as JSON to --out, with each plant's rank, score and
driver beside the best genuine pair of its class.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks_md import add_smoke_flag, smoke  # noqa: E402

from bench.similarity_plants import disguise, function_text, paste_function, smoke_corpus  # noqa: E402
from grader.similarity.cache import PrintCache  # noqa: E402
from grader.similarity.compare import Fingerprinting, PairResult, compare_class, starter_sources, tree_sources  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402

KINDS = {
    "verbatim": "src/softmax_kernel.cu",
    "disguised": "src/layernorm_kernel.cu",
    "kernel": "src/layernorm_kernel.cu",
}
KERNEL = "ker_ln_bw_dgamma_dbetta"
MIN_OWN_LINES = 20  # a plant copies at least this many lines the source wrote


def plant(kind: str, source: dict[str, str], copier: dict[str, str], base: dict[str, str],
          seed: int) -> dict[str, str] | None:
    path = KINDS[kind]
    if path not in source or path not in copier:
        return None
    text: str | None
    if kind == "verbatim":
        text = source[path]
    elif kind == "disguised":
        text = disguise(path, source[path], base.get(path, ""), seed)
    else:
        pasted = function_text(path, source[path], KERNEL)
        text = paste_function(path, copier[path], KERNEL, pasted) if pasted else None
        if text is None:
            return None
    return {**copier, path: text}


def genuine_scores(pairs: list[PairResult], planted: tuple[str, str]) -> list[float]:
    return [p.score for p in pairs if {p.a, p.b} != set(planted)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, default=Path(".corpus"))
    parser.add_argument("--out", type=Path, default=Path(".gpu-out/similarity-fidelity.json"))
    parser.add_argument("--common", type=Path, action="append", default=[],
                        help="a folder listed as common code (repeatable)")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):  # three students made from the kit, no .corpus/ needed; the JSON to a temp folder
        with tempfile.TemporaryDirectory(prefix="kg-sim-smoke-") as tmp:
            args.corpus, args.out = smoke_corpus(Path(tmp)), Path(tmp) / "similarity-fidelity.json"
            plants_ranked(args)
        return
    plants_ranked(args)


def plants_ranked(args: argparse.Namespace) -> None:
    rubric = load_rubric("hw4")
    students = {d.name: tree_sources(d / "llmsys_hw4", rubric.student_files)
                for d in sorted((args.corpus / "src").iterdir()) if (d / "llmsys_hw4").is_dir()}
    bases = {"official starter": tree_sources(args.corpus / "official", rubric.student_files),
             "kit fallback": starter_sources(rubric)}
    common = [tree_sources(folder, rubric.student_files) for folder in args.common]
    cache = PrintCache(Fingerprinting())
    results: dict[str, Any] = {"students": sorted(students), "common": [str(f) for f in args.common], "bases": {}}
    for base_name, base in bases.items():
        received = base_name == "official starter"
        config = Fingerprinting(literal_copies=received)  # as grader.similarity.store sets it
        started = time.monotonic()
        genuine = compare_class(students, base, config, cache, common=common)
        rows = {}
        for kind in KINDS:
            ranks, margins, skipped, each = [], [], [], []
            for seed, (src, dst) in enumerate((s, d) for s in students for d in students if s != d):
                if own_lines(kind, students[src], bases["official starter"]) < MIN_OWN_LINES:
                    skipped.append(f"{src}->{dst}: {src}'s copied code is the starter's")
                    continue
                changed = plant(kind, students[src], students[dst], base, seed)
                if changed is None:
                    skipped.append(f"{src}->{dst}: no {KINDS[kind]} / {KERNEL}")
                    continue
                pairs = compare_class({**students, dst: changed}, base, config, cache, common=common)
                planted = next(p for p in pairs if {p.a, p.b} == {src, dst})
                rest = genuine_scores(pairs, (src, dst))
                ranks.append(1 + pairs.index(planted))  # the ranking's order: ties in score go by shared lines
                margins.append(planted.score - max(rest))
                best = next(p for p in pairs if {p.a, p.b} != {src, dst})
                each.append({"source": src, "copier": dst, "rank": ranks[-1], "score": planted.score,
                             "shared_lines": planted.shared_lines, "driver": planted.driver,
                             "best_genuine": [best.a, best.b, best.score, best.shared_lines, best.driver]})
            rows[kind] = {"plants": len(ranks), "rank_1": sum(r == 1 for r in ranks), "worst_rank": max(ranks, default=0),
                          "min_margin": round(min(margins, default=0.0), 3),
                          "median_margin": round(statistics.median(margins), 3) if margins else 0.0,
                          "skipped": skipped, "each": each}
        scores = sorted(p.score for p in genuine)
        results["bases"][base_name] = {
            "seconds": round(time.monotonic() - started, 1), "kinds": rows,
            "genuine": {"pairs": len(scores), "min": scores[0], "median": statistics.median(scores),
                        "p90": scores[int(0.9 * (len(scores) - 1))], "max": scores[-1],
                        "top": [(p.a, p.b, p.score, p.driver) for p in genuine[:5]]},
        }
    _print(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


def own_lines(kind: str, source: dict[str, str], base: dict[str, str]) -> int:
    """Lines of the copied code (non-blank, stripped) that are not lines of the base's file."""
    path = KINDS[kind]
    copied = source.get(path, "") if kind != "kernel" else function_text(path, source.get(path, ""), KERNEL) or ""
    starter = {line.strip() for line in base.get(path, "").splitlines()}
    return sum(1 for line in copied.splitlines() if line.strip() and line.strip() not in starter)


def _print(results: dict) -> None:
    print(f"students: {', '.join(results['students'])}")
    print(f"common code: {', '.join(results['common']) or 'none listed'}")
    for base_name, row in results["bases"].items():
        g = row["genuine"]
        print(f"\nbase: {base_name} ({row['seconds']} s)")
        print(f"  genuine pairs: {g['pairs']}, score min {g['min']:.3f} median {g['median']:.3f} "
              f"p90 {g['p90']:.3f} max {g['max']:.3f}")
        for a, b, score, driver in g["top"]:
            print(f"    {a} / {b}: {score:.3f} ({driver})")
        print("  kind       plants  rank 1  worst rank  min margin  median margin")
        for kind, k in row["kinds"].items():
            print(f"  {kind:<10} {k['plants']:>6}  {k['rank_1']:>6}  {k['worst_rank']:>10}  {k['min_margin']:>10.3f}"
                  f"  {k['median_margin']:>13.3f}")


if __name__ == "__main__":
    main()
