"""Clusters: a file several students hand in identical or nearly so, reported as a group (who,
which files, since when) beside the pair ranking (grader.similarity.compare).

Four of eight students with one solution score high with one another in the pair ranking
(grader.similarity.compare), spread over six pairs; clusters say it once, as a group (four
students, one file, who first uploaded it when), however many students hold it. To group files, every file a student
hands in (the rubric's `student_files`) is normalized as the fingerprints normalize it
(copydetect's `filter_code`: names, strings, comments and layout do not count) and grouped by
that content (identical), then groups whose own code (fingerprints outside the base, its hints
and the common sources) overlaps by `Fingerprinting.near_identical` both ways join, single-linkage
(near-identical). A file the same as a file of the base or of a common source after
normalization is the starter's or that source's, never a copy; a file with less own code than `Fingerprinting.cluster_min_prints` is
too little to tell copying from two students writing the obvious line. A cluster is a group
held by two students or more; `since` is when each one first uploaded that content
(grader.similarity.store fills it from the submissions).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from grader.similarity.cache import PrintCache
from grader.similarity.compare import Sources, boilerplate_files, fingerprints_of, own_files


@dataclass(frozen=True)
class Holder:
    """One student's file in a cluster."""

    student: str
    path: str
    digest: str  # sha256 of the normalized content (grader.similarity.prints.normalized_digest)
    since: datetime | None = None  # when the student first uploaded that content


@dataclass(frozen=True)
class Cluster:
    identical: bool  # every holder's file is the same after normalization
    holders: tuple[Holder, ...]  # by student, then path

    @property
    def students(self) -> tuple[str, ...]:
        return tuple(sorted({h.student for h in self.holders}))

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(sorted({h.path for h in self.holders}))

    @property
    def uploads(self) -> tuple[tuple[str, tuple[tuple[datetime | None, tuple[str, ...]], ...]], ...]:
        """Per student, each first upload time with the files first uploaded then (one entry when
        a student handed in every file of the cluster at once)."""
        found: dict[str, dict[datetime | None, list[str]]] = {}
        for h in self.holders:
            found.setdefault(h.student, {}).setdefault(h.since, []).append(h.path)
        return tuple((student, tuple(sorted(((at, tuple(paths)) for at, paths in times.items()),
                                            key=lambda e: (e[0] is None, e[0] or datetime.min, e[1]))))
                     for student, times in sorted(found.items()))

    @property
    def kind(self) -> str:
        return "identical" if self.identical else "near-identical"

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "identical": self.identical, "students": list(self.students),
                "files": list(self.files),
                "holders": [{"student": h.student, "path": h.path, "digest": h.digest,
                             "since": h.since.isoformat() if h.since else None} for h in self.holders]}


def cluster_of(data: Mapping[str, Any]) -> Cluster:
    """A cluster from `Cluster.as_json`."""
    return Cluster(data["identical"], tuple(
        Holder(h["student"], h["path"], h["digest"], datetime.fromisoformat(h["since"]) if h["since"] else None)
        for h in data["holders"]))


@dataclass
class _Group:
    digest: str
    holders: list[tuple[str, str]]  # (student, path)
    own: np.ndarray  # the content's fingerprints outside the base and its hints, unique


def find_clusters(students: Mapping[str, Sources], base: Sources, prints: PrintCache,
                  common: Iterable[Sources] = ()) -> list[Cluster]:
    """The clusters of the class, most students first. `prints`: the fingerprints compare_class
    used (the same cache: nothing is tokenized twice; a file the same as the base's byte for
    byte is passed over unread, as compare_class does); `common`: the files of each source listed
    as code the class may share: a file the same as one of them is no copy either."""
    config = prints.config
    shared = boilerplate_files(base, common)
    known = {prints.get(path, text).digest for path, text in shared}
    boilerplate = fingerprints_of(shared, prints)
    groups: dict[str, _Group] = {}
    for student in sorted(students):
        for path, text in sorted(own_files(students[student], base).items()):
            print_ = prints.get(path, text)
            if print_.digest in known:
                continue
            if print_.digest not in groups:
                hashes = np.unique(print_.hashes)
                groups[print_.digest] = _Group(print_.digest, [], hashes[~np.isin(hashes, boilerplate)])
            groups[print_.digest].holders.append((student, path))
    kept = [g for g in groups.values() if g.own.size >= config.cluster_min_prints]
    clusters = [_cluster(linked, len(linked) == 1) for linked in _linked(kept, config.near_identical)]
    clusters = _merged([c for c in clusters if len(c.students) > 1])
    clusters.sort(key=lambda c: (-len(c.students), not c.identical, c.students, c.files))
    return clusters


def _cluster(groups: list[_Group], identical: bool) -> Cluster:
    holders = sorted((Holder(student, path, g.digest) for g in groups for student, path in g.holders), key=_holder_order)
    return Cluster(identical, tuple(holders))


def _holder_order(holder: Holder) -> tuple[str, str]:
    return holder.student, holder.path


def _merged(clusters: list[Cluster]) -> list[Cluster]:
    """Clusters of the same students and kind as one, their files together (four students who
    copied a whole submission are one row, not one per file)."""
    by_key: dict[tuple[tuple[str, ...], bool], list[Holder]] = {}
    for cluster in clusters:
        by_key.setdefault((cluster.students, cluster.identical), []).extend(cluster.holders)
    return [Cluster(identical, tuple(sorted(holders, key=_holder_order))) for (_, identical), holders in by_key.items()]


def _linked(groups: list[_Group], share: float) -> list[list[_Group]]:
    """`groups` joined where their own fingerprints overlap by `share` of each side, single
    linkage (union-find). Only groups of sizes within `share` of each other can overlap so, so
    each is compared with the next larger ones within that ratio."""
    order = sorted(range(len(groups)), key=lambda i: groups[i].own.size)
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for at, i in enumerate(order):
        small = groups[i].own
        for j in order[at + 1:]:
            large = groups[j].own
            if small.size < share * large.size:
                break
            common = np.intersect1d(small, large, assume_unique=True).size
            if common >= share * large.size:  # and so >= share of the smaller side
                parent[root(i)] = root(j)
    joined: dict[int, list[_Group]] = {}
    for i, group in enumerate(groups):
        joined.setdefault(root(i), []).append(group)
    return list(joined.values())


def dated(clusters: list[Cluster], since: Mapping[tuple[str, str], datetime]) -> list[Cluster]:
    """`clusters` with each holder's `since` from (student, digest) -> first upload."""
    return [replace(c, holders=tuple(replace(h, since=since.get((h.student, h.digest))) for h in c.holders))
            for c in clusters]
