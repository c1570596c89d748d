"""Decoding: turn scored candidate fragments of one doc into (possibly nested) spans.

A candidate is (start, end, label, score) with `end` exclusive. A batch's candidates that
overlap no other candidate of their doc (most of them) are decided by array work
(`decode_batch`); a cluster of overlapping candidates is decoded in plain Python, where every
algorithm costs O(C log C) plus O(C * n) for C candidates of at most n tokens: a candidate
is only ever compared with spans that start within n tokens of it, never with all the doc's
candidates.
"""

from bisect import bisect_left, bisect_right
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy

from .span_geometry import contains


class Candidate(NamedTuple):
    start: int
    end: int
    label: str
    score: float


class Level(NamedTuple):
    """How one nesting level is decoded: algorithm name, threshold, per-label thresholds."""

    algorithm: str
    threshold: float
    label_thresholds: Dict[str, float] = {}

    def passes(self, candidate: Candidate) -> bool:
        return candidate.score >= self.label_thresholds.get(candidate.label, self.threshold)

    def thresholds(self, labels: Sequence[str]) -> numpy.ndarray:
        """Each label's threshold, in the order of `labels`: what `passes` compares a score with."""
        return numpy.asarray([self.label_thresholds.get(label, self.threshold) for label in labels], dtype="float64")


def _by_score(candidate: Candidate):
    # Ties go to the earlier, then the longer fragment, so results do not depend on input order.
    return -candidate.score, candidate.start, -candidate.end, candidate.label


def highest_first(candidates: Sequence[Candidate]) -> List[Candidate]:
    """In descending score, keep each candidate that overlaps no candidate kept so far."""
    kept: List[Candidate] = []
    taken = set()
    for cand in sorted(candidates, key=_by_score):
        tokens = range(cand.start, cand.end)
        if not any(t in taken for t in tokens):
            kept.append(cand)
            taken.update(tokens)
    return sorted(kept)


def longest_first(candidates: Sequence[Candidate]) -> List[Candidate]:
    """The non-overlapping subset covering the most tokens; ties go to the higher score sum.

    Weighted interval scheduling by dynamic programming over candidates sorted by end.
    """
    cands = sorted(candidates, key=lambda c: (c.end, c.start, c.label))
    ends = [c.end for c in cands]
    best: List[Tuple[int, float]] = [(0, 0.0)]
    choice: List[Tuple[bool, int]] = []
    for i, cand in enumerate(cands):
        prev = bisect_right(ends, cand.start, 0, i)
        covered, total = best[prev]
        take = (covered + cand.end - cand.start, total + cand.score)
        if take > best[i]:
            best.append(take)
            choice.append((True, prev))
        else:
            best.append(best[i])
            choice.append((False, i))
    kept, i = [], len(cands)
    while i > 0:
        took, prev = choice[i - 1]
        if took:
            kept.append(cands[i - 1])
            i = prev
        else:
            i -= 1
    return sorted(kept)


def nesting_aware(candidates: Sequence[Candidate], levels: Sequence[Level]) -> List[Tuple[Candidate, int]]:
    """All levels in one pass: in descending score, keep a candidate unless it crosses a kept span.

    Containment is allowed, so an inner span that outscores its container no longer blocks
    it (the decoding of exhaustive nested NER models). A candidate is also rejected when,
    with it added, some kept span (it included) would lie deeper than len(levels) or fail
    the threshold of the level it would then be on. One that fails only its own level's
    threshold but passes a deeper level's waits, and is tried again when a span kept later
    contains it. Returns (candidate, depth) pairs.
    """
    max_depth = len(levels)
    pool = sorted((c for c in candidates if any(level.passes(c) for level in levels)), key=_by_score)
    window = max((c.end - c.start for c in pool), default=0)
    kept_by_start: Dict[int, List[int]] = {}
    waiting_by_start: Dict[int, List[int]] = {}
    depth: Dict[int, int] = {}

    def try_keep(index: int) -> None:
        cand = pool[index]
        around = _kept_around(cand, pool, kept_by_start, window)
        if around is None:
            return
        n_ancestors, inside = around
        if n_ancestors >= max_depth or any(
            depth[other] + 1 >= max_depth or not levels[depth[other] + 1].passes(pool[other]) for other in inside
        ):
            return
        if not levels[n_ancestors].passes(cand):
            if any(level.passes(cand) for level in levels[n_ancestors + 1:]):
                waiting_by_start.setdefault(cand.start, []).append(index)
            return
        depth[index] = n_ancestors
        for other in inside:
            depth[other] += 1
        kept_by_start.setdefault(cand.start, []).append(index)
        retry = [w for start in range(cand.start, cand.end) for w in waiting_by_start.pop(start, ())]
        for waiting in sorted(retry):  # in score order
            if contains((cand.start, cand.end), (pool[waiting].start, pool[waiting].end)):
                try_keep(waiting)
            else:
                waiting_by_start.setdefault(pool[waiting].start, []).append(waiting)

    for index in range(len(pool)):
        try_keep(index)
    return [(pool[index], d) for index, d in depth.items()]


