"""Fragments: every span of up to n tokens, their gold labels, and NONE down-sampling.

A set of fragments is an (F, 3) int64 array of (doc index, start, end) rows, ordered by
doc, start, then length. Gold spans are given per doc as (start, end, label id) triples
with label ids counted from 1 (0 is NONE).
"""

from typing import List, Sequence, Tuple

import numpy

EXACT, OVERLAP, DISJOINT, IGNORED = 0, 1, 2, 3


def enumerate_fragments(lengths: Sequence[int], max_length: int) -> numpy.ndarray:
    """All fragments of 1..max_length tokens of docs with the given lengths."""
    lengths = numpy.asarray(lengths, dtype="int64")
    total = int(lengths.sum())
    if total == 0:
        return numpy.zeros((0, 3), dtype="int64")
    doc_of_token = numpy.repeat(numpy.arange(len(lengths)), lengths)
    starts = numpy.arange(total) - (numpy.cumsum(lengths) - lengths)[doc_of_token]
    ends = starts[:, None] + numpy.arange(1, max_length + 1)[None, :]
    valid = ends <= lengths[doc_of_token][:, None]
    rows = numpy.broadcast_to(doc_of_token[:, None], ends.shape)[valid]
    return numpy.stack([rows, numpy.broadcast_to(starts[:, None], ends.shape)[valid], ends[valid]], axis=1)


def within_sentences(fragments: numpy.ndarray, lengths: Sequence[int], sent_starts: numpy.ndarray) -> numpy.ndarray:
    """The fragments that contain no sentence start but their first token. `sent_starts` has a
    flag per token of all docs, doc after doc (True where a token starts a sentence)."""
    if len(fragments) == 0:
        return fragments
    flat_start, flat_end = flat_bounds(fragments, lengths)
    starts_before = numpy.concatenate([[0], numpy.cumsum(numpy.asarray(sent_starts, dtype="int64"))])
    return fragments[starts_before[flat_end] - starts_before[flat_start + 1] == 0]


def edge_flagged(fragments: numpy.ndarray, lengths: Sequence[int], flags: numpy.ndarray) -> numpy.ndarray:
    """A mask of the fragments whose first or last token is flagged; `flags` has a flag per token
    of all docs, doc after doc (e.g. whitespace tokens, which never start or end an entity)."""
    if len(fragments) == 0:
        return numpy.zeros(0, dtype=bool)
    flags = numpy.asarray(flags, dtype=bool)
    first, end = flat_bounds(fragments, lengths)
    return flags[first] | flags[end - 1]


