"""Lookups of 64-bit ids (ORTH ids, row hashes) in sorted arrays: one binary search per distinct id of a
batch, not a dictionary lookup per word, and a few bytes an id instead of a dictionary's; and the arrays of
rows such an index points into, grown as ids are added (`with_room`)."""

from typing import Optional, Sequence

import numpy
from thinc.api import get_array_module


def positions_in(keys: numpy.ndarray, queries: numpy.ndarray) -> numpy.ndarray:
    """Where each query is in the sorted `keys`, -1 where they lack it: one binary search per distinct query,
    never a pass over all the keys. The distinct queries are searched in sorted order, so that neighbouring
    searches share their first steps in the cache: on a million keys, about five times faster than searching
    a batch's words in text order. Queries already distinct and sorted (numpy.unique's) are searched as they are."""
    if len(keys) == 0:
        return numpy.full(queries.shape, -1, dtype="int64")
    if queries.ndim == 1 and bool((queries[1:] > queries[:-1]).all()):
        distinct, inverse = queries, None
    else:
        distinct, inverse = numpy.unique(queries, return_inverse=True)
    index = numpy.minimum(numpy.searchsorted(keys, distinct), len(keys) - 1)
    found = numpy.where(keys[index] == distinct, index, -1)
    return found if inverse is None else found[inverse.reshape(queries.shape)]


class SortedIndex:
    """64-bit ids (ORTH ids, row hashes) and their rows as two arrays sorted by id: a batch's ids are found
    by one binary search over all of them, not a dictionary lookup per id, and 174,609 ids take 2.8 MB
    instead of a dictionary's ~20 MB. Given an id twice, the later row is kept (as a dict's update)."""

    def __init__(self, ids: Sequence[int] = (), rows: Optional[numpy.ndarray] = None):
        ids = numpy.asarray(ids, dtype=numpy.uint64)
        rows = numpy.arange(len(ids), dtype=numpy.int64) if rows is None else numpy.asarray(rows, dtype=numpy.int64)
        order = numpy.argsort(ids, kind="stable")
        ids, rows = ids[order], rows[order]
        last = numpy.append(ids[1:] != ids[:-1], True)[:len(ids)]  # the last of each run of equal ids
        self.ids, self.rows = ids[last], rows[last]

    def __len__(self) -> int:
        return len(self.ids)

    def find(self, ids: numpy.ndarray) -> numpy.ndarray:
        """The rows of `ids` (uint64), -1 for an id not in the index."""
        at = positions_in(self.ids, numpy.asarray(ids, dtype=numpy.uint64))
        return numpy.where(at >= 0, self.rows[at] if len(self.rows) else -1, -1)

    def add(self, ids: numpy.ndarray, rows: numpy.ndarray) -> None:
        """Index the distinct ids `ids` at `rows`; an id already in the index moves to its new row."""
        ids, rows = numpy.asarray(ids, dtype=numpy.uint64), numpy.asarray(rows, dtype=numpy.int64)
        present = positions_in(self.ids, ids)
        self.rows[present[present >= 0]] = rows[present >= 0]
        ids, rows = ids[present < 0], rows[present < 0]
        order = numpy.argsort(ids)
        at = numpy.searchsorted(self.ids, ids[order])
        self.ids = numpy.insert(self.ids, at, ids[order])
        self.rows = numpy.insert(self.rows, at, rows[order])


def with_room(rows, n_rows: int, n_new: int, limit: Optional[int] = None):
    """`rows` (its first `n_rows` filled; numpy or cupy) with room for `n_new` more: the same array, or one
    twice as long (at most `limit` rows, where that leaves room)."""
    if n_rows + n_new <= len(rows):
        return rows
    size = max(2 * len(rows), n_rows + n_new)
    if limit is not None:
        size = max(min(size, limit), n_rows + n_new)
    grown = get_array_module(rows).zeros((size,) + rows.shape[1:], dtype=rows.dtype)
    grown[:n_rows] = rows[:n_rows]
    return grown
