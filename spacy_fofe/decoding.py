"""Decoding: turn scored candidate fragments of one doc into (possibly nested) spans.

Plain Python over a short candidate list; no model code. A candidate is
(start, end, label, score) with `end` exclusive.
"""

from bisect import bisect_right
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple


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


def highest_first(candidates: Sequence[Candidate]) -> List[Candidate]:
    """In descending score, keep each candidate that overlaps no candidate kept so far."""
    kept: List[Candidate] = []
    taken = set()
    # Ties go to the earlier, then the longer fragment, so results do not depend on input order.
    for cand in sorted(candidates, key=lambda c: (-c.score, c.start, -c.end, c.label)):
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


ALGORITHMS: Dict[str, Callable[[Sequence[Candidate]], List[Candidate]]] = {
    "highest-first": highest_first,
    "longest-first": longest_first,
}


def decode(candidates: Sequence[Candidate], levels: Sequence[Level]) -> List[Tuple[Candidate, int]]:
    """Decode the outer level, then each kept span's inside with the next level, and so on.

    Returns (candidate, depth) pairs, depth 0 being the outer level, sorted by position.
    One level gives flat output; len(levels) is the maximum nesting depth.
    """
    for level in levels:
        if level.algorithm not in ALGORITHMS:
            raise ValueError(f"Unknown decoding algorithm {level.algorithm!r}; use one of {sorted(ALGORITHMS)}")
    found: List[Tuple[Candidate, int]] = []
    _decode_level(list(candidates), levels, 0, found)
    return sorted(found, key=lambda item: (item[0].start, -item[0].end, item[1]))


def _decode_level(candidates, levels, depth, found):
    level = levels[depth]
    for span in ALGORITHMS[level.algorithm]([c for c in candidates if level.passes(c)]):
        found.append((span, depth))
        if depth + 1 < len(levels):
            inside = [
                c for c in candidates
                if span.start <= c.start and c.end <= span.end and (c.start, c.end) != (span.start, span.end)
            ]
            if inside:
                _decode_level(inside, levels, depth + 1, found)


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