def flat_bounds(fragments: numpy.ndarray, lengths: Sequence[int]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Each fragment's [start, end) as rows of its batch's tokens, doc after doc."""
    offsets = (numpy.cumsum(lengths) - numpy.asarray(lengths))[fragments[:, 0]]
    return offsets + fragments[:, 1], offsets + fragments[:, 2]


def fragment_rows(fragments: numpy.ndarray, wanted: List[Tuple[int, int, int]]) -> numpy.ndarray:
    """The row of each (doc, start, end) among the fragments, -1 where none has those bounds."""
    wanted_arr = numpy.asarray(wanted, dtype="int64").reshape(-1, 3)
    if len(fragments) == 0:
        return numpy.full(len(wanted_arr), -1)
    width = int(max(fragments[:, 1:].max(), wanted_arr[:, 1:].max(initial=0))) + 1
    keys = (fragments[:, 0] * width + fragments[:, 1]) * width + fragments[:, 2]
    wanted_keys = (wanted_arr[:, 0] * width + wanted_arr[:, 1]) * width + wanted_arr[:, 2]
    order = numpy.argsort(keys, kind="stable")
    at = numpy.minimum(numpy.searchsorted(keys[order], wanted_keys), len(keys) - 1)
    return numpy.where(keys[order][at] == wanted_keys, order[at], -1)


def fragment_targets(
    fragments: numpy.ndarray, gold: List[List[Tuple[int, int, int]]], ignored: List[List[Tuple[int, int]]] = None
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Label id (0 = NONE) and kind (EXACT, OVERLAP, DISJOINT, IGNORED) of every fragment.

    A fragment equal to a gold span takes its label (the first one given, if a span is given
    twice); one that shares a token with a gold span (or with an `ignored` span, e.g. one of an
    unknown label) is OVERLAP, the rest DISJOINT. A fragment equal to an ignored span is IGNORED:
    it is neither trained as an entity nor as NONE. Linear in fragments and spans: overlap is read
    from a count of covered tokens, equality by bisection in the (start, length)-ordered fragments.
    """
    labels = numpy.zeros(len(fragments), dtype="int64")
    kinds = numpy.full(len(fragments), DISJOINT, dtype="int64")
    if len(fragments) == 0:
        return labels, kinds
    doc_bounds = numpy.searchsorted(fragments[:, 0], numpy.arange(len(gold) + 1))
    for doc_index, spans in enumerate(gold):
        lo, hi = doc_bounds[doc_index], doc_bounds[doc_index + 1]
        extra = list(ignored[doc_index]) if ignored else []
        if lo == hi or not (spans or extra):
            continue
        starts, ends = fragments[lo:hi, 1], fragments[lo:hi, 2]
        doc_labels, doc_kinds = labels[lo:hi], kinds[lo:hi]
        bounds = numpy.asarray([(start, end) for start, end, *_ in list(spans) + extra], dtype="int64")
        doc_kinds[_covered_tokens(bounds, int(max(ends.max(), bounds[:, 1].max())), starts, ends)] = OVERLAP
        width = int((ends - starts).max()) + 1  # fragment keys start * width + length grow with the rows
        keys = starts * width + (ends - starts)
        if extra:
            doc_kinds[_rows_equal_to(keys, width, bounds[len(spans):])[0]] = IGNORED
        if spans:
            gold_labels = numpy.asarray([label for _, _, label in spans], dtype="int64")
            rows, first = _rows_equal_to(keys, width, bounds[:len(spans)])
            doc_labels[rows] = gold_labels[first]
            doc_kinds[rows] = EXACT
    return labels, kinds


def _covered_tokens(bounds: numpy.ndarray, length: int, starts: numpy.ndarray, ends: numpy.ndarray) -> numpy.ndarray:
    """Whether each fragment [start, end) shares a token with one of the spans in `bounds`."""
    change = numpy.zeros(length + 1, dtype="int64")
    numpy.add.at(change, bounds[:, 0], 1)
    numpy.add.at(change, bounds[:, 1], -1)
    covered_before = numpy.concatenate([[0], numpy.cumsum(numpy.cumsum(change)[:length] > 0)])
    return covered_before[ends] - covered_before[starts] > 0


def _rows_equal_to(keys: numpy.ndarray, width: int, bounds: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The rows of the fragments equal to spans in `bounds` (each row once: a span given twice
    counts once), and the index in `bounds` of the first span each row equals."""
    lengths = bounds[:, 1] - bounds[:, 0]
    fits = numpy.flatnonzero((lengths > 0) & (lengths < width))
    span_keys, first = numpy.unique(bounds[fits, 0] * width + lengths[fits], return_index=True)
    at = numpy.minimum(numpy.searchsorted(keys, span_keys), len(keys) - 1)
    found = keys[at] == span_keys
    return at[found], fits[first[found]]


def sample_fragments(
    kinds: numpy.ndarray, overlap_rate: float, disjoint_rate: float, rng
) -> numpy.ndarray:
    """Indices of the fragments to train on: every gold one, and NONE ones at the given rates.

    `rng` is anything with a `random(size)` method (a numpy Generator or numpy.random).
    """
    draw = rng.random(len(kinds))
    keep = (kinds == EXACT) | ((kinds == OVERLAP) & (draw < overlap_rate)) | (
        (kinds == DISJOINT) & (draw < disjoint_rate)
    )
    return numpy.flatnonzero(keep)
