"""Lookups of 64-bit ids (ORTH ids, row hashes) in sorted arrays: one binary search per distinct id of a
batch, not a dictionary lookup per word, and a few bytes an id instead of a dictionary's."""

from typing import Optional, Sequence

import numpy


def positions_in(keys: numpy.ndarray, queries: numpy.ndarray) -> numpy.ndarray:
    """Where each query is in the sorted `keys`, -1 where they lack it: one binary search per distinct query,
    never a pass over all the keys. The distinct queries are searched in sorted order, so that neighbouring
    searches share their first steps in the cache: on a million keys, about five times faster than searching
    a batch's words in text order."""
    if len(keys) == 0:
        return numpy.full(queries.shape, -1, dtype="int64")
    distinct, inverse = numpy.unique(queries, return_inverse=True)
    index = numpy.minimum(numpy.searchsorted(keys, distinct), len(keys) - 1)
    return numpy.where(keys[index] == distinct, index, -1)[inverse.reshape(queries.shape)]


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
        """Index the distinct ids `ids`, none of them in the index yet, at `rows`."""
        ids = numpy.asarray(ids, dtype=numpy.uint64)
        order = numpy.argsort(ids)
        at = numpy.searchsorted(self.ids, ids[order])
        self.ids = numpy.insert(self.ids, at, ids[order])
        self.rows = numpy.insert(self.rows, at, numpy.asarray(rows, dtype=numpy.int64)[order])