def _kept_around(cand: Candidate, pool: List[Candidate], kept_by_start: Dict[int, List[int]], window: int):
    """(how many kept spans contain `cand`, the kept spans inside it), or None when it crosses one.

    Only spans starting fewer than `window` tokens before it can overlap it.
    """
    bounds = (cand.start, cand.end)
    n_ancestors, inside = 0, []
    for start in range(cand.start - window + 1, cand.end):
        for other in kept_by_start.get(start, ()):
            other_bounds = (pool[other].start, pool[other].end)
            if other_bounds[1] <= cand.start:
                continue  # ends before the candidate begins
            if contains(other_bounds, bounds):
                n_ancestors += 1
            elif contains(bounds, other_bounds):
                inside.append(other)
            else:
                return None  # crosses a kept span, or has its exact bounds
    return n_ancestors, inside


FLAT_ALGORITHMS: Dict[str, Callable[[Sequence[Candidate]], List[Candidate]]] = {
    "highest-first": highest_first,
    "longest-first": longest_first,
}
NESTING_AWARE = "nesting-aware"
ALGORITHMS = (NESTING_AWARE, *FLAT_ALGORITHMS)


def decode(candidates: Sequence[Candidate], levels: Sequence[Level]) -> List[Tuple[Candidate, int]]:
    """Decode a doc's candidates with one Level per nesting depth (len(levels) is the maximum).

    Returns (candidate, depth) pairs, depth 0 being the outer level, sorted by position.
    A flat algorithm decodes its level, then each kept span's inside with the next level
    (the paper's level-by-level decoding); "nesting-aware" decodes its level and all
    deeper ones at once. One level gives flat output.
    """
    _check(levels)
    by_start = sorted(candidates, key=lambda c: (c.start, c.end))
    starts = [c.start for c in by_start]
    found: List[Tuple[Candidate, int]] = []

    def decode_level(pool: List[Candidate], depth: int) -> None:
        level = levels[depth]
        if level.algorithm == NESTING_AWARE:
            found.extend((c, depth + d) for c, d in nesting_aware(pool, levels[depth:]))
            return
        for span in FLAT_ALGORITHMS[level.algorithm]([c for c in pool if level.passes(c)]):
            found.append((span, depth))
            if depth + 1 < len(levels):
                # Candidates inside a span start inside it: a slice of the sorted list, not a scan.
                lo, hi = bisect_left(starts, span.start), bisect_left(starts, span.end)
                inside = [c for c in by_start[lo:hi] if contains((span.start, span.end), (c.start, c.end))]
                if inside:
                    decode_level(inside, depth + 1)

    decode_level(by_start, 0)
    return sorted(found, key=lambda item: (item[0].start, -item[0].end, item[1]))


def _check(levels: Sequence[Level]) -> None:
    for level in levels:
        if level.algorithm not in ALGORITHMS:
            raise ValueError(f"Unknown decoding algorithm {level.algorithm!r}; use one of {list(ALGORITHMS)}")


class CandidateTable(NamedTuple):
    """A batch's candidates as arrays, in fragment order (by doc, start, end): rows of (doc, start,
    end), label indices into `labels`, scores; and the number of docs."""

    fragments: numpy.ndarray
    label_ids: numpy.ndarray
    scores: numpy.ndarray
    n_docs: int
    labels: Sequence[str]

    @classmethod
    def empty(cls, n_docs: int, labels: Sequence[str]) -> "CandidateTable":
        return cls(numpy.zeros((0, 3), dtype="int64"), numpy.zeros(0, dtype="int64"), numpy.zeros(0, "float32"),
                   n_docs, labels)

    def doc_bounds(self) -> List[int]:
        return numpy.searchsorted(self.fragments[:, 0], numpy.arange(self.n_docs + 1)).tolist()

    def made(self, rows) -> List[Candidate]:
        """Candidate objects of the rows `rows` (an index array or a slice)."""
        fragments = self.fragments[rows]
        labels = numpy.asarray(self.labels, dtype=object)[self.label_ids[rows]].tolist()
        return list(map(Candidate, fragments[:, 1].tolist(), fragments[:, 2].tolist(), labels,
                        self.scores[rows].tolist()))

    def per_doc(self) -> List[List[Candidate]]:
        """Each doc's candidates."""
        candidates, bounds = self.made(slice(None)), self.doc_bounds()
        return [candidates[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def decode_batch(table: CandidateTable, levels: Sequence[Level]) -> List[List[Tuple[Candidate, int]]]:
    """`decode` of each doc's candidates, cluster by cluster. Candidates joined by a chain of overlaps
    form a cluster, and what one cluster keeps never depends on another's (every algorithm compares a
    candidate only with those it overlaps, or contains). A candidate alone in its cluster (most of them) is
    kept, at depth 0, exactly when it passes the outer level's threshold, whatever the algorithm: that is
    decided for the whole batch at once, and only the clusters of several candidates are decoded one by one,
    not their whole docs. A candidate that passes no level's threshold is dropped first: no algorithm keeps
    it, and without it its neighbours may fall into clusters of their own."""
    _check(levels)
    out: List[List[Tuple[Candidate, int]]] = [[] for _ in range(table.n_docs)]
    lowest = numpy.min([level.thresholds(table.labels) for level in levels], axis=0)
    rows = numpy.flatnonzero(table.scores >= lowest[table.label_ids]) if len(table.scores) else []
    if len(rows) == 0:
        return out
    docs, starts, ends = (table.fragments[rows, k] for k in range(3))
    # In (doc, start, end) order a candidate opens a cluster when it starts at or after the end of every
    # earlier candidate of its doc: a running maximum of the ends, offset by doc so that docs do not mix.
    offset = docs * (int(ends.max()) + 1)
    reach = numpy.maximum.accumulate(offset + ends)
    opens = numpy.ones(len(rows), dtype=bool)
    opens[1:] = offset[1:] + starts[1:] >= reach[:-1]
    firsts = numpy.flatnonzero(opens)
    sizes = numpy.diff(numpy.append(firsts, len(rows)))
    alone = firsts[sizes == 1]
    alone = alone[table.scores[rows[alone]] >= levels[0].thresholds(table.labels)[table.label_ids[rows[alone]]]]
    decoded = [(first, [(candidate, 0)]) for first, candidate in zip(alone.tolist(), table.made(rows[alone]))]
    shared = sizes > 1
    in_shared = numpy.repeat(shared, sizes)
    candidates = table.made(rows[in_shared])
    bounds = numpy.cumsum(sizes[shared]).tolist()
    for first, lo, hi in zip(firsts[shared].tolist(), [0] + bounds, bounds):
        decoded.append((first, decode(candidates[lo:hi], levels)))
    # Clusters in table order are in position order within a doc, and each one's spans are sorted.
    decoded.sort(key=lambda item: item[0])
    doc_of = docs.tolist()
    for first, spans in decoded:
        out[doc_of[first]].extend(spans)
    return out


def levels_from(cfg: Dict) -> List[Level]:
    """The levels described by a fofe_ner cfg: the outer one, then max_depth - 1 inner ones.

    Inner levels use nested_threshold for every label; with nested_threshold None they use
    the outer thresholds (threshold and label_thresholds). Inner spans score lower than
    outer ones, so per-label thresholds tuned on the outer level would starve them.
    """
    outer = Level(cfg["decoding"], cfg["threshold"], cfg["label_thresholds"])
    if not cfg["nested"]:
        return [outer]
    if cfg["nested_threshold"] is None:
        inner = Level(cfg["nested_decoding"], cfg["threshold"], cfg["label_thresholds"])
    else:
        inner = Level(cfg["nested_decoding"], cfg["nested_threshold"])
    return [outer] + [inner] * (cfg["max_depth"] - 1)
